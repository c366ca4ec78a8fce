/* Tokenizer generation for mkmodel: a BPE training pass over the embedded corpus, then
 * deterministic extra merges of existing pieces until the requested vocabulary size.
 *
 * Both styles share one trainer over "words" (sequences of piece ids with a count):
 *  - llama (SentencePiece): words are the corpus split on whitespace, each prefixed with
 *    U+2581; the initial pieces are the characters that occur; bytes are covered by the 256
 *    <0xNN> fallback tokens; piece scores are -rank so earlier merges win.
 *  - gpt2 (byte-level BPE): words come from a GPT-2-style pre-tokenizer split (contractions,
 *    optional space + letters / digits / other, whitespace), the initial pieces are the 256
 *    bytes written with GPT-2's byte-to-unicode map, and every merge is recorded as
 *    "left right". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mkmodel/mkmodel.h"
#include "weir/status.h"

#define SPM_SPACE "\xe2\x96\x81" /* U+2581 */
#define GPT2_SPACE "\xc4\xa0"    /* U+0120, the byte-to-unicode image of ' ' */
#define MAX_SYNTH_PIECE 24       /* bytes: extra merges stay word-sized */

/* ---- a string set: piece text -> id ---- */

typedef struct strmap {
  int32_t *slots; /* id + 1, 0 = empty */
  uint64_t mask;
  char ***names; /* points at the owner's array so ids resolve to text */
} strmap;

static uint64_t hash_bytes(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
  return h;
}

static int32_t strmap_find(const strmap *m, const char *s, size_t n) {
  for (uint64_t h = hash_bytes(s, n) & m->mask;; h = (h + 1) & m->mask) {
    int32_t v = m->slots[h];
    if (!v) return -1;
    const char *t = (*m->names)[v - 1];
    if (strlen(t) == n && memcmp(t, s, n) == 0) return v - 1;
  }
}

static void strmap_put(strmap *m, const char *s, int32_t id) {
  uint64_t h = hash_bytes(s, strlen(s)) & m->mask;
  while (m->slots[h]) h = (h + 1) & m->mask;
  m->slots[h] = id + 1;
}

/* ---- the piece table being built ---- */

typedef struct table {
  char **text;
  int32_t n, cap;
  strmap map;
  int32_t *left, *right; /* components of merged pieces, -1 for initial ones */
} table;

static int table_init(table *t, int32_t cap) {
  memset(t, 0, sizeof *t);
  t->cap = cap;
  t->text = calloc((size_t)cap, sizeof *t->text);
  t->left = malloc((size_t)cap * sizeof *t->left);
  t->right = malloc((size_t)cap * sizeof *t->right);
  uint64_t sz = 64;
  while (sz < (uint64_t)cap * 2) sz <<= 1;
  t->map.slots = calloc(sz, sizeof *t->map.slots);
  t->map.mask = sz - 1;
  t->map.names = &t->text;
  return t->text && t->left && t->right && t->map.slots ? 0 : WEIR_E_NOMEM;
}

static void table_free(table *t) {
  for (int32_t i = 0; i < t->n; i++) free(t->text[i]);
  free(t->text);
  free(t->left);
  free(t->right);
  free(t->map.slots);
}

/* Adds a piece; returns its id, -1 if it exists already, or WEIR_E_NOMEM / WEIR_E_NOSPACE
 * (as values below -1). */
static int32_t table_add(table *t, const char *s, size_t n, int32_t l, int32_t r) {
  if (strmap_find(&t->map, s, n) >= 0) return -1;
  if (t->n >= t->cap) return WEIR_E_NOSPACE;
  char *c = malloc(n + 1);
  if (!c) return WEIR_E_NOMEM;
  memcpy(c, s, n);
  c[n] = 0;
  t->text[t->n] = c;
  t->left[t->n] = l;
  t->right[t->n] = r;
  strmap_put(&t->map, c, t->n);
  return t->n++;
}

static int32_t table_add_concat(table *t, int32_t a, int32_t b) {
  size_t la = strlen(t->text[a]), lb = strlen(t->text[b]);
  char buf[256];
  if (la + lb >= sizeof buf) return -1;
  memcpy(buf, t->text[a], la);
  memcpy(buf + la, t->text[b], lb);
  return table_add(t, buf, la + lb, a, b);
}

/* ---- words ---- */

typedef struct word {
  int32_t *sym;
  int32_t n;
  int64_t count;
} word;

typedef struct wordset {
  word *w;
  int32_t n, cap;
  strmap map; /* word text -> index (for counting repeats) */
  char **text;
} wordset;

static void wordset_free(wordset *ws) {
  for (int32_t i = 0; i < ws->n; i++) {
    free(ws->w[i].sym);
    free(ws->text[i]);
  }
  free(ws->w);
  free(ws->text);
  free(ws->map.slots);
}

/* Adds one occurrence of a word given as raw text; split_fn turns it into piece ids. */
static int wordset_add(wordset *ws, const char *s, size_t n, table *t, int spm) {
  if (n == 0) return 0;
  if (!ws->map.slots) {
    ws->map.mask = (1u << 14) - 1;
    ws->map.slots = calloc(ws->map.mask + 1, sizeof *ws->map.slots);
    ws->map.names = &ws->text;
    if (!ws->map.slots) return WEIR_E_NOMEM;
  }
  int32_t id = strmap_find(&ws->map, s, n);
  if (id >= 0) {
    ws->w[id].count++;
    return 0;
  }
  if ((uint64_t)ws->n * 2 >= ws->map.mask) return WEIR_E_NOSPACE; /* corpus is small */
  if (ws->n == ws->cap) {
    int32_t cap = ws->cap ? ws->cap * 2 : 256;
    word *w = realloc(ws->w, (size_t)cap * sizeof *w);
    if (!w) return WEIR_E_NOMEM;
    ws->w = w;
    char **tx = realloc(ws->text, (size_t)cap * sizeof *tx);
    if (!tx) return WEIR_E_NOMEM;
    ws->text = tx;
    ws->cap = cap;
  }
  word *w = &ws->w[ws->n];
  w->sym = malloc(n * sizeof *w->sym);
  char *copy = malloc(n + 1);
  if (!w->sym || !copy) {
    free(w->sym);
    free(copy);
    return WEIR_E_NOMEM;
  }
  memcpy(copy, s, n);
  copy[n] = 0;
  w->n = 0;
  w->count = 1;
  for (size_t i = 0; i < n;) {
    size_t k = 1;
    if (spm) { /* one UTF-8 character per initial piece */
      uint8_t c = (uint8_t)s[i];
      k = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
      if (i + k > n) k = n - i;
      int32_t p = strmap_find(&t->map, s + i, k);
      if (p < 0) p = table_add(t, s + i, k, -1, -1);
      if (p < 0) {
        free(w->sym);
        free(copy);
        return p == -1 ? WEIR_E_INTERNAL : p;
      }
      w->sym[w->n++] = p;
    } else { /* byte-level: piece id == byte value */
      w->sym[w->n++] = (uint8_t)s[i];
    }
    i += k;
  }
  ws->text[ws->n] = copy;
  strmap_put(&ws->map, copy, ws->n);
  ws->n++;
  return 0;
}

/* ---- the BPE training pass ---- */

typedef struct pair_slot {
  uint64_t key; /* a << 32 | b */
  int64_t count;
  uint32_t gen;
} pair_slot;

/* Merges the most frequent adjacent pair until max_pieces pieces exist or no pair occurs
 * twice. Ties go to the pair with the smaller ids, so the result is deterministic. */
static int train(table *t, wordset *ws, int32_t max_pieces) {
  uint64_t size = 1u << 16, mask = size - 1;
  pair_slot *slots = calloc(size, sizeof *slots);
  if (!slots) return WEIR_E_NOMEM;
  int rc = 0;
  for (uint32_t gen = 1; t->n < max_pieces; gen++) {
    uint64_t best = 0;
    int64_t best_count = 1;
    for (int32_t i = 0; i < ws->n; i++) {
      const word *w = &ws->w[i];
      for (int32_t k = 0; k + 1 < w->n; k++) {
        uint64_t key = (uint64_t)(uint32_t)w->sym[k] << 32 | (uint32_t)w->sym[k + 1];
        uint64_t h = (key * 0x9e3779b97f4a7c15ull) >> 40 & mask;
        while (slots[h].gen == gen && slots[h].key != key) h = (h + 1) & mask;
        if (slots[h].gen != gen) {
          slots[h].gen = gen;
          slots[h].key = key;
          slots[h].count = 0;
        }
        slots[h].count += w->count;
        if (slots[h].count > best_count || (slots[h].count == best_count && key < best)) {
          best = key;
          best_count = slots[h].count;
        }
      }
    }
    if (best_count < 2) break;
    int32_t a = (int32_t)(best >> 32), b = (int32_t)(uint32_t)best;
    int32_t id = table_add_concat(t, a, b);
    if (id < -1) {
      rc = id;
      break;
    }
    if (id == -1) { /* the text exists already (a different split): reuse it */
      size_t la = strlen(t->text[a]), lb = strlen(t->text[b]);
      char buf[256];
      if (la + lb >= sizeof buf) break;
      memcpy(buf, t->text[a], la);
      memcpy(buf + la, t->text[b], lb);
      id = strmap_find(&t->map, buf, la + lb);
    }
    for (int32_t i = 0; i < ws->n; i++) {
      word *w = &ws->w[i];
      int32_t o = 0;
      for (int32_t k = 0; k < w->n; k++) {
        if (k + 1 < w->n && w->sym[k] == a && w->sym[k + 1] == b) {
          w->sym[o++] = id;
          k++;
        } else {
          w->sym[o++] = w->sym[k];
        }
      }
      w->n = o;
    }
  }
  free(slots);
  return rc;
}

/* Extra merges past what the corpus supports: concatenations of existing pieces taken in a
 * fixed diagonal order over (left, right) ranks, skipping a right side that starts a word,
 * over-long results and texts already present. */
static int synthesize(table *t, int32_t first, int32_t target, const char *space) {
  int64_t m = t->n - first; /* pieces that take part: [first, n) as it stands now */
  size_t sl = strlen(space);
  for (int64_t s = 0; t->n < target && s <= 2 * (m - 1); s++) {
    for (int64_t li = s < m - 1 ? s : m - 1; li >= 0 && s - li < m && t->n < target; li--) {
      int32_t i = (int32_t)(first + li), j = (int32_t)(first + s - li);
      const char *r = t->text[j];
      if (strncmp(r, space, sl) == 0) continue;
      if (strlen(t->text[i]) + strlen(r) > MAX_SYNTH_PIECE) continue;
      int32_t id = table_add_concat(t, i, j);
      if (id < -1) return id;
    }
  }
  return t->n >= target ? 0 : WEIR_E_NOSPACE;
}

/* ---- corpus splitting ---- */

static int is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
static int is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
static int is_digit(char c) { return c >= '0' && c <= '9'; }

static int split_spm(const char *text, table *t, wordset *ws) {
  char buf[512];
  const char *p = text;
  while (*p) {
    while (*p && is_space(*p)) p++;
    const char *s = p;
    while (*p && !is_space(*p)) p++;
    size_t n = (size_t)(p - s);
    if (n == 0) break;
    if (n + 3 >= sizeof buf) continue;
    memcpy(buf, SPM_SPACE, 3);
    memcpy(buf + 3, s, n);
    int rc = wordset_add(ws, buf, n + 3, t, 1);
    if (rc) return rc;
  }
  return 0;
}

/* GPT-2's pre-tokenizer pattern, for ASCII text: 's|'t|'re|'ve|'m|'ll|'d, ' ?letters',
 * ' ?digits', ' ?other', whitespace not followed by a word, whitespace. */
static int split_gpt2(const char *text, table *t, wordset *ws) {
  static const char *const contractions[] = {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d"};
  size_t n = strlen(text), i = 0;
  while (i < n) {
    size_t s = i, len = 0;
    for (size_t c = 0; c < 7 && !len; c++) {
      size_t cl = strlen(contractions[c]);
      if (strncmp(text + i, contractions[c], cl) == 0) len = cl;
    }
    if (!len) {
      size_t j = i;
      if (text[j] == ' ' && j + 1 < n && !is_space(text[j + 1])) j++;
      if (j < n && is_letter(text[j])) {
        while (j < n && is_letter(text[j])) j++;
      } else if (j < n && is_digit(text[j])) {
        while (j < n && is_digit(text[j])) j++;
      } else if (j < n && !is_space(text[j])) {
        while (j < n && !is_space(text[j]) && !is_letter(text[j]) && !is_digit(text[j])) j++;
      } else { /* a whitespace run; its last space joins a following word */
        while (j < n && is_space(text[j])) j++;
        if (j < n && j - i > 1) j--;
      }
      len = j - i;
    }
    /* Each word's bytes are its own ids; the piece text uses the byte-to-unicode form. */
    int rc = wordset_add(ws, text + s, len, t, 0);
    if (rc) return rc;
    i += len;
  }
  return 0;
}

/* GPT-2's byte-to-unicode map: printable bytes stand for themselves, the rest are moved to
 * U+0100 and up, so every token is printable text without spaces. */
static uint32_t byte_to_cp(int b) {
  if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))
    return (uint32_t)b;
  int k = 0;
  for (int x = 0; x < b; x++)
    if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255))) k++;
  return 256u + (uint32_t)k;
}

static size_t utf8_put(char *o, uint32_t cp) {
  if (cp < 0x80) {
    o[0] = (char)cp;
    return 1;
  }
  o[0] = (char)(0xc0 | cp >> 6);
  o[1] = (char)(0x80 | (cp & 0x3f));
  return 2; /* the map never leaves U+07FF */
}

/* ---- assembling the vocabulary ---- */

static int vocab_alloc(weir__vocab *v, int32_t n) {
  memset(v, 0, sizeof *v);
  v->tokens = calloc((size_t)n, sizeof *v->tokens);
  v->scores = calloc((size_t)n, sizeof *v->scores);
  v->types = calloc((size_t)n, sizeof *v->types);
  v->bos = v->eos = v->unk = v->pad = -1;
  return v->tokens && v->scores && v->types ? 0 : WEIR_E_NOMEM;
}

void weir__vocab_free(weir__vocab *v) {
  if (!v) return;
  if (v->tokens)
    for (int32_t i = 0; i < v->n; i++) free(v->tokens[i]);
  if (v->merges)
    for (int32_t i = 0; i < v->n_merges; i++) free(v->merges[i]);
  free(v->tokens);
  free(v->scores);
  free(v->types);
  free(v->merges);
  memset(v, 0, sizeof *v);
}

static int vocab_push(weir__vocab *v, const char *s, float score, int32_t type) {
  char *c = strdup(s);
  if (!c) return WEIR_E_NOMEM;
  v->tokens[v->n] = c;
  v->scores[v->n] = score;
  v->types[v->n] = type;
  v->n++;
  return 0;
}

static int32_t vocab_find(const weir__vocab *v, const char *s) {
  for (int32_t i = v->n - 1; i >= 0; i--)
    if (strcmp(v->tokens[i], s) == 0) return i;
  return -1;
}

int weir__vocab_build(const char *style, const char *const *specials, int n_specials,
                      const char *bos_special, const char *eos_special, int32_t n_vocab,
                      weir__vocab *out, char *err, size_t errlen) {
  int spm = strcmp(style, "llama") == 0;
  int rc = 0;
  if (errlen) err[0] = 0;
  table t;
  wordset ws;
  memset(&ws, 0, sizeof ws);
  if (!spm && strcmp(style, "gpt2") != 0) {
    snprintf(err, errlen, "unknown tokenizer '%s' (llama or gpt2)", style);
    return WEIR_E_INVAL;
  }
  /* Fixed tokens: llama has <unk> <s> </s> and 256 byte tokens first; gpt2 has the 256
   * bytes first and <|endoftext|> after the merges. Template control tokens come last. */
  int32_t fixed = spm ? 3 + 256 : 256 + 1;
  int32_t n_pieces = n_vocab - fixed - n_specials + (spm ? 0 : 256);
  if (n_vocab < fixed + n_specials + (spm ? 96 : 0)) {
    snprintf(err, errlen, "vocab %d is too small for the %s tokenizer (at least %d)", n_vocab,
             style, fixed + n_specials + (spm ? 96 : 0));
    return WEIR_E_INVAL;
  }
  if ((rc = table_init(&t, n_pieces))) goto free_table;
  if (!spm) {
    for (int b = 0; b < 256; b++) {
      char buf[4];
      size_t k = utf8_put(buf, byte_to_cp(b));
      if ((rc = table_add(&t, buf, k, -1, -1)) < 0) goto free_table;
    }
    rc = split_gpt2(weir__mkmodel_corpus, &t, &ws);
  } else {
    rc = split_spm(weir__mkmodel_corpus, &t, &ws);
  }
  if (rc) goto free_words;
  /* Extra merges combine learned pieces first (they look like words), and fall back to
   * every piece when those run out. */
  int32_t n_initial = t.n;
  if ((rc = train(&t, &ws, n_pieces))) goto free_words;
  const char *space = spm ? SPM_SPACE : GPT2_SPACE;
  if (t.n < n_pieces && t.n - n_initial >= 8) synthesize(&t, n_initial, n_pieces, space);
  if (t.n < n_pieces && (rc = synthesize(&t, 0, n_pieces, space))) {
    snprintf(err, errlen, "cannot build %d distinct tokens", n_vocab);
    goto free_words;
  }

  if ((rc = vocab_alloc(out, n_vocab))) goto free_words;
  if (spm) {
    if ((rc = vocab_push(out, "<unk>", 0, WEIR__TOK_UNKNOWN)) ||
        (rc = vocab_push(out, "<s>", 0, WEIR__TOK_CONTROL)) ||
        (rc = vocab_push(out, "</s>", 0, WEIR__TOK_CONTROL)))
      goto free_vocab;
    for (int b = 0; b < 256; b++) {
      char buf[8];
      snprintf(buf, sizeof buf, "<0x%02X>", b);
      if ((rc = vocab_push(out, buf, 0, WEIR__TOK_BYTE))) goto free_vocab;
    }
    for (int32_t i = 0; i < t.n; i++)
      if ((rc = vocab_push(out, t.text[i], -(float)i, WEIR__TOK_NORMAL))) goto free_vocab;
    out->unk = 0;
    out->bos = 1;
    out->eos = 2;
    out->pad = 0;
    out->add_bos = 1;
  } else {
    out->merges = calloc((size_t)(t.n - 256 > 0 ? t.n - 256 : 1), sizeof *out->merges);
    if (!out->merges) {
      rc = WEIR_E_NOMEM;
      goto free_vocab;
    }
    for (int32_t i = 0; i < t.n; i++) {
      if ((rc = vocab_push(out, t.text[i], 0, WEIR__TOK_NORMAL))) goto free_vocab;
      if (i >= 256) {
        size_t la = strlen(t.text[t.left[i]]), lb = strlen(t.text[t.right[i]]);
        char *m = malloc(la + lb + 2);
        if (!m) {
          rc = WEIR_E_NOMEM;
          goto free_vocab;
        }
        memcpy(m, t.text[t.left[i]], la);
        m[la] = ' ';
        memcpy(m + la + 1, t.text[t.right[i]], lb + 1);
        out->merges[out->n_merges++] = m;
      }
    }
    if ((rc = vocab_push(out, "<|endoftext|>", 0, WEIR__TOK_CONTROL))) goto free_vocab;
    out->bos = out->eos = out->pad = out->n - 1;
    out->add_bos = 0;
  }
  for (int i = 0; i < n_specials; i++) {
    if (vocab_find(out, specials[i]) >= 0) continue;
    if ((rc = vocab_push(out, specials[i], 0, WEIR__TOK_CONTROL))) goto free_vocab;
  }
  if (out->n != n_vocab) { /* a template special that already existed leaves a gap */
    snprintf(err, errlen, "internal: built %d tokens instead of %d", out->n, n_vocab);
    rc = WEIR_E_INTERNAL;
    goto free_vocab;
  }
  if (bos_special) out->bos = vocab_find(out, bos_special);
  if (eos_special) out->eos = vocab_find(out, eos_special);
  if (out->bos < 0 || out->eos < 0) {
    snprintf(err, errlen, "internal: bos/eos token missing from the vocabulary");
    rc = WEIR_E_INTERNAL;
    goto free_vocab;
  }
  rc = 0;
  goto free_words;
free_vocab:
  if (rc && err[0] == 0) snprintf(err, errlen, "building the vocabulary failed: %d", rc);
  weir__vocab_free(out);
free_words:
  wordset_free(&ws);
free_table:
  table_free(&t);
  return rc;
}
