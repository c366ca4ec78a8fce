/* Tokenizers against independent references (SentencePiece for llama, the npm gpt-3-encoder
 * for gpt2; fixtures in tests/tokenizer/fixtures/), plus round trips, streaming
 * detokenization, special tokens, long inputs and spec validation. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fixtures.h"
#include "model/tokenizer.h"
#include "testutil.h"
#include "weir/status.h"

static weir_tokenizer *g_llama, *g_gpt2;

/* ---- helpers ---- */

/* An independent UTF-8 validity check (not the product's). */
static int valid_utf8(const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  size_t i = 0;
  while (i < n) {
    unsigned c = u[i];
    size_t k;
    uint32_t cp, min;
    if (c < 0x80) { i++; continue; }
    if ((c & 0xE0) == 0xC0) { k = 1; cp = c & 0x1F; min = 0x80; }
    else if ((c & 0xF0) == 0xE0) { k = 2; cp = c & 0x0F; min = 0x800; }
    else if ((c & 0xF8) == 0xF0) { k = 3; cp = c & 0x07; min = 0x10000; }
    else return 0;
    if (i + k >= n) return 0;
    for (size_t j = 1; j <= k; j++) {
      if ((u[i + j] & 0xC0) != 0x80) return 0;
      cp = (cp << 6) | (u[i + j] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    i += k + 1;
  }
  return 1;
}

static void print_ids(const char *what, const int32_t *ids, size_t n) {
  fprintf(stderr, "  %s:", what);
  for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
  fprintf(stderr, "\n");
}

static int ids_equal(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
  return na == nb && (na == 0 || memcmp(a, b, na * sizeof *a) == 0);
}

static uint64_t rng_state;
static uint32_t rnd(void) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(rng_state >> 33);
}

static size_t put_cp(uint32_t cp, char *o) {
  if (cp < 0x80) { o[0] = (char)cp; return 1; }
  if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
  if (cp < 0x10000) {
    o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
  o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

/* A random valid UTF-8 string mixing ASCII words, spaces, newlines, Latin, Cyrillic, CJK,
 * emoji and rare planes; U+2581 (SentencePiece's space mark) is left out. */
static size_t random_text(char *buf, size_t max_cps) {
  size_t n = 0, cps = rnd() % max_cps;
  for (size_t i = 0; i < cps; i++) {
    uint32_t cp;
    switch (rnd() % 10) {
    case 0: case 1: case 2: cp = 'a' + rnd() % 26; break;
    case 3: cp = " \n\t "[rnd() % 4]; break;
    case 4: cp = 0x21 + rnd() % 0x5E; break;
    case 5: cp = 0xA0 + rnd() % 0x1E0; break;
    case 6: cp = 0x400 + rnd() % 0x100; break;
    case 7: cp = 0x4E00 + rnd() % 0x5000; break;
    case 8: cp = 0x1F300 + rnd() % 0x300; break;
    default:
      do cp = 1 + rnd() % 0x10FFFF;
      while ((cp >= 0xD800 && cp <= 0xDFFF) || cp == 0x2581);
      break;
    }
    n += put_cp(cp, buf + n);
  }
  buf[n] = '\0';
  return n;
}

/* ---- reference fixtures ---- */

static void check_cases(weir_tokenizer *t, const char *name) {
  fx_case *c;
  int n = fx_cases(name, &c);
  CU_ASSERT_FATAL(n > 30);
  for (int i = 0; i < n; i++) {
    int32_t *ids;
    size_t nids;
    WT_ASSERT_INT_EQ(weir_tokenizer_encode(t, c[i].text, c[i].text_len, 0, &ids, &nids), 0);
    int ok = ids_equal(ids, nids, c[i].ids, c[i].n_ids);
    if (!ok) {
      fprintf(stderr, "\n  %s case %d \"%s\" differs from the reference\n", name, i, c[i].text);
      print_ids("expected", c[i].ids, c[i].n_ids);
      print_ids("got     ", ids, nids);
    }
    CU_ASSERT(ok);
    char *dec;
    size_t dlen;
    WT_ASSERT_INT_EQ(weir_tokenizer_decode(t, c[i].ids, c[i].n_ids, 0, &dec, &dlen), 0);
    const char *want = c[i].decoded ? c[i].decoded : c[i].text;
    size_t wlen = c[i].decoded ? c[i].decoded_len : c[i].text_len;
    int dok = dlen == wlen && memcmp(dec, want, wlen) == 0;
    if (!dok) fprintf(stderr, "\n  %s case %d decodes to \"%s\", expected \"%s\"\n", name, i, dec, want);
    CU_ASSERT(dok);
    free(dec);
    free(ids);
  }
  fx_cases_free(c, n);
}

static void test_llama_matches_sentencepiece(void) { check_cases(g_llama, "llama"); }
static void test_gpt2_matches_reference(void) { check_cases(g_gpt2, "gpt2"); }

static void test_llama_bos_and_byte_fallback(void) {
  int32_t *ids;
  size_t n;
  WT_ASSERT_INT_EQ(weir_tokenizer_encode(g_llama, "hi", 2, WEIR_ENCODE_ADD_SPECIAL, &ids, &n), 0);
  CU_ASSERT_FATAL(n >= 2);
  WT_ASSERT_INT_EQ(ids[0], weir_tokenizer_bos(g_llama));
  free(ids);
  /* An empty text with add_special is just BOS, as SentencePiece-based llama does. */
  WT_ASSERT_INT_EQ(weir_tokenizer_encode(g_llama, "", 0, WEIR_ENCODE_ADD_SPECIAL, &ids, &n), 0);
  WT_ASSERT_INT_EQ(n, 1);
  free(ids);
  /* U+1F600 is not in the training text: four byte tokens <0xF0><0x9F><0x98><0x80>. */
  WT_ASSERT_INT_EQ(weir_tokenizer_encode(g_llama, "\xF0\x9F\x98\x80", 4, 0, &ids, &n), 0);
  CU_ASSERT_FATAL(n == 5);
  static const char *want[4] = {"<0xF0>", "<0x9F>", "<0x98>", "<0x80>"};
  for (int i = 0; i < 4; i++) {
    weir_tok_str s;
    weir_tokenizer_token_text(g_llama, ids[i + 1], &s);
    CU_ASSERT(s.len == 6 && memcmp(s.ptr, want[i], 6) == 0);
    WT_ASSERT_INT_EQ(weir_tokenizer_token_type(g_llama, ids[i + 1]), WEIR_TOKEN_BYTE);
  }
  free(ids);
}

/* The hand-written pre-tokenizers split exactly as node's regex engine does. */
static void test_pretokenizer_splits(void) {
  fx_split *c;
  int n = fx_splits(&c);
  CU_ASSERT_FATAL(n > 100);
  static const char *names[3] = {"gpt2", "llama3", "qwen2"};
  for (int i = 0; i < n; i++) {
    size_t pos = 0, k = 0;
    int ok = 1;
    while (pos < c[i].text_len) {
      size_t len = weir__pretok_next(c[i].pre, c[i].text + pos, c[i].text_len - pos);
      if (k >= c[i].n || len != c[i].lens[k] || len == 0) {
        ok = 0;
        break;
      }
      pos += len;
      k++;
    }
    if (!ok || k != c[i].n) {
      fprintf(stderr, "\n  %s split of \"%s\" differs at piece %zu (byte %zu)\n",
              names[c[i].pre], c[i].text, k, pos);
      ok = 0;
    }
    CU_ASSERT(ok);
  }
  fx_splits_free(c, n);
}

/* ---- special tokens ---- */

static int contains(const int32_t *ids, size_t n, int32_t id) {
  for (size_t i = 0; i < n; i++)
    if (ids[i] == id) return 1;
  return 0;
}

static void test_special_tokens(void) {
  int32_t *ids;
  size_t n;
  const char *txt = "a<|endoftext|>b";
  int32_t eot = weir_tokenizer_find(g_gpt2, "<|endoftext|>", 13);
  WT_ASSERT_INT_EQ(eot, 50256);
  WT_ASSERT_INT_EQ(weir_tokenizer_encode(g_gpt2, txt, strlen(txt), WEIR_ENCODE_PARSE_SPECIAL, &ids, &n), 0);
  WT_ASSERT_INT_EQ(n, 3);
  if (n == 3) WT_ASSERT_INT_EQ(ids[1], eot);
  char *dec;
  size_t dlen;
  WT_ASSERT_INT_EQ(weir_tokenizer_decode(g_gpt2, ids, n, 0, &dec, &dlen), 0);
  CU_ASSERT_STRING_EQUAL(dec, txt);
  free(dec);
  WT_ASSERT_INT_EQ(weir_tokenizer_decode(g_gpt2, ids, n, WEIR_DECODE_SKIP_SPECIAL, &dec, &dlen), 0);
  CU_ASSERT_STRING_EQUAL(dec, "ab");
  free(dec);
  free(ids);
  /* Without parse_special the marker is ordinary text. */
  WT_ASSERT_INT_EQ(weir_tokenizer_encode(g_gpt2, txt, strlen(txt), 0, &ids, &n), 0);
  CU_ASSERT(!contains(ids, n, eot));
  CU_ASSERT(n > 3);
  free(ids);

  /* llama: <s> and </s> are control tokens. */
  const char *chat = "<s>hello</s>";
  WT_ASSERT_INT_EQ(weir_tokenizer_encode(g_llama, chat, strlen(chat), WEIR_ENCODE_PARSE_SPECIAL, &ids, &n), 0);
  CU_ASSERT_FATAL(n >= 3);
  WT_ASSERT_INT_EQ(ids[0], 1);
  WT_ASSERT_INT_EQ(ids[n - 1], 2);
  free(ids);
  WT_ASSERT_INT_EQ(weir_tokenizer_encode(g_llama, chat, strlen(chat), 0, &ids, &n), 0);
  CU_ASSERT(!contains(ids, n, 1) && !contains(ids, n, 2));
  free(ids);
  /* A special token inside a longer one is not taken out of it: <|tool|> is user-defined,
   * so "<|tool|>" always maps to its id, while "<|tool|" alone does not. */
  int32_t tool = weir_tokenizer_find(g_llama, "<|tool|>", 8);
  CU_ASSERT_FATAL(tool >= 0);
  WT_ASSERT_INT_EQ(weir_tokenizer_encode(g_llama, "x<|tool|", 8, WEIR_ENCODE_PARSE_SPECIAL, &ids, &n), 0);
  CU_ASSERT(!contains(ids, n, tool));
  free(ids);
}

/* Hundreds of control tokens (as Llama-3 reserves): each one in the text is found, in
 * order, short ones included, and near-misses are left as text. */
static void test_many_specials(void) {
  enum { NB = 256, NS = 300 };
  weir_tok_str toks[NB + 2 + NS];
  int32_t types[NB + 2 + NS];
  float scores[NB + 2 + NS] = {0};
  char *owned[NB + 2 + NS] = {0};
  int32_t n = 0;
  for (int b = 0; b < NB; b++, n++) {
    owned[n] = wt_strf("<0x%02X>", b);
    types[n] = WEIR_TOKEN_BYTE;
  }
  owned[n] = wt_strf("\xE2\x96\x81");
  types[n++] = WEIR_TOKEN_NORMAL;
  owned[n] = wt_strf("<x>");
  types[n++] = WEIR_TOKEN_CONTROL;
  for (int k = 0; k < NS; k++, n++) {
    owned[n] = wt_strf("<|r_%d|>", k);
    types[n] = WEIR_TOKEN_CONTROL;
  }
  for (int32_t i = 0; i < n; i++) {
    toks[i].ptr = owned[i];
    toks[i].len = strlen(owned[i]);
  }
  weir_tokenizer_spec spec;
  weir_tokenizer_spec_init(&spec, WEIR_TOKENIZER_LLAMA);
  spec.n_tokens = n;
  spec.tokens = toks;
  spec.scores = scores;
  spec.token_types = types;
  weir_tokenizer *t = NULL;
  WT_ASSERT_INT_EQ(weir_tokenizer_create(&spec, &t, NULL, 0), 0);
  CU_ASSERT_FATAL(t != NULL);
  const char *text = "a<|r_7|>b<|r_250|><|r_25|> <x><|r_9 <|r_299|";
  int32_t *ids;
  size_t nids;
  WT_ASSERT_INT_EQ(weir_tokenizer_encode(t, text, strlen(text), WEIR_ENCODE_PARSE_SPECIAL, &ids, &nids), 0);
  int32_t want[4] = {NB + 2 + 7, NB + 2 + 250, NB + 2 + 25, NB + 1};
  int32_t got[8];
  size_t ng = 0;
  for (size_t i = 0; i < nids; i++)
    if (weir_tokenizer_token_type(t, ids[i]) == WEIR_TOKEN_CONTROL && ng < 8) got[ng++] = ids[i];
  CU_ASSERT(ng == 4 && memcmp(got, want, sizeof want) == 0);
  char *dec;
  WT_ASSERT_INT_EQ(weir_tokenizer_decode(t, ids, nids, 0, &dec, NULL), 0);
  /* As in llama.cpp, text after a control token gets the dummy-prefix space too. */
  CU_ASSERT_STRING_EQUAL(dec, "a<|r_7|> b<|r_250|><|r_25|>  <x> <|r_9 <|r_299|");
  free(dec);
  free(ids);
  weir_tokenizer_free(t);
  for (int32_t i = 0; i < n; i++) free(owned[i]);
}

/* ---- round trips and streaming ---- */

static void roundtrip(weir_tokenizer *t, const char *name, int rounds) {
  char *buf = malloc(64 * 4 + 1);
  int failures = 0;
  for (int r = 0; r < rounds; r++) {
    size_t len = random_text(buf, 64);
    int32_t *ids;
    size_t n;
    WT_ASSERT_INT_EQ(weir_tokenizer_encode(t, buf, len, 0, &ids, &n), 0);
    char *dec;
    size_t dlen;
    WT_ASSERT_INT_EQ(weir_tokenizer_decode(t, ids, n, 0, &dec, &dlen), 0);
    if (dlen != len || memcmp(dec, buf, len) != 0) {
      if (failures++ < 3) fprintf(stderr, "\n  %s round trip failed for \"%s\" -> \"%s\"\n", name, buf, dec);
    }
    free(dec);
    free(ids);
  }
  WT_ASSERT_INT_EQ(failures, 0);
  free(buf);
}

static void test_roundtrip_llama(void) { rng_state = 1; roundtrip(g_llama, "llama", 500); }
static void test_roundtrip_gpt2(void) { rng_state = 2; roundtrip(g_gpt2, "gpt2", 500); }

/* Arbitrary bytes (mostly invalid UTF-8) encode; every byte survives in the tokens' raw
 * bytes, and the decoded text is valid UTF-8 that equals the input where it was valid. */
static void test_random_bytes(void) {
  rng_state = 6;
  unsigned char in[200];
  for (int r = 0; r < 400; r++) {
    int llama = r % 2 == 0;
    weir_tokenizer *t = llama ? g_llama : g_gpt2;
    size_t len = 1 + rnd() % sizeof in;
    for (size_t i = 0; i < len; i++) {
      in[i] = (unsigned char)(rnd() % 256);
      if (llama && in[i] == 0xE2) in[i] = 0xE3; /* keep U+2581 out: it decodes to a space */
    }
    int32_t *ids;
    size_t n;
    WT_ASSERT_INT_EQ(weir_tokenizer_encode(t, (const char *)in, len, 0, &ids, &n), 0);
    /* Raw bytes: llama puts the dummy-prefix space in front and shows spaces as spaces. */
    char raw[1024];
    size_t rl = 0;
    for (size_t i = 0; i < n && rl < sizeof raw - 16; i++) {
      weir_tok_str b;
      weir_tokenizer_token_bytes(t, ids[i], &b);
      memcpy(raw + rl, b.ptr, b.len);
      rl += b.len;
    }
    size_t off = llama ? 1 : 0;
    CU_ASSERT(rl == len + off && memcmp(raw + off, in, len) == 0);
    char *dec;
    size_t dlen;
    WT_ASSERT_INT_EQ(weir_tokenizer_decode(t, ids, n, 0, &dec, &dlen), 0);
    CU_ASSERT(valid_utf8(dec, dlen));
    if (valid_utf8((const char *)in, len)) CU_ASSERT(dlen == len && memcmp(dec, in, len) == 0);
    free(dec);
    free(ids);
  }
}

static size_t from_hex(const char *h, unsigned char *out) {
  size_t n = 0;
  for (; h[0] && h[1]; h += 2) {
    unsigned v;
    sscanf(h, "%2x", &v);
    out[n++] = (unsigned char)v;
  }
  return n;
}

static void stream_matches(weir_tokenizer *t, const int32_t *ids, size_t n, int flags);

/* Broken UTF-8 is repaired exactly as Python's errors="replace" does it (one U+FFFD per
 * maximal invalid subpart), both one-shot and streamed. */
static void test_utf8_repair_matches_python(void) {
  size_t len;
  char *data = wt_read_file(WT_SOURCE_DIR "/tests/tokenizer/fixtures/utf8_repair.tsv", &len);
  CU_ASSERT_FATAL(data != NULL);
  int32_t byte_tok[256];
  for (int b = 0; b < 256; b++) {
    char name[8];
    snprintf(name, sizeof name, "<0x%02X>", b);
    byte_tok[b] = weir_tokenizer_find(g_llama, name, 6);
  }
  int cases = 0;
  for (char *line = data, *next; line && *line; line = next) {
    next = strchr(line, '\n');
    if (next) *next++ = '\0';
    if (line[0] == '#') continue;
    char *tab = strchr(line, '\t');
    CU_ASSERT_FATAL(tab != NULL);
    *tab = '\0';
    unsigned char in[64], want[256];
    size_t nin = from_hex(line, in), nwant = from_hex(tab + 1, want);
    int32_t ids[64];
    for (size_t i = 0; i < nin; i++) ids[i] = byte_tok[in[i]];
    char *dec;
    size_t dlen;
    WT_ASSERT_INT_EQ(weir_tokenizer_decode(g_llama, ids, nin, 0, &dec, &dlen), 0);
    int ok = dlen == nwant && memcmp(dec, want, nwant) == 0;
    if (!ok) fprintf(stderr, "\n  repair of %s differs from Python's %s\n", line, tab + 1);
    CU_ASSERT(ok);
    free(dec);
    stream_matches(g_llama, ids, nin, 0);
    cases++;
  }
  WT_ASSERT_INT_EQ(cases, 324);
  free(data);
}

/* Streams ids through a weir_detok and checks every piece is valid UTF-8 and the pieces
 * concatenate to the one-shot decode. */
static void stream_matches(weir_tokenizer *t, const int32_t *ids, size_t n, int flags) {
  char *one;
  size_t one_len;
  WT_ASSERT_INT_EQ(weir_tokenizer_decode(t, ids, n, flags, &one, &one_len), 0);
  CU_ASSERT(valid_utf8(one, one_len));
  char *acc = malloc(one_len + 1);
  size_t acc_len = 0;
  int bad = 0;
  weir_detok d;
  weir_detok_init(&d, t, flags);
  for (size_t i = 0; i < n; i++) {
    const char *p;
    size_t pl;
    WT_ASSERT_INT_EQ(weir_detok_feed(&d, ids[i], &p, &pl), 0);
    if (!valid_utf8(p, pl)) bad++;
    if (acc_len + pl > one_len) { bad++; break; }
    memcpy(acc + acc_len, p, pl);
    acc_len += pl;
  }
  const char *p;
  size_t pl;
  WT_ASSERT_INT_EQ(weir_detok_flush(&d, &p, &pl), 0);
  if (!valid_utf8(p, pl)) bad++;
  if (acc_len + pl <= one_len) {
    memcpy(acc + acc_len, p, pl);
    acc_len += pl;
  } else {
    bad++;
  }
  weir_detok_free(&d);
  WT_ASSERT_INT_EQ(bad, 0);
  CU_ASSERT(acc_len == one_len && memcmp(acc, one, one_len) == 0);
  free(acc);
  free(one);
}

static void test_detok_streaming(void) {
  char *buf = malloc(48 * 4 + 1);
  rng_state = 3;
  for (int r = 0; r < 200; r++) {
    weir_tokenizer *t = r % 2 ? g_gpt2 : g_llama;
    size_t len = random_text(buf, 48);
    int32_t *ids;
    size_t n;
    WT_ASSERT_INT_EQ(weir_tokenizer_encode(t, buf, len, WEIR_ENCODE_ADD_SPECIAL, &ids, &n), 0);
    stream_matches(t, ids, n, r % 4 < 2 ? 0 : WEIR_DECODE_SKIP_SPECIAL);
    stream_matches(t, ids, n, WEIR_DECODE_KEEP_PREFIX_SPACE);
    free(ids);
  }
  free(buf);
}

/* Random byte tokens make broken sequences on purpose: nothing invalid may come out. */
static void test_detok_invalid_bytes(void) {
  int32_t gpt2_bytes[256], llama_bytes[256];
  for (int b = 0; b < 256; b++) {
    char s[8];
    snprintf(s, sizeof s, "<0x%02X>", b);
    llama_bytes[b] = weir_tokenizer_find(g_llama, s, 6);
    CU_ASSERT_FATAL(llama_bytes[b] >= 0);
  }
  /* gpt2: the token that decodes to exactly byte b. */
  int found = 0;
  for (int32_t id = 0; id < weir_tokenizer_n_tokens(g_gpt2) && found < 256; id++) {
    weir_tok_str s;
    weir_tokenizer_token_bytes(g_gpt2, id, &s);
    if (s.len == 1 && weir_tokenizer_token_type(g_gpt2, id) == WEIR_TOKEN_NORMAL) {
      gpt2_bytes[(unsigned char)s.ptr[0]] = id;
      found++;
    }
  }
  WT_ASSERT_INT_EQ(found, 256);
  rng_state = 4;
  int32_t ids[40];
  for (int r = 0; r < 400; r++) {
    weir_tokenizer *t = r % 2 ? g_gpt2 : g_llama;
    const int32_t *map = r % 2 ? gpt2_bytes : llama_bytes;
    size_t n = 1 + rnd() % 40;
    for (size_t i = 0; i < n; i++) {
      /* Bias towards lead and continuation bytes so partial sequences are common. */
      unsigned b = rnd() % 3 ? 0x80 + rnd() % 0x80 : rnd() % 256;
      ids[i] = map[b];
    }
    stream_matches(t, ids, n, WEIR_DECODE_KEEP_PREFIX_SPACE);
  }
  /* A split 4-byte character is held back until complete, then emitted whole. */
  weir_detok d;
  weir_detok_init(&d, g_llama, 0);
  const char *p;
  size_t pl;
  static const unsigned char smile[4] = {0xF0, 0x9F, 0x98, 0x80};
  for (int i = 0; i < 3; i++) {
    weir_detok_feed(&d, llama_bytes[smile[i]], &p, &pl);
    WT_ASSERT_INT_EQ(pl, 0);
  }
  weir_detok_feed(&d, llama_bytes[smile[3]], &p, &pl);
  CU_ASSERT(pl == 4 && memcmp(p, smile, 4) == 0);
  /* An incomplete tail at the end becomes U+FFFD. */
  weir_detok_feed(&d, llama_bytes[0xE4], &p, &pl);
  WT_ASSERT_INT_EQ(pl, 0);
  weir_detok_flush(&d, &p, &pl);
  CU_ASSERT(pl == 3 && memcmp(p, "\xEF\xBF\xBD", 3) == 0);
  weir_detok_free(&d);
}

static void test_prefix_space_rule(void) {
  int32_t *ids;
  size_t n;
  char *dec;
  size_t dlen;
  WT_ASSERT_INT_EQ(weir_tokenizer_encode(g_llama, "Hello world", 11, WEIR_ENCODE_ADD_SPECIAL, &ids, &n), 0);
  WT_ASSERT_INT_EQ(weir_tokenizer_decode(g_llama, ids, n, WEIR_DECODE_SKIP_SPECIAL, &dec, &dlen), 0);
  CU_ASSERT_STRING_EQUAL(dec, "Hello world");
  free(dec);
  /* A continuation keeps the space its first piece carries. */
  size_t k = 2;
  weir_tok_str piece = {"", 0};
  for (; k < n; k++) {
    weir_tokenizer_token_text(g_llama, ids[k], &piece);
    if (piece.len >= 3 && memcmp(piece.ptr, "\xE2\x96\x81", 3) == 0) break;
  }
  CU_ASSERT_FATAL(k < n); /* the piece that starts "world" carries the space mark */
  WT_ASSERT_INT_EQ(weir_tokenizer_decode(g_llama, ids + k, n - k, WEIR_DECODE_KEEP_PREFIX_SPACE, &dec, &dlen), 0);
  CU_ASSERT(dlen > 0 && dec[0] == ' ');
  free(dec);
  WT_ASSERT_INT_EQ(weir_tokenizer_decode(g_llama, ids + k, n - k, 0, &dec, &dlen), 0);
  CU_ASSERT(dlen > 0 && dec[0] != ' ');
  free(dec);
  free(ids);
}

/* ---- long inputs ---- */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void long_input(weir_tokenizer *t, const char *name) {
  size_t len = 100 * 1024;
  char *a = malloc(len + 1), *b = malloc(len + 1);
  const char *words[] = {"the ", "quick ", "brown ", "fox ", "日本語 ", "12345 ", "\n", "  "};
  size_t o = 0;
  while (o < len) {
    const char *w = words[rnd() % 8];
    size_t wl = strlen(w);
    if (o + wl > len) break;
    memcpy(a + o, w, wl);
    o += wl;
  }
  a[o] = '\0';
  memset(b, 'a', len); /* one 100 KB word: the worst case for a quadratic merge loop */
  b[len] = '\0';
  const char *texts[2] = {a, b};
  size_t lens[2] = {o, len};
  for (int k = 0; k < 2; k++) {
    double t0 = now_s();
    int32_t *ids;
    size_t n;
    WT_ASSERT_INT_EQ(weir_tokenizer_encode(t, texts[k], lens[k], 0, &ids, &n), 0);
    double dt = now_s() - t0;
    /* A sanity bound, not a benchmark: quadratic behaviour takes minutes here. */
    if (dt > 2.0) fprintf(stderr, "\n  %s: 100 KB input %d took %.2f s\n", name, k, dt);
    CU_ASSERT(dt < 2.0);
    char *dec;
    size_t dlen;
    WT_ASSERT_INT_EQ(weir_tokenizer_decode(t, ids, n, 0, &dec, &dlen), 0);
    CU_ASSERT(dlen == lens[k] && memcmp(dec, texts[k], dlen) == 0);
    free(dec);
    free(ids);
  }
  free(a);
  free(b);
}

static void test_long_input(void) {
  rng_state = 5;
  long_input(g_llama, "llama");
  long_input(g_gpt2, "gpt2");
}

/* ---- spec validation ---- */

static void test_spec_errors(void) {
  weir_tok_str toks[3] = {{"a", 1}, {"b", 1}, {"ab", 2}};
  float scores[3] = {0, 0, 1};
  weir_tokenizer_spec s;
  weir_tokenizer *t = NULL;
  char err[200];

  weir_tokenizer_spec_init(&s, WEIR_TOKENIZER_LLAMA);
  s.n_tokens = 3;
  s.tokens = toks;
  WT_ASSERT_INT_EQ(weir_tokenizer_create(&s, &t, err, sizeof err), WEIR_E_INVAL);
  WT_ASSERT_STR_CONTAINS(err, "scores");
  CU_ASSERT(t == NULL);

  s.scores = scores;
  s.bos_id = 7;
  WT_ASSERT_INT_EQ(weir_tokenizer_create(&s, &t, err, sizeof err), WEIR_E_INVAL);
  WT_ASSERT_STR_CONTAINS(err, "bos token id 7");

  s.bos_id = -1;
  s.add_bos = 1;
  WT_ASSERT_INT_EQ(weir_tokenizer_create(&s, &t, err, sizeof err), WEIR_E_INVAL);
  WT_ASSERT_STR_CONTAINS(err, "add_bos");

  s.add_bos = 0;
  int32_t types[3] = {1, 9, 1};
  s.token_types = types;
  WT_ASSERT_INT_EQ(weir_tokenizer_create(&s, &t, err, sizeof err), WEIR_E_INVAL);
  WT_ASSERT_STR_CONTAINS(err, "unknown type 9");

  weir_tok_str bad_merge = {"ab", 2};
  weir_tokenizer_spec_init(&s, WEIR_TOKENIZER_GPT2);
  s.n_tokens = 3;
  s.tokens = toks;
  s.n_merges = 1;
  s.merges = &bad_merge;
  WT_ASSERT_INT_EQ(weir_tokenizer_create(&s, &t, err, sizeof err), WEIR_E_INVAL);
  WT_ASSERT_STR_CONTAINS(err, "merge 0");

  /* A tiny valid gpt2 tokenizer: "a b" merges, ids out of range are refused at decode. */
  weir_tok_str good_merge = {"a b", 3};
  s.merges = &good_merge;
  WT_ASSERT_INT_EQ(weir_tokenizer_create(&s, &t, err, sizeof err), 0);
  int32_t *ids;
  size_t n;
  WT_ASSERT_INT_EQ(weir_tokenizer_encode(t, "ab", 2, 0, &ids, &n), 0);
  CU_ASSERT(n == 1 && ids[0] == 2);
  free(ids);
  int32_t badid = 3;
  char *dec;
  WT_ASSERT_INT_EQ(weir_tokenizer_decode(t, &badid, 1, 0, &dec, NULL), WEIR_E_RANGE);
  weir_tokenizer_free(t);
}

int main(void) {
  g_llama = fx_llama();
  g_gpt2 = fx_gpt2();
  if (!g_llama || !g_gpt2) {
    fprintf(stderr, "cannot load the tokenizer fixtures\n");
    return 1;
  }
  static const wt_test tests[] = {
      {"llama_matches_sentencepiece", test_llama_matches_sentencepiece},
      {"gpt2_matches_reference", test_gpt2_matches_reference},
      {"llama_bos_and_byte_fallback", test_llama_bos_and_byte_fallback},
      {"pretokenizer_splits", test_pretokenizer_splits},
      {"special_tokens", test_special_tokens},
      {"many_specials", test_many_specials},
      {"roundtrip_llama", test_roundtrip_llama},
      {"roundtrip_gpt2", test_roundtrip_gpt2},
      {"random_bytes", test_random_bytes},
      {"detok_streaming", test_detok_streaming},
      {"detok_invalid_bytes", test_detok_invalid_bytes},
      {"utf8_repair_matches_python", test_utf8_repair_matches_python},
      {"prefix_space_rule", test_prefix_space_rule},
      {"long_input", test_long_input},
      {"spec_errors", test_spec_errors},
      {NULL, NULL}};
  int rc = wt_run_suite("tokenizer", tests);
  weir_tokenizer_free(g_llama);
  weir_tokenizer_free(g_gpt2);
  return rc;
}
