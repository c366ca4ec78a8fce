/* Loads the committed tokenizer fixtures (tests/tokenizer/fixtures/, written by the
 * generators in tests/tokenizer/gen/) into weir_tokenizers, and reads their test cases. */
#ifndef WEIR_TEST_TOK_FIXTURES_H
#define WEIR_TEST_TOK_FIXTURES_H

#include <stddef.h>
#include <stdint.h>

#include "model/tokenizer.h"

typedef struct fx_case {
  char *text;
  size_t text_len;
  int32_t *ids;
  size_t n_ids;
  char *decoded; /* third column when present (llama), else NULL */
  size_t decoded_len;
} fx_case;

/* The SentencePiece model trained by gen_llama.py (add_bos as llama models set it). */
weir_tokenizer *fx_llama(void);
/* GPT-2's vocabulary subset laid out at its real ids (the other ids are UNUSED fillers). */
weir_tokenizer *fx_gpt2(void);
/* Reads "<name>_cases.tsv"; returns the number of cases (or -1). */
int fx_cases(const char *name, fx_case **out);
void fx_cases_free(fx_case *c, int n);

typedef struct fx_split {
  weir_pretokenizer pre;
  char *text;
  size_t text_len;
  size_t *lens; /* byte length of each piece */
  size_t n;
} fx_split;

/* Reads splits.tsv; returns the number of cases (or -1). */
int fx_splits(fx_split **out);
void fx_splits_free(fx_split *s, int n);

#endif
