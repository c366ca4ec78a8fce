/* The tokenizers: arbitrary bytes in, round trip out. Four tokenizers: the two committed
 * fixtures (a trained SentencePiece model and GPT-2's vocabulary subset) and the two styles
 * `weir mkmodel` writes (read back from GGUF, as the server does).
 *
 * First byte: bits 0-1 the tokenizer, bit 2 parse special tokens, bit 3 add BOS/EOS, bit 4
 * skip special tokens when decoding, bit 5 keep the prefix space. The rest is the text.
 * Invariants: encoding never fails on any bytes and yields ids in range; decoding gives valid
 * UTF-8; the incremental detokenizer gives exactly what decode gives; and with plain flags,
 * decode(encode(text)) is the text with invalid UTF-8 replaced by U+FFFD (and, for
 * SentencePiece, U+2581 read as the space it stands for), when no id is the unknown token
 * (which a vocabulary without every byte may need). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixtures.h"
#include "fuzz_targets.h"
#include "format/gguf.h"
#include "model/tokenizer.h"
#include "util/utf8.h"
#include "weir/status.h"

static weir_tokenizer *g_tok[4];
static weir_gguf *g_gguf[2];
static int g_ready;

static weir_tokenizer *from_gguf(const char *name, int slot) {
  char path[512], err[512];
  snprintf(path, sizeof path, "%s/%s", weir__fuzz_dir(), name);
  weir_tokenizer *t = NULL;
  if (weir_gguf_open(path, &g_gguf[slot], err, sizeof err) != 0 ||
      weir_tokenizer_from_gguf(g_gguf[slot], &t, err, sizeof err) != 0) {
    fprintf(stderr, "fuzz set-up: %s: %s\n", path, err);
    return NULL;
  }
  return t;
}

static void init(void) {
  if (g_ready) return;
  g_tok[0] = fx_llama();
  g_tok[1] = fx_gpt2();
  g_tok[2] = from_gguf("tok-llama.gguf", 0);
  g_tok[3] = from_gguf("tok-gpt2.gguf", 1);
  for (int i = 0; i < 4; i++)
    if (!g_tok[i]) weir__fuzz_fail("tokenizer %d could not be built", i);
  g_ready = 1;
}

int weir_fuzz_tokenizer(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  init();
  const unsigned sel = data[0];
  const weir_tokenizer *t = g_tok[sel & 3];
  const int enc_flags = ((sel & 4) ? WEIR_ENCODE_PARSE_SPECIAL : 0) |
                        ((sel & 8) ? WEIR_ENCODE_ADD_SPECIAL : 0);
  const int dec_flags = ((sel & 16) ? WEIR_DECODE_SKIP_SPECIAL : 0) |
                        ((sel & 32) ? WEIR_DECODE_KEEP_PREFIX_SPACE : 0);
  const char *text = (const char *)data + 1;
  const size_t len = size - 1;

  int32_t *ids = NULL;
  size_t n = 0;
  int rc = weir_tokenizer_encode(t, text, len, enc_flags, &ids, &n);
  if (rc == WEIR_E_NOMEM) return 0;
  if (rc != 0) weir__fuzz_fail("encode failed: %s", weir_strerror(rc));
  const int32_t vocab = weir_tokenizer_n_tokens(t), unk = weir_tokenizer_unk(t);
  int has_unk = 0;
  for (size_t i = 0; i < n; i++) {
    if (ids[i] < 0 || ids[i] >= vocab) weir__fuzz_fail("encode gave id %d", ids[i]);
    if (ids[i] == unk) has_unk = 1;
  }

  char *out = NULL;
  size_t out_len = 0;
  rc = weir_tokenizer_decode(t, ids, n, dec_flags, &out, &out_len);
  if (rc != 0) weir__fuzz_fail("decode failed: %s", weir_strerror(rc));
  if (!weir_utf8_valid(out, out_len)) weir__fuzz_fail("decode gave invalid UTF-8");

  /* Incremental detokenization equals decode. */
  weir_detok d;
  weir_detok_init(&d, t, dec_flags);
  char *inc = malloc(out_len + 64);
  size_t inc_len = 0;
  for (size_t i = 0; i <= n; i++) {
    const char *piece = NULL;
    size_t pl = 0;
    rc = i < n ? weir_detok_feed(&d, ids[i], &piece, &pl) : weir_detok_flush(&d, &piece, &pl);
    if (rc != 0) weir__fuzz_fail("detok failed: %s", weir_strerror(rc));
    if (!weir_utf8_valid(piece, pl)) weir__fuzz_fail("detok gave invalid UTF-8");
    if (inc_len + pl > out_len) weir__fuzz_fail("detok gave more than decode");
    memcpy(inc + inc_len, piece, pl);
    inc_len += pl;
  }
  weir_detok_free(&d);
  if (inc_len != out_len || memcmp(inc, out, out_len))
    weir__fuzz_fail("detok (%zu bytes) differs from decode (%zu bytes)", inc_len, out_len);
  free(inc);

  /* Round trip with plain flags. */
  if (enc_flags == 0 && dec_flags == 0 && !has_unk) {
    char *want = NULL;
    size_t want_len = 0, cap = 0;
    if (weir_utf8_sanitize((const unsigned char *)text, len, 1, &want, &want_len, &cap, NULL))
      return 0;
    /* SentencePiece writes a space as U+2581 and decodes U+2581 as a space: a literal U+2581
     * in the text cannot come back as itself. */
    if (weir_tokenizer_get_type(t) == WEIR_TOKENIZER_LLAMA) {
      size_t o = 0;
      for (size_t i = 0; i < want_len; i++) {
        if (i + 2 < want_len && !memcmp(want + i, "\xe2\x96\x81", 3)) {
          want[o++] = ' ';
          i += 2;
        } else {
          want[o++] = want[i];
        }
      }
      want_len = o;
    }
    if (want_len != out_len || memcmp(want, out, out_len))
      weir__fuzz_fail("round trip through tokenizer %u changed the text (%zu -> %zu bytes)",
                      sel & 3, want_len, out_len);
    free(want);
  }
  free(out);
  free(ids);
  return 0;
}

void weir__fuzz_tokenizer_teardown(void) {
  for (int i = 0; i < 4; i++) weir_tokenizer_free(g_tok[i]);
  for (int i = 0; i < 2; i++) weir_gguf_close(g_gguf[i]);
  memset(g_tok, 0, sizeof g_tok);
  memset(g_gguf, 0, sizeof g_gguf);
  g_ready = 0;
}
