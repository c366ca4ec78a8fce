/* Tokenizers: SentencePiece-style BPE ("llama") and byte-level BPE ("gpt2").
 *
 * The core is independent of any file format: a weir_tokenizer is built from a
 * weir_tokenizer_spec (vocabulary, scores, token types, merges, special ids) that the caller
 * fills from wherever it keeps them; weir_tokenizer_from_gguf() fills one from a GGUF file's
 * standard tokenizer.ggml.* keys. docs/tokenizers.md describes the algorithms.
 *
 * Errors: functions return 0 or a negative weir_status (sdk/include/weir/status.h). Where a
 * function takes (err, errlen) it writes one line saying what is wrong (err may be NULL
 * when errlen is 0).
 *
 * Thread-safety: a weir_tokenizer is immutable after creation; encode, decode and the piece
 * accessors may be called from any number of threads at once. A weir_detok belongs to one
 * caller at a time. */
#ifndef WEIR_MODEL_TOKENIZER_H
#define WEIR_MODEL_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum weir_tokenizer_type {
  WEIR_TOKENIZER_LLAMA = 1, /* SentencePiece BPE: merges chosen by piece score, ▁ for space,
                               <0xXX> byte fallback (GGUF tokenizer.ggml.model "llama") */
  WEIR_TOKENIZER_GPT2 = 2,  /* byte-level BPE: merges by rank, GPT-2 pre-tokenizer
                               (GGUF tokenizer.ggml.model "gpt2") */
  WEIR_TOKENIZER_BERT = 3,  /* WordPiece (GGUF tokenizer.ggml.model "bert"): ASCII letters
                               lowercased, split at whitespace and ASCII punctuation, each
                               word matched greedily longest-first as ▁word then its
                               continuations; a word that cannot be matched is unk. Pieces
                               are stored the GGUF way: ▁ for a word's start, continuations
                               without "##". */
} weir_tokenizer_type;

/* The split a gpt2 tokenizer applies before merging (GGUF tokenizer.ggml.pre). */
typedef enum weir_pretokenizer {
  WEIR_PRE_GPT2 = 0,   /* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
                          ("gpt2", "gpt-2", "default", absent, and anything unknown) */
  WEIR_PRE_LLAMA3 = 1, /* (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
                          ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
                          ("llama3", "llama-bpe", "llama-v3", "smaug-bpe") */
  WEIR_PRE_QWEN2 = 2,  /* the Llama-3 split with single digits (\p{N} for \p{N}{1,3}) ("qwen2") */
} weir_pretokenizer;

/* Token types, numbered as GGUF's tokenizer.ggml.token_type (and SentencePiece) do. */
typedef enum weir_token_type {
  WEIR_TOKEN_NORMAL = 1,
  WEIR_TOKEN_UNKNOWN = 2,
  WEIR_TOKEN_CONTROL = 3,      /* <s>, </s>, <|im_start|>: matched in text only on request */
  WEIR_TOKEN_USER_DEFINED = 4, /* always matched in text as a whole, never split */
  WEIR_TOKEN_UNUSED = 5,
  WEIR_TOKEN_BYTE = 6,         /* <0xXX> byte-fallback tokens (llama) */
} weir_token_type;

/* A byte string that need not be NUL-terminated. */
typedef struct weir_tok_str {
  const char *ptr;
  size_t len;
} weir_tok_str;

/* Everything a tokenizer is made of. Every pointer is borrowed for the duration of
 * weir_tokenizer_create (the tokenizer copies what it keeps). */
typedef struct weir_tokenizer_spec {
  weir_tokenizer_type type;
  int32_t n_tokens;               /* > 0 */
  const weir_tok_str *tokens;     /* n_tokens pieces; token id = index */
  const float *scores;            /* n_tokens scores (llama: required), or NULL */
  const int32_t *token_types;     /* n_tokens weir_token_type values, or NULL (all NORMAL) */
  int32_t n_merges;               /* gpt2: number of merges (rank = index) */
  const weir_tok_str *merges;     /* gpt2: "left right" (one ASCII space between) */
  int32_t bos_id, eos_id, unk_id, pad_id; /* -1 = none */
  int add_bos;                    /* prepend bos_id when encoding with add_special */
  int add_eos;                    /* append eos_id when encoding with add_special */
  int add_space_prefix;           /* llama: prepend ▁ to text (SentencePiece's
                                     add_dummy_prefix); ignored for gpt2 */
  weir_pretokenizer pre;          /* gpt2: how text is split before merging */
} weir_tokenizer_spec;

/* Fills the defaults: every id -1, add_bos/add_eos 0, add_space_prefix 1. */
void weir_tokenizer_spec_init(weir_tokenizer_spec *spec, weir_tokenizer_type type);

typedef struct weir_tokenizer weir_tokenizer;

/* Builds a tokenizer. Checks the spec: ids in range, scores present for llama, merges
 * well-formed for gpt2 (a merge whose result is not a token is ignored, as llama.cpp does).
 * WEIR_E_INVAL (message in err) or WEIR_E_NOMEM; *out is NULL on failure. */
int weir_tokenizer_create(const weir_tokenizer_spec *spec, weir_tokenizer **out, char *err,
                          size_t errlen);

struct weir_gguf;
/* Builds a tokenizer from a GGUF file's tokenizer.ggml.{model, tokens, scores, token_type,
 * merges, bos_token_id, eos_token_id, unknown_token_id, padding_token_id, add_bos_token,
 * add_eos_token, add_space_prefix}. Defaults when absent: add_bos 1 for llama, 0 for gpt2;
 * add_eos 0; add_space_prefix 1. WEIR_E_NOTFOUND for a missing required key, WEIR_E_FORMAT
 * for a malformed one, WEIR_E_NOTSUP for another tokenizer model; err names the key. */
int weir_tokenizer_from_gguf(const struct weir_gguf *g, weir_tokenizer **out, char *err,
                             size_t errlen);

/* NULL is a no-op. */
void weir_tokenizer_free(weir_tokenizer *t);

/* Facts. */
weir_tokenizer_type weir_tokenizer_get_type(const weir_tokenizer *t);
int32_t weir_tokenizer_n_tokens(const weir_tokenizer *t);
int32_t weir_tokenizer_bos(const weir_tokenizer *t); /* -1 when none */
int32_t weir_tokenizer_eos(const weir_tokenizer *t);
int32_t weir_tokenizer_unk(const weir_tokenizer *t);
int32_t weir_tokenizer_pad(const weir_tokenizer *t);
/* The token's type (WEIR_TOKEN_*), or 0 for an id out of range. */
int weir_tokenizer_token_type(const weir_tokenizer *t, int32_t id);
/* The token's score (llama merge priority; 0 when the spec had none or id out of range). */
float weir_tokenizer_token_score(const weir_tokenizer *t, int32_t id);
/* The vocabulary string of a token as stored (▁ and byte-level characters not undone).
 * Borrowed until weir_tokenizer_free. WEIR_E_RANGE for an id out of range. */
int weir_tokenizer_token_text(const weir_tokenizer *t, int32_t id, weir_tok_str *out);
/* The bytes a token decodes to (▁ -> ' ', <0xXX> -> that byte, byte-level characters
 * mapped back to bytes, control tokens as their text). May be an incomplete or invalid UTF-8
 * sequence. Borrowed until weir_tokenizer_free. WEIR_E_RANGE for an id out of range. */
int weir_tokenizer_token_bytes(const weir_tokenizer *t, int32_t id, weir_tok_str *out);
/* The id of a token whose vocabulary string is exactly s[0..len), or -1. */
int32_t weir_tokenizer_find(const weir_tokenizer *t, const char *s, size_t len);

/* Encode flags. */
enum {
  WEIR_ENCODE_ADD_SPECIAL = 1,   /* add BOS/EOS as the spec's add_bos/add_eos say */
  WEIR_ENCODE_PARSE_SPECIAL = 2, /* control tokens written in the text (<|im_start|>, </s>)
                                    become their ids; without it they are ordinary text */
};

/* Encodes len bytes of text (any bytes; invalid UTF-8 falls back to byte tokens or unk).
 * On success *ids is a malloc'd array of *n ids (the caller frees it; may be NULL when
 * *n == 0). WEIR_E_INVAL for bad arguments, WEIR_E_NOMEM. Cost O(n log n) in the length. */
int weir_tokenizer_encode(const weir_tokenizer *t, const char *text, size_t len, int flags,
                          int32_t **ids, size_t *n);

/* Decode flags. */
enum {
  WEIR_DECODE_SKIP_SPECIAL = 1,  /* control and unknown tokens produce nothing */
  WEIR_DECODE_KEEP_PREFIX_SPACE = 2, /* llama: keep the leading space of the first piece.
                                    By default (as SentencePiece does) a space at the very
                                    start of the output, which encode's dummy prefix put
                                    there, is dropped. Pass this when decoding a
                                    continuation (generated tokens after a prompt). */
};

/* Decodes ids to UTF-8 text. Bytes that do not form valid UTF-8 become U+FFFD, one per
 * maximal invalid subpart (the Unicode "best practice"), so the result is always valid
 * UTF-8. *out is malloc'd and NUL-terminated, *out_len its length without the NUL.
 * WEIR_E_RANGE for an id out of range, WEIR_E_NOMEM. */
int weir_tokenizer_decode(const weir_tokenizer *t, const int32_t *ids, size_t n, int flags,
                          char **out, size_t *out_len);

/* Incremental detokenizer for streaming: feed ids one at a time, get back only complete,
 * valid UTF-8; an incomplete trailing sequence is held back until the next token completes
 * it (or flush). Concatenating every feed's output and flush's output equals
 * weir_tokenizer_decode of the same ids with the same flags.
 * Usage:
 *   weir_detok d; weir_detok_init(&d, tok, WEIR_DECODE_KEEP_PREFIX_SPACE);
 *   for each id: weir_detok_feed(&d, id, &s, &len) -> send s[0..len) if len > 0
 *   weir_detok_flush(&d, &s, &len); weir_detok_free(&d);
 * The returned text is owned by the weir_detok and valid until its next call. The
 * tokenizer must outlive the weir_detok. */
typedef struct weir_detok {
  const weir_tokenizer *tok;
  int flags;
  int started;        /* a non-empty piece has been emitted (prefix-space rule) */
  unsigned char pending[4]; /* an incomplete UTF-8 sequence carried to the next feed */
  int npending;
  char *buf;          /* output of the last call */
  size_t cap;
} weir_detok;

void weir_detok_init(weir_detok *d, const weir_tokenizer *t, int flags);
/* WEIR_E_RANGE for an id out of range (nothing is consumed), WEIR_E_NOMEM. */
int weir_detok_feed(weir_detok *d, int32_t id, const char **text, size_t *len);
/* Emits what is held back (an incomplete sequence becomes U+FFFD) and resets the state so
 * the object can be reused for a new stream. */
int weir_detok_flush(weir_detok *d, const char **text, size_t *len);
void weir_detok_free(weir_detok *d);

/* Internal, for tests: the length in bytes of the first piece `pre` splits s[0..n) into
 * (n > 0). */
size_t weir__pretok_next(weir_pretokenizer pre, const char *s, size_t n);

#ifdef __cplusplus
}
#endif
#endif
