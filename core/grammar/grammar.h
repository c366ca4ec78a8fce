/* Structured-output constraints: JSON, JSON Schema, regex, choice and EBNF grammars compiled
 * to one context-free grammar over bytes, matched incrementally against generated tokens,
 * and turned into the allowed-token mask a sampler receives (weir_sampling_params.allowed).
 * docs/structured-output.md describes the supported subset, the limits and the design.
 *
 * The objects, from the request to the step:
 *   weir_grammar        a compiled constraint, independent of any tokenizer. Immutable.
 *   weir_grammar_vocab  a tokenizer's vocabulary as byte strings, sorted into a token trie.
 *                       Immutable; one per model.
 *   weir_constraint     a grammar bound to a vocabulary, with its lazily filled per-position
 *                       token classes. Shared by every request using the same schema;
 *                       thread-safe; reference counted.
 *   weir_constraint_cache  compiled constraints by canonical text (bounded, thread-safe).
 *   weir_matcher        one sequence's state: the bytes generated so far, as an Earley chart.
 *                       Cheap to clone (n > 1), rolls back by tokens (speculative decoding).
 *
 * Per step the engine asks weir_matchers_fill_masks() for the masks of all its constrained
 * sequences at once (run in parallel on the CPU pool), samples, then advances each matcher
 * with weir_matcher_accept_token(). Drafted tokens are checked with weir_matcher_accept_token
 * as they are verified, and undone with weir_matcher_rollback().
 *
 * Errors: functions return 0 or a negative weir_status; compile errors also write one line
 * (err, errlen) meant for the client, e.g. "unsupported keyword \"uniqueItems\" at
 * /properties/tags". Thread-safety is stated per object above; a weir_matcher belongs to one
 * thread at a time. */
#ifndef WEIR_GRAMMAR_H
#define WEIR_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "util/threadpool.h"

struct weir_tokenizer;

typedef enum weir_constraint_kind {
  WEIR_CONSTRAINT_JSON_OBJECT = 1, /* any JSON object; text unused */
  WEIR_CONSTRAINT_JSON_SCHEMA = 2, /* text: a JSON Schema document */
  WEIR_CONSTRAINT_REGEX = 3,       /* text: a regular expression, matched in full */
  WEIR_CONSTRAINT_CHOICE = 4,      /* text: a JSON array of strings; output is one of them */
  WEIR_CONSTRAINT_GRAMMAR = 5,     /* text: an EBNF (GBNF-style) grammar with a `root` rule */
} weir_constraint_kind;

/* Limits; weir_grammar_limits_default() gives the documented defaults. A schema, regex or
 * grammar beyond one is refused with a message naming the limit. */
typedef struct weir_grammar_limits {
  size_t max_text_bytes;     /* source text (1 MiB) */
  int32_t max_depth;         /* JSON Schema nesting / regex and grammar group nesting (64) */
  int32_t max_schema_nodes;  /* subschemas visited, $ref expansions included (20000) */
  uint32_t max_repeat;       /* the largest finite bound of {m,n}, minLength, maxItems... (10000) */
  uint32_t max_nfa_states;   /* automaton states before determinization (2,000,000) */
  uint32_t max_dfa_states;   /* positions of the compiled grammar (200,000) */
  /* CPU time one compile may take (10,000 ms; 0: none), of the thread that compiles: a
   * loaded machine or a low-priority thread does not make a constraint fail. Checked as
   * expression nodes and automaton states are made: a constraint within the size limits that
   * is still slow to compile is refused, so that no compile holds a worker without end
   * (issue 28). */
  uint32_t max_compile_ms;
} weir_grammar_limits;

void weir_grammar_limits_default(weir_grammar_limits *l);

typedef struct weir_constraint_spec {
  weir_constraint_kind kind;
  const char *text; /* need not be NUL-terminated */
  size_t len;
  /* JSON Schema: 1 makes an unsupported keyword an error naming it; 0 ignores it (the
   * output then satisfies the schema without that keyword). */
  int strict;
  /* JSON Schema and json_object: the whitespace allowed between tokens: 0 none (compact
   * JSON), 1 (default) one space or newlines with up to 20 spaces or tabs of indentation. */
  int whitespace;
  const weir_grammar_limits *limits; /* NULL: the defaults */
} weir_constraint_spec;

typedef struct weir_grammar weir_grammar;

/* Compiles a constraint. WEIR_E_INVAL (err says what and where: an unsupported keyword, an
 * invalid regex, a schema that can produce nothing, a limit exceeded), WEIR_E_NOMEM. */
int weir_grammar_compile(const weir_constraint_spec *spec, weir_grammar **out, char *err,
                         size_t errlen);
/* Reference counting; release accepts NULL. Thread-safe. */
weir_grammar *weir_grammar_retain(weir_grammar *g);
void weir_grammar_release(weir_grammar *g);
/* Size facts, for logs and benchmarks. */
uint32_t weir_grammar_num_rules(const weir_grammar *g);
uint32_t weir_grammar_num_positions(const weir_grammar *g);

/* ---- vocabulary ------------------------------------------------------------------------- */

typedef struct weir_grammar_vocab weir_grammar_vocab;

/* One token of a vocabulary: the bytes it decodes to, and whether it may ever be constrained
 * text. Special tokens (control, unknown, unused) are never allowed by a mask except the EOS
 * ids, which are allowed exactly when the grammar is complete. */
typedef struct weir_vocab_token {
  const uint8_t *bytes; /* borrowed for weir_grammar_vocab_create */
  uint32_t len;
  int special;
} weir_vocab_token;

/* Builds a vocabulary of n tokens (token id = index). eos: the ids that end a sequence
 * (n_eos >= 0). WEIR_E_INVAL, WEIR_E_NOMEM. */
int weir_grammar_vocab_create(const weir_vocab_token *tokens, int32_t n, const int32_t *eos,
                              int32_t n_eos, weir_grammar_vocab **out);
/* From a tokenizer: bytes from weir_tokenizer_token_bytes (SentencePiece ▁ and <0xXX> byte
 * tokens decoded), control / unknown / unused tokens special, eos as given (the engine passes
 * its end-of-generation ids). */
int weir_grammar_vocab_from_tokenizer(const struct weir_tokenizer *t, const int32_t *eos,
                                      int32_t n_eos, weir_grammar_vocab **out);
weir_grammar_vocab *weir_grammar_vocab_retain(weir_grammar_vocab *v);
void weir_grammar_vocab_release(weir_grammar_vocab *v);
int32_t weir_grammar_vocab_size(const weir_grammar_vocab *v);

/* ---- constraints ------------------------------------------------------------------------ */

typedef struct weir_constraint weir_constraint;

/* Binds a grammar to a vocabulary (both retained). WEIR_E_NOMEM. */
int weir_constraint_create(weir_grammar *g, weir_grammar_vocab *v, weir_constraint **out);
weir_constraint *weir_constraint_retain(weir_constraint *c);
void weir_constraint_release(weir_constraint *c);
/* Computes every position's token classes now instead of on first use (a benchmark and
 * start-up option; masks are correct either way). Runs on `pool` (may be NULL). */
int weir_constraint_precompute(weir_constraint *c, weir_threadpool *pool);
/* Bytes held by the token classes computed so far. */
size_t weir_constraint_memory(const weir_constraint *c);

/* ---- the cache -------------------------------------------------------------------------- */

typedef struct weir_constraint_cache weir_constraint_cache;

/* A cache of at most max_entries constraints (and recent compile errors) over one vocabulary,
 * evicted least recently used, also while their memory (weir_constraint_memory, which grows
 * as token classes are computed) exceeds max_bytes (0: no byte bound). An evicted constraint
 * lives on while requests hold it. Thread-safe. */
int weir_constraint_cache_create(weir_grammar_vocab *v, int32_t max_entries, size_t max_bytes,
                                 weir_constraint_cache **out);
void weir_constraint_cache_free(weir_constraint_cache *cache);
/* The constraint for spec, compiled on a miss (the caller's thread). The key is the kind, the
 * options and the canonical text (JSON texts re-serialized compactly, so whitespace does not
 * matter). On success *out holds a new reference (release it). A compile error is returned
 * (and cached) as for weir_grammar_compile. */
int weir_constraint_cache_get(weir_constraint_cache *cache, const weir_constraint_spec *spec,
                              weir_constraint **out, char *err, size_t errlen);
/* Evicts the entries not used for more than max_idle_ns (a constraint a request still holds
 * lives on with it), so that a burst of one-off constraints does not stay resident after it
 * (issue 28: RSS back to idle). Returns how many were evicted; *freed_bytes (may be NULL)
 * gets their weir_constraint_memory and keys. Thread-safe. */
int32_t weir_constraint_cache_expire(weir_constraint_cache *cache, uint64_t max_idle_ns,
                                    size_t *freed_bytes);
/* Hits, misses and entries, for metrics. */
void weir_constraint_cache_stats(weir_constraint_cache *cache, uint64_t *hits, uint64_t *misses,
                                 int32_t *entries);

/* ---- matchers --------------------------------------------------------------------------- */

typedef struct weir_matcher weir_matcher;

/* A matcher at the start of the constraint (retained). WEIR_E_NOMEM. */
int weir_matcher_create(weir_constraint *c, weir_matcher **out);
/* An independent copy (n > 1 forks). WEIR_E_NOMEM. */
int weir_matcher_clone(const weir_matcher *m, weir_matcher **out);
void weir_matcher_free(weir_matcher *m);

/* Advances by one token. An EOS id is accepted only when the grammar is complete and ends
 * the matcher (nothing more is accepted). WEIR_E_INVAL when the token is not allowed (the
 * state is unchanged), WEIR_E_RANGE for an id outside the vocabulary, WEIR_E_NOMEM. */
int weir_matcher_accept_token(weir_matcher *m, int32_t token);
/* Advances by raw bytes (not a token boundary for rollback purposes: counts as one step).
 * WEIR_E_INVAL when a byte is not allowed (the state is unchanged). */
int weir_matcher_accept_bytes(weir_matcher *m, const uint8_t *bytes, size_t len);
/* Undoes the last n accepted steps (tokens or byte strings). WEIR_E_RANGE when fewer were
 * accepted. */
int weir_matcher_rollback(weir_matcher *m, int32_t n);
/* Steps accepted so far (what rollback can undo). */
int32_t weir_matcher_num_steps(const weir_matcher *m);
/* 1 when the text so far is a complete match (EOS allowed). */
int weir_matcher_is_complete(const weir_matcher *m);
/* 1 when more bytes can follow (0 when complete and nothing can extend it: EOS is forced). */
int weir_matcher_can_continue(const weir_matcher *m);
/* 1 after an EOS token was accepted. */
int weir_matcher_is_ended(const weir_matcher *m);

/* Writes the allowed-token mask (WEIR_MASK_WORDS(vocab size) words, bit t of word t / 32):
 * the tokens whose bytes can continue the text, and the EOS ids when the text is complete.
 * All zero once ended. Never empty otherwise when the vocabulary can spell every byte
 * (SentencePiece with byte fallback and byte-level BPE can); with one that cannot, an empty
 * mask means no token can continue and the engine must end the sequence. WEIR_E_NOMEM. */
int weir_matcher_fill_mask(weir_matcher *m, uint32_t *mask);
/* The masks of n matchers, mask i at masks + i * stride_words, computed in parallel on
 * `pool` (NULL: on the caller). A NULL matcher gets an all-ones mask. Returns the first
 * error. Each matcher must not be used by another thread during the call. */
int weir_matchers_fill_masks(weir_matcher *const *ms, int32_t n, uint32_t *masks,
                             size_t stride_words, weir_threadpool *pool);

#endif
