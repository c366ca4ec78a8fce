/* Tokenizers: SentencePiece BPE ("llama") and byte-level BPE ("gpt2"). See tokenizer.h and
 * docs/tokenizers.md.
 *
 * Both encoders run the same merge loop: the text (or one pre-tokenized word) starts as a
 * doubly linked list of symbols (one UTF-8 character for llama, one byte for gpt2); every
 * adjacent pair that could merge goes into a binary heap keyed by its priority (the merged
 * piece's score for llama, minus the merge rank for gpt2), ties going to the leftmost pair;
 * popping the best pair merges it and queues the two new neighbour pairs. Heap entries made
 * stale by an earlier merge are recognised and dropped when popped. Each merge costs
 * O(log n), so a long input costs O(n log n) rather than the O(n^2) of rescanning. */
#include "tokenizer.h"
#include "util/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "util/utf8.h"
#include "weir/status.h"

/* ---- small hash tables ---- */

static uint64_t hash_bytes(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (size_t i = 0; i < n; i++) {
    h ^= (unsigned char)s[i];
    h *= 1099511628211ull;
  }
  return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

typedef struct merge_slot {
  uint64_t key; /* left id << 32 | right id; UINT64_MAX = empty */
  int32_t rank;
  int32_t result;
} merge_slot;

struct weir_tokenizer {
  weir_tokenizer_type type;
  int32_t n_tokens;
  char *text_blob;       /* every token's vocabulary string, back to back */
  size_t *text_off;      /* n_tokens + 1 offsets into text_blob */
  char *piece_blob;      /* every token's decoded bytes */
  size_t *piece_off;     /* n_tokens + 1 offsets into piece_blob */
  float *scores;
  int32_t *types;
  int32_t *vocab_slots;  /* open addressing: token ids, -1 empty */
  size_t vocab_mask;
  merge_slot *merges;    /* gpt2 */
  size_t merge_mask;
  int32_t *specials;     /* ids matched in text, longest first */
  int32_t n_specials;
  int32_t byte_tok[256]; /* llama: <0xXX>; gpt2: the byte-level character's token */
  int32_t bos, eos, unk, pad;
  int add_bos, add_eos, add_space_prefix;
  weir_pretokenizer pre;
  size_t max_text_len;   /* the longest vocabulary string (bounds WordPiece's search) */
};


static const char *tok_text(const weir_tokenizer *t, int32_t id, size_t *len) {
  *len = t->text_off[id + 1] - t->text_off[id];
  return t->text_blob + t->text_off[id];
}

int32_t weir_tokenizer_find(const weir_tokenizer *t, const char *s, size_t len) {
  size_t i = (size_t)hash_bytes(s, len) & t->vocab_mask;
  for (;;) {
    int32_t id = t->vocab_slots[i];
    if (id < 0) return -1;
    size_t tl;
    const char *tt = tok_text(t, id, &tl);
    if (tl == len && memcmp(tt, s, len) == 0) return id;
    i = (i + 1) & t->vocab_mask;
  }
}

static const merge_slot *merge_find(const weir_tokenizer *t, int32_t l, int32_t r) {
  if (!t->merges) return NULL;
  uint64_t key = ((uint64_t)(uint32_t)l << 32) | (uint32_t)r;
  size_t i = (size_t)hash_u64(key) & t->merge_mask;
  for (;;) {
    const merge_slot *m = &t->merges[i];
    if (m->key == UINT64_MAX) return NULL;
    if (m->key == key) return m;
    i = (i + 1) & t->merge_mask;
  }
}

/* ---- the GPT-2 byte <-> unicode map ---- */

/* GPT-2 shows each byte as a printable character: the printable Latin-1 bytes stand for
 * themselves, the other 68 bytes are numbered in order from U+0100. The map is built once
 * per tokenizer; the inverse covers code points up to U+0143. */
enum { GPT2_CP_LIMIT = 0x100 + 68 };

static int byte_is_printable(unsigned b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

static void gpt2_byte_maps(uint32_t byte_cp[256], int16_t cp_byte[GPT2_CP_LIMIT]) {
  uint32_t next = 0x100;
  for (int c = 0; c < GPT2_CP_LIMIT; c++) cp_byte[c] = -1;
  for (unsigned b = 0; b < 256; b++) {
    byte_cp[b] = byte_is_printable(b) ? b : next++;
    cp_byte[byte_cp[b]] = (int16_t)b;
  }
}

/* ---- creation ---- */

void weir_tokenizer_spec_init(weir_tokenizer_spec *spec, weir_tokenizer_type type) {
  memset(spec, 0, sizeof *spec);
  spec->type = type;
  spec->bos_id = spec->eos_id = spec->unk_id = spec->pad_id = -1;
  spec->add_space_prefix = 1;
}

void weir_tokenizer_free(weir_tokenizer *t) {
  if (!t) return;
  free(t->text_blob);
  free(t->text_off);
  free(t->piece_blob);
  free(t->piece_off);
  free(t->scores);
  free(t->types);
  free(t->vocab_slots);
  free(t->merges);
  free(t->specials);
  free(t);
}

static int is_byte_token(const char *s, size_t n, unsigned *byte) {
  static const char hex[] = "0123456789ABCDEF";
  if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return 0;
  const char *h = strchr(hex, s[3]), *l = strchr(hex, s[4]);
  if (!h || !l || !s[3] || !s[4]) return 0;
  *byte = (unsigned)((h - hex) * 16 + (l - hex));
  return 1;
}

/* Writes token id's decoded bytes at out (room for 2x its text) and returns the length. */
static size_t make_piece(const weir_tokenizer *t, int32_t id, const int16_t *cp_byte,
                         char *out) {
  size_t n;
  const char *s = tok_text(t, id, &n);
  int type = t->types[id];
  size_t o = 0;
  if (type == WEIR_TOKEN_CONTROL || type == WEIR_TOKEN_UNKNOWN ||
      (t->type == WEIR_TOKENIZER_GPT2 && type == WEIR_TOKEN_USER_DEFINED)) {
    memcpy(out, s, n);
    return n;
  }
  if (t->type != WEIR_TOKENIZER_GPT2) { /* llama and bert: ▁ is a space */
    unsigned b;
    if (type == WEIR_TOKEN_BYTE && is_byte_token(s, n, &b)) {
      out[0] = (char)b;
      return 1;
    }
    for (size_t i = 0; i < n;) {
      if (i + 3 <= n && memcmp(s + i, "\xE2\x96\x81", 3) == 0) {
        out[o++] = ' ';
        i += 3;
      } else {
        out[o++] = s[i++];
      }
    }
    return o;
  }
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    int valid;
    int k = weir_utf8_next((const unsigned char *)s + i, n - i, &cp, &valid);
    int b = valid && cp < GPT2_CP_LIMIT ? cp_byte[cp] : -1;
    if (b >= 0) {
      out[o++] = (char)b;
    } else {
      memcpy(out + o, s + i, (size_t)k);
      o += (size_t)k;
    }
    i += (size_t)k;
  }
  return o;
}

static int cmp_special(const void *a, const void *b, void *ctx) {
  const weir_tokenizer *t = ctx;
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  size_t lx = t->text_off[x + 1] - t->text_off[x], ly = t->text_off[y + 1] - t->text_off[y];
  if (lx != ly) return lx > ly ? -1 : 1;
  return x < y ? -1 : x > y;
}

static int build_merges(weir_tokenizer *t, const weir_tokenizer_spec *spec, char *err,
                        size_t errlen) {
  size_t cap = 16;
  while (cap < 2 * (size_t)spec->n_merges) cap *= 2;
  t->merges = malloc(cap * sizeof *t->merges);
  if (!t->merges) return WEIR_E_NOMEM;
  for (size_t i = 0; i < cap; i++) t->merges[i].key = UINT64_MAX;
  t->merge_mask = cap - 1;
  char *tmp = NULL;
  size_t tmpcap = 0;
  for (int32_t r = 0; r < spec->n_merges; r++) {
    const char *m = spec->merges[r].ptr;
    size_t n = spec->merges[r].len;
    const char *sp = n > 1 ? memchr(m + 1, ' ', n - 1) : NULL;
    if (!m || !sp || sp + 1 >= m + n) {
      weir_set_err(err, errlen, "merge %d is not \"left right\"", (int)r);
      free(tmp);
      return WEIR_E_INVAL;
    }
    size_t ln = (size_t)(sp - m), rn = n - ln - 1;
    int32_t l = weir_tokenizer_find(t, m, ln), rr = weir_tokenizer_find(t, sp + 1, rn);
    if (ln + rn > tmpcap) {
      tmpcap = 2 * (ln + rn);
      char *nt = realloc(tmp, tmpcap);
      if (!nt) {
        free(tmp);
        return WEIR_E_NOMEM;
      }
      tmp = nt;
    }
    memcpy(tmp, m, ln);
    memcpy(tmp + ln, sp + 1, rn);
    int32_t res = weir_tokenizer_find(t, tmp, ln + rn);
    /* A merge whose parts or result are not tokens can never apply: skip it. */
    if (l < 0 || rr < 0 || res < 0) continue;
    uint64_t key = ((uint64_t)(uint32_t)l << 32) | (uint32_t)rr;
    size_t i = (size_t)hash_u64(key) & t->merge_mask;
    while (t->merges[i].key != UINT64_MAX && t->merges[i].key != key) i = (i + 1) & t->merge_mask;
    if (t->merges[i].key == key) continue; /* a duplicate keeps its first (best) rank */
    t->merges[i].key = key;
    t->merges[i].rank = r;
    t->merges[i].result = res;
  }
  free(tmp);
  return 0;
}

int weir_tokenizer_create(const weir_tokenizer_spec *spec, weir_tokenizer **out, char *err,
                          size_t errlen) {
  int rc = WEIR_E_NOMEM;
  weir_tokenizer *t = NULL;
  if (out) *out = NULL;
  if (!spec || !out) return WEIR_E_INVAL;
  if (spec->type != WEIR_TOKENIZER_LLAMA && spec->type != WEIR_TOKENIZER_GPT2 &&
      spec->type != WEIR_TOKENIZER_BERT) {
    weir_set_err(err, errlen, "unknown tokenizer type %d", (int)spec->type);
    return WEIR_E_INVAL;
  }
  if (spec->n_tokens <= 0 || !spec->tokens) {
    weir_set_err(err, errlen, "the vocabulary is empty");
    return WEIR_E_INVAL;
  }
  if (spec->type == WEIR_TOKENIZER_LLAMA && !spec->scores) {
    weir_set_err(err, errlen, "a llama tokenizer needs token scores");
    return WEIR_E_INVAL;
  }
  if (spec->n_merges < 0 || (spec->n_merges > 0 && !spec->merges)) {
    weir_set_err(err, errlen, "bad merges");
    return WEIR_E_INVAL;
  }
  const int32_t ids[4] = {spec->bos_id, spec->eos_id, spec->unk_id, spec->pad_id};
  static const char *const idnames[4] = {"bos", "eos", "unknown", "padding"};
  for (int i = 0; i < 4; i++)
    if (ids[i] < -1 || ids[i] >= spec->n_tokens) {
      weir_set_err(err, errlen, "%s token id %d is outside the vocabulary of %d", idnames[i],
              (int)ids[i], (int)spec->n_tokens);
      return WEIR_E_INVAL;
    }
  if ((spec->add_bos && spec->bos_id < 0) || (spec->add_eos && spec->eos_id < 0)) {
    const char *which = spec->add_bos && spec->bos_id < 0 ? "bos" : "eos";
    weir_set_err(err, errlen, "add_%s is set but there is no %s token", which, which);
    return WEIR_E_INVAL;
  }

  t = calloc(1, sizeof *t);
  if (!t) goto fail;
  int32_t n = spec->n_tokens;
  t->type = spec->type;
  t->n_tokens = n;
  t->bos = spec->bos_id;
  t->eos = spec->eos_id;
  t->unk = spec->unk_id;
  t->pad = spec->pad_id;
  t->add_bos = !!spec->add_bos;
  t->add_eos = !!spec->add_eos;
  t->add_space_prefix = spec->type == WEIR_TOKENIZER_LLAMA && spec->add_space_prefix;
  t->pre = spec->pre;
  if (t->pre != WEIR_PRE_GPT2 && t->pre != WEIR_PRE_LLAMA3 && t->pre != WEIR_PRE_QWEN2) {
    weir_set_err(err, errlen, "unknown pre-tokenizer %d", (int)spec->pre);
    rc = WEIR_E_INVAL;
    goto fail;
  }

  size_t total = 0;
  for (int32_t i = 0; i < n; i++) {
    if (!spec->tokens[i].ptr && spec->tokens[i].len) {
      weir_set_err(err, errlen, "token %d has no text", (int)i);
      rc = WEIR_E_INVAL;
      goto fail;
    }
    total += spec->tokens[i].len;
    if (spec->tokens[i].len > t->max_text_len) t->max_text_len = spec->tokens[i].len;
  }
  t->text_blob = malloc(total + 1);
  t->text_off = malloc(((size_t)n + 1) * sizeof *t->text_off);
  t->types = malloc((size_t)n * sizeof *t->types);
  t->scores = malloc((size_t)n * sizeof *t->scores);
  if (!t->text_blob || !t->text_off || !t->types || !t->scores) goto fail;
  size_t off = 0;
  for (int32_t i = 0; i < n; i++) {
    t->text_off[i] = off;
    if (spec->tokens[i].len) memcpy(t->text_blob + off, spec->tokens[i].ptr, spec->tokens[i].len);
    off += spec->tokens[i].len;
    int ty = spec->token_types ? spec->token_types[i] : WEIR_TOKEN_NORMAL;
    if (ty < WEIR_TOKEN_NORMAL || ty > WEIR_TOKEN_BYTE) {
      weir_set_err(err, errlen, "token %d has unknown type %d", (int)i, ty);
      rc = WEIR_E_INVAL;
      goto fail;
    }
    t->types[i] = ty;
    t->scores[i] = spec->scores ? spec->scores[i] : 0.0f;
  }
  t->text_off[n] = off;

  /* The vocabulary index. On duplicate strings the lowest id wins, as in llama.cpp. */
  size_t cap = 16;
  while (cap < 2 * (size_t)n) cap *= 2;
  t->vocab_slots = malloc(cap * sizeof *t->vocab_slots);
  if (!t->vocab_slots) goto fail;
  memset(t->vocab_slots, 0xff, cap * sizeof *t->vocab_slots);
  t->vocab_mask = cap - 1;
  for (int32_t i = 0; i < n; i++) {
    size_t len;
    const char *s = tok_text(t, i, &len);
    if (weir_tokenizer_find(t, s, len) >= 0) continue;
    size_t h = (size_t)hash_bytes(s, len) & t->vocab_mask;
    while (t->vocab_slots[h] >= 0) h = (h + 1) & t->vocab_mask;
    t->vocab_slots[h] = i;
  }

  /* Byte tokens. */
  uint32_t byte_cp[256];
  int16_t cp_byte[GPT2_CP_LIMIT];
  gpt2_byte_maps(byte_cp, cp_byte);
  for (int b = 0; b < 256; b++) {
    char buf[8];
    int len;
    if (t->type == WEIR_TOKENIZER_LLAMA) len = snprintf(buf, sizeof buf, "<0x%02X>", b);
    else len = weir_utf8_put(byte_cp[b], buf);
    t->byte_tok[b] = weir_tokenizer_find(t, buf, (size_t)len);
  }

  if (t->type == WEIR_TOKENIZER_GPT2 && spec->n_merges > 0) {
    rc = build_merges(t, spec, err, errlen);
    if (rc) goto fail;
    rc = WEIR_E_NOMEM;
  }

  /* Decoded pieces. */
  t->piece_blob = malloc(2 * total + 1);
  t->piece_off = malloc(((size_t)n + 1) * sizeof *t->piece_off);
  if (!t->piece_blob || !t->piece_off) goto fail;
  off = 0;
  for (int32_t i = 0; i < n; i++) {
    t->piece_off[i] = off;
    off += make_piece(t, i, cp_byte, t->piece_blob + off);
  }
  t->piece_off[n] = off;

  /* Tokens matched in text as wholes: control, user-defined and unknown, longest first. */
  t->specials = malloc((size_t)n * sizeof *t->specials);
  if (!t->specials) goto fail;
  for (int32_t i = 0; i < n; i++) {
    int ty = t->types[i];
    if ((ty == WEIR_TOKEN_CONTROL || ty == WEIR_TOKEN_USER_DEFINED || ty == WEIR_TOKEN_UNKNOWN) &&
        t->text_off[i + 1] > t->text_off[i])
      t->specials[t->n_specials++] = i;
  }
  qsort_r(t->specials, (size_t)t->n_specials, sizeof *t->specials, cmp_special, t);

  *out = t;
  return 0;

fail:
  if (rc == WEIR_E_NOMEM) weir_set_err(err, errlen, "out of memory building the tokenizer");
  weir_tokenizer_free(t);
  return rc;
}

/* ---- facts ---- */

weir_tokenizer_type weir_tokenizer_get_type(const weir_tokenizer *t) { return t->type; }
int32_t weir_tokenizer_n_tokens(const weir_tokenizer *t) { return t->n_tokens; }
int32_t weir_tokenizer_bos(const weir_tokenizer *t) { return t->bos; }
int32_t weir_tokenizer_eos(const weir_tokenizer *t) { return t->eos; }
int32_t weir_tokenizer_unk(const weir_tokenizer *t) { return t->unk; }
int32_t weir_tokenizer_pad(const weir_tokenizer *t) { return t->pad; }

int weir_tokenizer_token_type(const weir_tokenizer *t, int32_t id) {
  return id >= 0 && id < t->n_tokens ? t->types[id] : 0;
}

float weir_tokenizer_token_score(const weir_tokenizer *t, int32_t id) {
  return id >= 0 && id < t->n_tokens ? t->scores[id] : 0.0f;
}

int weir_tokenizer_token_text(const weir_tokenizer *t, int32_t id, weir_tok_str *out) {
  if (id < 0 || id >= t->n_tokens) return WEIR_E_RANGE;
  out->ptr = tok_text(t, id, &out->len);
  return 0;
}

int weir_tokenizer_token_bytes(const weir_tokenizer *t, int32_t id, weir_tok_str *out) {
  if (id < 0 || id >= t->n_tokens) return WEIR_E_RANGE;
  out->ptr = t->piece_blob + t->piece_off[id];
  out->len = t->piece_off[id + 1] - t->piece_off[id];
  return 0;
}

/* ---- encoding ---- */

typedef struct ivec {
  int32_t *v;
  size_t n, cap;
} ivec;

static int ivec_push(ivec *a, int32_t x) {
  if (a->n == a->cap) {
    size_t nc = a->cap ? 2 * a->cap : 64;
    int32_t *nv = realloc(a->v, nc * sizeof *nv);
    if (!nv) return WEIR_E_NOMEM;
    a->v = nv;
    a->cap = nc;
  }
  a->v[a->n++] = x;
  return 0;
}

typedef struct sym {
  int32_t start, len; /* bytes of the (normalised) text; len 0 = merged away */
  int32_t prev, next;
  int32_t id;         /* gpt2: the symbol's token (-1 if its byte has none) */
} sym;

typedef struct cand {
  double prio;     /* higher pops first */
  int32_t left, right;
  int64_t tag;     /* llama: merged byte length; gpt2: left id << 32 | right id */
} cand;

typedef struct work {
  sym *syms;
  size_t nsyms, capsyms;
  cand *heap;
  size_t nheap, capheap;
  char *norm; /* llama: the normalised fragment */
  size_t capnorm;
} work;

static int cand_before(const cand *a, const cand *b) {
  if (a->prio != b->prio) return a->prio > b->prio;
  return a->left < b->left;
}

static int heap_push(work *w, cand c) {
  if (w->nheap == w->capheap) {
    size_t nc = w->capheap ? 2 * w->capheap : 64;
    cand *nh = realloc(w->heap, nc * sizeof *nh);
    if (!nh) return WEIR_E_NOMEM;
    w->heap = nh;
    w->capheap = nc;
  }
  size_t i = w->nheap++;
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (!cand_before(&c, &w->heap[p])) break;
    w->heap[i] = w->heap[p];
    i = p;
  }
  w->heap[i] = c;
  return 0;
}

static cand heap_pop(work *w) {
  cand top = w->heap[0], last = w->heap[--w->nheap];
  size_t i = 0, n = w->nheap;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && cand_before(&w->heap[c + 1], &w->heap[c])) c++;
    if (!cand_before(&w->heap[c], &last)) break;
    w->heap[i] = w->heap[c];
    i = c;
  }
  if (n) w->heap[i] = last;
  return top;
}

static int syms_reserve(work *w, size_t n) {
  if (n <= w->capsyms) return 0;
  size_t nc = w->capsyms ? w->capsyms : 64;
  while (nc < n) nc *= 2;
  sym *ns = realloc(w->syms, nc * sizeof *ns);
  if (!ns) return WEIR_E_NOMEM;
  w->syms = ns;
  w->capsyms = nc;
  return 0;
}

static int mergeable(int type) {
  return type == WEIR_TOKEN_NORMAL || type == WEIR_TOKEN_USER_DEFINED;
}

/* llama: queues the pair (l, r) when their concatenation is a mergeable piece. */
static int spm_try_pair(const weir_tokenizer *t, work *w, int32_t l, int32_t r) {
  if (l < 0 || r < 0) return 0;
  const sym *a = &w->syms[l], *b = &w->syms[r];
  int32_t id = weir_tokenizer_find(t, w->norm + a->start, (size_t)(a->len + b->len));
  if (id < 0 || !mergeable(t->types[id])) return 0;
  cand c = {t->scores[id], l, r, a->len + b->len};
  return heap_push(w, c);
}

static int spm_fragment(const weir_tokenizer *t, work *w, const char *text, size_t len,
                        int prefix, ivec *out) {
  /* Normalise: the dummy prefix, then every ' ' as U+2581. */
  size_t need = 3 * len + 3;
  if (need > w->capnorm) {
    char *nn = realloc(w->norm, need);
    if (!nn) return WEIR_E_NOMEM;
    w->norm = nn;
    w->capnorm = need;
  }
  size_t m = 0;
  if (prefix) {
    memcpy(w->norm, "\xE2\x96\x81", 3);
    m = 3;
  }
  for (size_t i = 0; i < len; i++) {
    if (text[i] == ' ') {
      memcpy(w->norm + m, "\xE2\x96\x81", 3);
      m += 3;
    } else {
      w->norm[m++] = text[i];
    }
  }
  if (m == 0) return 0;
  if (m > INT32_MAX) return WEIR_E_INVAL;
  if (syms_reserve(w, m)) return WEIR_E_NOMEM;
  w->nsyms = 0;
  for (size_t i = 0; i < m;) {
    int k = weir_utf8_scan((const unsigned char *)w->norm + i, m - i);
    if (k <= 0) k = 1; /* a stray byte is a symbol of its own; byte fallback covers it */
    sym *s = &w->syms[w->nsyms];
    s->start = (int32_t)i;
    s->len = k;
    s->prev = (int32_t)w->nsyms - 1;
    s->next = (int32_t)w->nsyms + 1;
    s->id = -1;
    w->nsyms++;
    i += (size_t)k;
  }
  w->syms[w->nsyms - 1].next = -1;
  w->nheap = 0;
  for (size_t i = 1; i < w->nsyms; i++)
    if (spm_try_pair(t, w, (int32_t)i - 1, (int32_t)i)) return WEIR_E_NOMEM;
  while (w->nheap) {
    cand c = heap_pop(w);
    sym *a = &w->syms[c.left], *b = &w->syms[c.right];
    if (a->len == 0 || b->len == 0 || a->next != c.right || a->len + b->len != c.tag) continue;
    a->len += b->len;
    b->len = 0;
    a->next = b->next;
    if (b->next >= 0) w->syms[b->next].prev = c.left;
    if (spm_try_pair(t, w, a->prev, c.left) || spm_try_pair(t, w, c.left, a->next))
      return WEIR_E_NOMEM;
  }
  for (int32_t i = 0; i >= 0; i = w->syms[i].next) {
    const sym *s = &w->syms[i];
    int32_t id = weir_tokenizer_find(t, w->norm + s->start, (size_t)s->len);
    if (id >= 0 && t->types[id] != WEIR_TOKEN_CONTROL && t->types[id] != WEIR_TOKEN_BYTE) {
      if (ivec_push(out, id)) return WEIR_E_NOMEM;
      continue;
    }
    /* Byte fallback: every byte of the character as <0xXX>, or unk when one is missing. */
    int all = 1;
    for (int32_t k = 0; k < s->len; k++)
      if (t->byte_tok[(unsigned char)w->norm[s->start + k]] < 0) all = 0;
    if (all) {
      for (int32_t k = 0; k < s->len; k++)
        if (ivec_push(out, t->byte_tok[(unsigned char)w->norm[s->start + k]])) return WEIR_E_NOMEM;
    } else if (t->unk >= 0) {
      if (ivec_push(out, t->unk)) return WEIR_E_NOMEM;
    }
  }
  return 0;
}

/* gpt2: queues (l, r) when a merge joins their tokens. */
static int bpe_try_pair(const weir_tokenizer *t, work *w, int32_t l, int32_t r) {
  if (l < 0 || r < 0) return 0;
  int32_t a = w->syms[l].id, b = w->syms[r].id;
  if (a < 0 || b < 0) return 0;
  const merge_slot *m = merge_find(t, a, b);
  if (!m) return 0;
  cand c = {-(double)m->rank, l, r, (int64_t)(((uint64_t)(uint32_t)a << 32) | (uint32_t)b)};
  return heap_push(w, c);
}

static int bpe_word(const weir_tokenizer *t, work *w, const unsigned char *s, size_t len,
                    ivec *out) {
  if (len > INT32_MAX) return WEIR_E_INVAL; /* symbol links are 32-bit */
  if (syms_reserve(w, len)) return WEIR_E_NOMEM;
  for (size_t i = 0; i < len; i++) {
    sym *y = &w->syms[i];
    y->start = (int32_t)i;
    y->len = 1;
    y->prev = (int32_t)i - 1;
    y->next = i + 1 < len ? (int32_t)i + 1 : -1;
    y->id = t->byte_tok[s[i]];
  }
  w->nsyms = len;
  w->nheap = 0;
  for (size_t i = 1; i < len; i++)
    if (bpe_try_pair(t, w, (int32_t)i - 1, (int32_t)i)) return WEIR_E_NOMEM;
  while (w->nheap) {
    cand c = heap_pop(w);
    sym *a = &w->syms[c.left], *b = &w->syms[c.right];
    if (a->len == 0 || b->len == 0 || a->next != c.right) continue;
    if ((int64_t)(((uint64_t)(uint32_t)a->id << 32) | (uint32_t)b->id) != c.tag) continue;
    a->id = merge_find(t, a->id, b->id)->result;
    a->len += b->len;
    b->len = 0;
    a->next = b->next;
    if (b->next >= 0) w->syms[b->next].prev = c.left;
    if (bpe_try_pair(t, w, a->prev, c.left) || bpe_try_pair(t, w, c.left, a->next))
      return WEIR_E_NOMEM;
  }
  for (int32_t i = 0; i >= 0 && len; i = w->syms[i].next) {
    int32_t id = w->syms[i].id >= 0 ? w->syms[i].id : t->unk;
    if (id >= 0 && ivec_push(out, id)) return WEIR_E_NOMEM;
  }
  return 0;
}

/* The GPT-2 pre-tokenizer: the length of the piece starting at s[0..n) that the pattern
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * matches (alternatives tried in order, as a regex engine does). */
enum { CL_LETTER, CL_NUMBER, CL_SPACE, CL_OTHER };

static int cp_class(const unsigned char *s, size_t n, int *k) {
  uint32_t cp;
  *k = weir_utf8_next(s, n, &cp, NULL);
  if (weir_uni_is_letter(cp)) return CL_LETTER;
  if (weir_uni_is_number(cp)) return CL_NUMBER;
  if (weir_uni_is_space(cp)) return CL_SPACE;
  return CL_OTHER;
}

static size_t run_of(const unsigned char *s, size_t n, size_t i, int cls) {
  while (i < n) {
    int k;
    if (cp_class(s + i, n - i, &k) != cls) break;
    i += (size_t)k;
  }
  return i;
}

static size_t gpt2_piece(const unsigned char *s, size_t n) {
  if (s[0] == '\'' && n >= 2) {
    if (s[1] == 's' || s[1] == 't' || s[1] == 'm' || s[1] == 'd') return 2;
    if (n >= 3 && ((s[1] == 'r' && s[2] == 'e') || (s[1] == 'v' && s[2] == 'e') ||
                   (s[1] == 'l' && s[2] == 'l')))
      return 3;
  }
  int k0;
  int c0 = cp_class(s, n, &k0);
  size_t i = 0;
  int c = c0;
  if (s[0] == ' ' && n > 1) {
    int k1;
    int c1 = cp_class(s + 1, n - 1, &k1);
    if (c1 != CL_SPACE) {
      i = 1;
      c = c1;
    }
  }
  if (c != CL_SPACE) return run_of(s, n, i, c);
  /* Whitespace: the whole run when it ends the text or is followed by more whitespace;
   * otherwise all but its last character, which then leads the next piece. */
  size_t e = 0, last = 0;
  while (e < n) {
    int k;
    if (cp_class(s + e, n - e, &k) != CL_SPACE) break;
    last = e;
    e += (size_t)k;
  }
  if (e == n || last == 0) return e;
  return last;
}

static int is_crlf(const unsigned char *s) { return s[0] == '\r' || s[0] == '\n'; }

static int lower_is(unsigned char c, char want) { return (c | 0x20) == want; }

/* The Llama-3 split (digits = 3) and Qwen2's (digits = 1):
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,digits}|
 *    ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
static size_t llama3_piece(const unsigned char *s, size_t n, int digits) {
  if (s[0] == '\'' && n >= 2) {
    unsigned char a = s[1];
    if (lower_is(a, 's') || lower_is(a, 't') || lower_is(a, 'm') || lower_is(a, 'd')) return 2;
    if (n >= 3 && ((lower_is(a, 'r') && lower_is(s[2], 'e')) ||
                   (lower_is(a, 'v') && lower_is(s[2], 'e')) ||
                   (lower_is(a, 'l') && lower_is(s[2], 'l'))))
      return 3;
  }
  int k0;
  int c0 = cp_class(s, n, &k0);
  /* [^\r\n\p{L}\p{N}]?\p{L}+ */
  if (c0 == CL_LETTER) return run_of(s, n, 0, CL_LETTER);
  if (c0 != CL_NUMBER && !is_crlf(s) && (size_t)k0 < n) {
    int k1;
    if (cp_class(s + k0, n - (size_t)k0, &k1) == CL_LETTER) return run_of(s, n, (size_t)k0, CL_LETTER);
  }
  /* \p{N}{1,digits} */
  if (c0 == CL_NUMBER) {
    size_t i = 0;
    for (int d = 0; d < digits && i < n; d++) {
      int k;
      if (cp_class(s + i, n - i, &k) != CL_NUMBER) break;
      i += (size_t)k;
    }
    return i;
  }
  /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
  size_t i = 0;
  if (s[0] == ' ' && n > 1) {
    int k1;
    if (cp_class(s + 1, n - 1, &k1) == CL_OTHER) i = 1;
  }
  if (i == 1 || c0 == CL_OTHER) {
    i = run_of(s, n, i, CL_OTHER);
    while (i < n && is_crlf(s + i)) i++;
    return i;
  }
  /* Whitespace. \s*[\r\n]+ : up to the last line break of the run, if it has one. */
  size_t e = 0, last = 0, nl_end = 0;
  while (e < n) {
    int k;
    if (cp_class(s + e, n - e, &k) != CL_SPACE) break;
    last = e;
    if (is_crlf(s + e)) nl_end = e + 1;
    e += (size_t)k;
  }
  if (nl_end) return nl_end;
  /* \s+(?!\S) then \s+ */
  if (e == n || last == 0) return e;
  return last;
}

size_t weir__pretok_next(weir_pretokenizer pre, const char *text, size_t n) {
  const unsigned char *s = (const unsigned char *)text;
  if (pre == WEIR_PRE_LLAMA3) return llama3_piece(s, n, 3);
  if (pre == WEIR_PRE_QWEN2) return llama3_piece(s, n, 1);
  return gpt2_piece(s, n);
}

static int gpt2_fragment(const weir_tokenizer *t, work *w, const char *text, size_t len,
                         ivec *out) {
  const unsigned char *s = (const unsigned char *)text;
  size_t i = 0;
  while (i < len) {
    size_t k = weir__pretok_next(t->pre, text + i, len - i);
    int rc = bpe_word(t, w, s + i, k, out);
    if (rc) return rc;
    i += k;
  }
  return 0;
}

/* WordPiece (WEIR_TOKENIZER_BERT): the words of text, each as ▁word matched greedily
 * longest-first against the vocabulary; unk for a word that cannot be covered. */
static int wpm_fragment(const weir_tokenizer *t, const char *text, size_t len, ivec *out) {
  const unsigned char *s = (const unsigned char *)text;
  char *word = NULL;
  int rc = 0;
  size_t i = 0;
  while (i < len) {
    if (isspace(s[i])) {
      i++;
      continue;
    }
    size_t j = i + 1;
    if (!ispunct(s[i]))
      while (j < len && !isspace(s[j]) && !ispunct(s[j])) j++;
    const size_t wl = j - i;
    free(word);
    if (!(word = malloc(wl + 3))) return WEIR_E_NOMEM;
    memcpy(word, "\xE2\x96\x81", 3);
    for (size_t k = 0; k < wl; k++) word[3 + k] = (char)tolower(s[i + k]);
    const size_t n = wl + 3;
    const size_t mark = out->n;
    size_t at = 0;
    while (at < n) {
      int32_t id = -1;
      /* No piece is longer than the longest token: a long word costs len x that, at most. */
      size_t end = n - at > t->max_text_len ? at + t->max_text_len : n;
      for (; end > at; end--)
        if ((id = weir_tokenizer_find(t, word + at, end - at)) >= 0) break;
      if (id < 0) break;
      if ((rc = ivec_push(out, id))) goto done;
      at = end;
    }
    if (at < n) {
      out->n = mark;
      if (t->unk >= 0 && (rc = ivec_push(out, t->unk))) goto done;
    }
    i = j;
  }
done:
  free(word);
  return rc ? WEIR_E_NOMEM : 0;
}

static uint32_t window_hash(const char *p) {
  uint32_t x;
  memcpy(&x, p, 4);
  return (x * 2654435761u) >> 16;
}

typedef struct frag {
  size_t start, len;
  int32_t id; /* >= 0: a special token; -1: text */
} frag;

/* Splits text around the special tokens it contains, longest token first (so a token
 * inside a longer one is never taken out of it), leaving the rest as text fragments. */
static int partition(const weir_tokenizer *t, const char *text, size_t len, int parse_special,
                     frag **frags, size_t *nfrags) {
  size_t cap = 8, n = 1;
  frag *f = malloc(cap * sizeof *f);
  if (!f) return WEIR_E_NOMEM;
  f[0] = (frag){0, len, -1};
  /* Vocabularies carry hundreds of special tokens (Llama-3 reserves 256) and each search
   * scans the text. A bitmap of the text's 4-byte windows lets the tokens that cannot
   * occur be skipped without a scan. */
  uint64_t *seen = NULL;
  if (t->n_specials > 8 && len >= 4) {
    seen = calloc(1024, sizeof *seen); /* 65536 bits */
    if (seen)
      for (size_t i = 0; i + 4 <= len; i++) {
        uint32_t h = window_hash(text + i);
        seen[h >> 6] |= 1ull << (h & 63);
      }
  }
  for (int32_t k = 0; k < t->n_specials; k++) {
    int32_t id = t->specials[k];
    if (!parse_special && t->types[id] != WEIR_TOKEN_USER_DEFINED) continue;
    size_t sl;
    const char *st = tok_text(t, id, &sl);
    if (sl > len) continue;
    if (seen && sl >= 4) {
      uint32_t h = window_hash(st);
      if (!(seen[h >> 6] & (1ull << (h & 63)))) continue;
    }
    for (size_t j = 0; j < n; j++) {
      if (f[j].id >= 0 || f[j].len < sl) continue;
      const char *p = memmem(text + f[j].start, f[j].len, st, sl);
      if (!p) continue;
      size_t at = (size_t)(p - text);
      /* Split f[j] into [text before][token][text after] (empty parts dropped). */
      if (n + 2 > cap) {
        cap *= 2;
        frag *nf = realloc(f, cap * sizeof *nf);
        if (!nf) {
          free(f);
          free(seen);
          return WEIR_E_NOMEM;
        }
        f = nf;
      }
      frag before = {f[j].start, at - f[j].start, -1};
      frag tokf = {at, sl, id};
      frag after = {at + sl, f[j].start + f[j].len - at - sl, -1};
      size_t ins = (before.len ? 1 : 0) + 1 + (after.len ? 1 : 0);
      memmove(&f[j + ins], &f[j + 1], (n - j - 1) * sizeof *f);
      size_t p2 = j;
      if (before.len) f[p2++] = before;
      f[p2++] = tokf;
      if (after.len) f[p2++] = after;
      n += ins - 1;
      j = p2 - 2; /* the loop's j++ lands on `after` (or past the token) */
    }
  }
  free(seen);
  *frags = f;
  *nfrags = n;
  return 0;
}

int weir_tokenizer_encode(const weir_tokenizer *t, const char *text, size_t len, int flags,
                          int32_t **ids, size_t *n) {
  int rc;
  ivec out = {0};
  work w = {0};
  frag *f = NULL;
  size_t nf = 0;
  if (!t || !ids || !n || (!text && len)) return WEIR_E_INVAL;
  *ids = NULL;
  *n = 0;
  int add_special = flags & WEIR_ENCODE_ADD_SPECIAL;
  rc = partition(t, text ? text : "", len, flags & WEIR_ENCODE_PARSE_SPECIAL, &f, &nf);
  if (rc) goto done;
  rc = WEIR_E_NOMEM;
  if (add_special && t->add_bos && ivec_push(&out, t->bos)) goto done;
  /* The llama dummy prefix goes at the start of the text, as SentencePiece puts it (so a
   * text opening with a user-defined token gets a lone ▁ before it), and, as llama.cpp and
   * Hugging Face's legacy Llama tokenizer do, on the text right after a control token. A
   * user-defined token is part of SentencePiece's own segmentation: no prefix after it. */
  int prefix = t->type == WEIR_TOKENIZER_LLAMA && t->add_space_prefix;
  int want_prefix = 1;
  for (size_t i = 0; i < nf; i++) {
    if (f[i].id >= 0) {
      if (prefix && i == 0 && t->types[f[i].id] == WEIR_TOKEN_USER_DEFINED) {
        rc = spm_fragment(t, &w, "", 0, 1, &out);
        if (rc) goto done;
        rc = WEIR_E_NOMEM;
      }
      if (ivec_push(&out, f[i].id)) goto done;
      want_prefix = t->types[f[i].id] != WEIR_TOKEN_USER_DEFINED;
      continue;
    }
    if (f[i].len == 0) continue;
    if (t->type == WEIR_TOKENIZER_LLAMA)
      rc = spm_fragment(t, &w, text + f[i].start, f[i].len, prefix && want_prefix, &out);
    else if (t->type == WEIR_TOKENIZER_BERT)
      rc = wpm_fragment(t, text + f[i].start, f[i].len, &out);
    else
      rc = gpt2_fragment(t, &w, text + f[i].start, f[i].len, &out);
    if (rc) goto done;
    rc = WEIR_E_NOMEM;
    want_prefix = 0;
  }
  if (add_special && t->add_eos && ivec_push(&out, t->eos)) goto done;
  *ids = out.v;
  *n = out.n;
  out.v = NULL;
  rc = 0;
done:
  free(out.v);
  free(f);
  free(w.syms);
  free(w.heap);
  free(w.norm);
  return rc;
}

/* ---- decoding ---- */

/* The bytes token id contributes under `flags`, given whether output has started (the
 * llama prefix-space rule). */
static void piece_for(const weir_tokenizer *t, int32_t id, int flags, int *started,
                      const char **p, size_t *len) {
  int ty = t->types[id];
  *p = t->piece_blob + t->piece_off[id];
  *len = t->piece_off[id + 1] - t->piece_off[id];
  if (ty == WEIR_TOKEN_CONTROL || ty == WEIR_TOKEN_UNKNOWN) {
    if (flags & WEIR_DECODE_SKIP_SPECIAL) *len = 0;
    return;
  }
  if (!*started && *len > 0) {
    *started = 1;
    if (t->add_space_prefix && !(flags & WEIR_DECODE_KEEP_PREFIX_SPACE) &&
        ty != WEIR_TOKEN_BYTE && (*p)[0] == ' ') {
      (*p)++;
      (*len)--;
    }
  }
}

int weir_tokenizer_decode(const weir_tokenizer *t, const int32_t *ids, size_t n, int flags,
                          char **out, size_t *out_len) {
  int rc = WEIR_E_NOMEM;
  char *raw = NULL, *res = NULL;
  size_t rlen = 0, total = 0, cap = 0;
  if (!t || !out || (!ids && n)) return WEIR_E_INVAL;
  *out = NULL;
  if (out_len) *out_len = 0;
  for (size_t i = 0; i < n; i++) {
    if (ids[i] < 0 || ids[i] >= t->n_tokens) return WEIR_E_RANGE;
    total += t->piece_off[ids[i] + 1] - t->piece_off[ids[i]];
  }
  raw = malloc(total + 1);
  if (!raw) goto done;
  int started = 0;
  for (size_t i = 0; i < n; i++) {
    const char *p;
    size_t len;
    piece_for(t, ids[i], flags, &started, &p, &len);
    memcpy(raw + rlen, p, len);
    rlen += len;
  }
  size_t olen = 0;
  if (weir_utf8_sanitize((const unsigned char *)raw, rlen, 1, &res, &olen, &cap, NULL))
    goto done;
  if (!res) {
    res = malloc(1);
    if (!res) goto done;
  }
  res[olen] = '\0';
  *out = res;
  res = NULL;
  if (out_len) *out_len = olen;
  rc = 0;
done:
  free(raw);
  free(res);
  return rc;
}

void weir_detok_init(weir_detok *d, const weir_tokenizer *t, int flags) {
  memset(d, 0, sizeof *d);
  d->tok = t;
  d->flags = flags;
}

int weir_detok_feed(weir_detok *d, int32_t id, const char **text, size_t *len) {
  const weir_tokenizer *t = d->tok;
  *text = "";
  *len = 0;
  if (id < 0 || id >= t->n_tokens) return WEIR_E_RANGE;
  const char *p;
  size_t plen;
  piece_for(t, id, d->flags, &d->started, &p, &plen);
  unsigned char small[64];
  unsigned char *in = small;
  size_t inlen = (size_t)d->npending + plen;
  if (inlen > sizeof small) {
    in = malloc(inlen);
    if (!in) return WEIR_E_NOMEM;
  }
  memcpy(in, d->pending, (size_t)d->npending);
  memcpy(in + d->npending, p, plen);
  size_t olen = 0, held = 0;
  int rc = weir_utf8_sanitize(in, inlen, 0, &d->buf, &olen, &d->cap, &held);
  if (rc == 0) {
    /* held < 4: an incomplete sequence is at most 3 bytes. */
    memcpy(d->pending, in + inlen - held, held);
    d->npending = (int)held;
    d->buf[olen] = '\0';
    *text = d->buf;
    *len = olen;
  }
  if (in != small) free(in);
  return rc;
}

int weir_detok_flush(weir_detok *d, const char **text, size_t *len) {
  size_t olen = 0;
  *text = "";
  *len = 0;
  int rc = weir_utf8_sanitize(d->pending, (size_t)d->npending, 1, &d->buf, &olen, &d->cap, NULL);
  if (rc) return rc;
  d->npending = 0;
  d->started = 0;
  if (d->buf) {
    d->buf[olen] = '\0';
    *text = d->buf;
  }
  *len = olen;
  return 0;
}

void weir_detok_free(weir_detok *d) {
  if (!d) return;
  free(d->buf);
  d->buf = NULL;
  d->cap = 0;
}
