/* `weir mkmodel`: writes a Llama-family GGUF with seeded random weights and a complete
 * tokenizer, streaming tensors to disk as they are generated so the 1.1B shape needs no more
 * memory than one chunk of rows. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli/cli.h"
#include "mkmodel/mkmodel.h"
#include "format/quantize_row.h"
#include "format/gguf_write.h"
#include "util/opt.h"
#include "util/progress.h"
#include "weir/status.h"

typedef struct mk_opts {
  const char *arch, *type, *tokenizer, *chat_template, *name, *out;
  long dim, layers, heads, kv_heads, ffn, vocab, ctx;
  double rope_base, rms_eps;
  int tied;
  unsigned long long seed;
  /* Model families: head size (0: dim / heads), sliding window (-1: the arch's default, 0:
   * none), llama3 rope_freqs, YaRN factor (0: none), LongRoPE factors (phi3), original
   * context of the scaled RoPE (0: ctx / 4). */
  long head_dim, swa, orig_ctx;
  int rope_freqs, longrope;
  double yarn;
  const char *weights_from; /* an f32 GGUF of the same model whose values replace the random
                               ones (NULL: random) */
} mk_opts;

static void usage(FILE *f) {
  fputs("usage: weir mkmodel --out FILE [options]\n"
        "Writes a Llama-family GGUF model with seeded random weights and a generated tokenizer.\n"
        "\n"
        "  --preset tiny|1.1b    start from a preset (default tiny); later flags override it\n"
        "                        tiny: dim 64, 2 layers, 4 heads, 2 KV heads, ffn 192, vocab 512,\n"
        "                              ctx 2048, f16, llama tokenizer, chatml\n"
        "                        1.1b: dim 2048, 22 layers, 32 heads, 4 KV heads, ffn 5632,\n"
        "                              vocab 32000, ctx 2048, f16, llama tokenizer, chatml\n"
        "                        gemma3-1b, qwen3-0.6b, llama3.2-1b: those models' shapes,\n"
        "                              tokenizers and templates (f16, random weights)\n"
        "  --arch llama|mistral|qwen2|qwen3|gemma2|gemma3|phi3|bert|nomic-bert   architecture\n"
        "                        (bert, nomic-bert: an embedding model with a WordPiece\n"
        "                        vocabulary, for [embedding] model; qwen2 adds QKV\n"
        "                        biases; qwen3 Q/K norms; gemma2/3 post-norms, GELU, soft-caps,\n"
        "                        sliding windows; phi3 fused QKV and gate/up; docs/models.md)\n"
        "  --dim N  --layers N  --heads N  --kv-heads N  --ffn N  --vocab N  --ctx N\n"
        "  --head-dim N          head size (default dim / heads; written as key_length)\n"
        "  --swa N               sliding window (gemma2 4096, gemma3 512 by default; 0 none;\n"
        "                        other archs: every layer slides)\n"
        "  --rope-freqs          llama3 frequency factors (rope_freqs.weight: factor 32, low 1,\n"
        "                        high 4 over --orig-ctx); --no-rope-freqs: none (a preset's off)\n"
        "  --yarn X              YaRN scaling by X over --orig-ctx\n"
        "  --longrope            phi3 rope_factors_long/short over --orig-ctx\n"
        "  --orig-ctx N          original context of the scaled RoPE (default ctx / 4)\n"
        "  --rope-base X         RoPE frequency base (default 10000; qwen2 1000000)\n"
        "  --rms-eps X           RMSNorm epsilon (default 1e-5; qwen2 1e-6)\n"
        "  --type T              weight type (norms and biases stay f32): one type for every\n"
        "                        matrix, f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 iq4_nl\n"
        "                        q2_k q3_k q4_k q5_k q6_k iq4_xs (with q4_0 the output\n"
        "                        matrix is q8_0), or a mix: q3_k_m, q4_k_m, q5_k_m (output\n"
        "                        q6_k; attn_v and ffn_down of even layers q4_k / q6_k / q6_k);\n"
        "                        the 256-element types need --dim and --ffn multiples of 256\n"
        "  --tied                no output.weight: the output reuses token_embd.weight\n"
        "  --tokenizer llama|gpt2         SentencePiece-style or byte-level BPE (qwen3: gpt2)\n"
        "  --chat-template chatml|llama2|llama3|mistral|zephyr|gemma|qwen3|phi3|none\n"
        "                        (default chatml; gemma2/gemma3: gemma; phi3: phi3)\n"
        "  --seed N              weight seed (default 1)\n"
        "  --name S              general.name (default weir-<preset or custom>)\n"
        "  --weights-from F.gguf take every tensor's values from F (an f32 file of the same\n"
        "                        flags, e.g. trained by scripts/train-families.py) instead of\n"
        "                        random ones, and write them as --type: weir's own quantizer\n"
        "  --out FILE            output path (written to FILE.tmp, then renamed)\n",
        f);
}

static int preset_apply(const char *name, mk_opts *o) {
  o->arch = "llama";
  o->type = "f16";
  o->tokenizer = "llama";
  o->chat_template = "chatml";
  o->ctx = 2048;
  o->seed = 1;
  o->tied = 0;
  o->swa = -1;
  if (strcmp(name, "gemma3-1b") == 0) {
    o->arch = "gemma3", o->chat_template = "gemma", o->tied = 1;
    o->dim = 1152, o->layers = 26, o->heads = 4, o->kv_heads = 1, o->head_dim = 256;
    o->ffn = 6912, o->vocab = 262144, o->ctx = 32768, o->swa = 512, o->rope_base = 1000000;
    o->rms_eps = 1e-6;
  } else if (strcmp(name, "qwen3-0.6b") == 0) {
    o->arch = "qwen3", o->tokenizer = "gpt2", o->chat_template = "qwen3", o->tied = 1;
    o->dim = 1024, o->layers = 28, o->heads = 16, o->kv_heads = 8, o->head_dim = 128;
    o->ffn = 3072, o->vocab = 151936, o->ctx = 40960, o->rope_base = 1000000, o->rms_eps = 1e-6;
  } else if (strcmp(name, "llama3.2-1b") == 0) {
    o->tokenizer = "gpt2", o->chat_template = "llama3", o->tied = 1, o->rope_freqs = 1;
    o->dim = 2048, o->layers = 16, o->heads = 32, o->kv_heads = 8, o->ffn = 8192;
    o->vocab = 128256, o->ctx = 131072, o->orig_ctx = 8192, o->rope_base = 500000;
  } else if (strcmp(name, "tiny") == 0) {
    o->dim = 64, o->layers = 2, o->heads = 4, o->kv_heads = 2, o->ffn = 192, o->vocab = 512;
  } else if (strcmp(name, "1.1b") == 0) {
    o->dim = 2048, o->layers = 22, o->heads = 32, o->kv_heads = 4, o->ffn = 5632;
    o->vocab = 32000;
  } else {
    return -1;
  }
  return 0;
}

/* ---- deterministic random numbers ---- */

static uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
  return h;
}

/* An approximately normal sample (Irwin-Hall of four 16-bit uniforms, scaled to unit
 * variance): cheap, bounded at +-3.5 sigma, and plenty for random weights. */
static inline float gauss(uint64_t *state) {
  uint64_t r = mix64(*state += 0x9e3779b97f4a7c15ull);
  uint32_t s = (uint32_t)(r & 0xffff) + (uint32_t)(r >> 16 & 0xffff) +
               (uint32_t)(r >> 32 & 0xffff) + (uint32_t)(r >> 48);
  return ((float)s * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;
}

/* ---- tensor plan ---- */

typedef enum init_kind { INIT_NORMAL, INIT_NORM_WEIGHT, INIT_FIXED } init_kind;

typedef struct plan_tensor {
  char name[64];
  weir_dtype dtype;
  int ndim;
  int64_t ne[2];
  init_kind init;
  float std;
  const float *fixed; /* INIT_FIXED: the values (a vector) */
} plan_tensor;

static int plan_add(plan_tensor *p, int *n, const char *name, weir_dtype dt, int64_t ne0,
                    int64_t ne1, init_kind init, float std) {
  plan_tensor *t = &p[(*n)++];
  snprintf(t->name, sizeof t->name, "%s", name);
  t->dtype = dt;
  t->ndim = ne1 ? 2 : 1;
  t->ne[0] = ne0;
  t->ne[1] = ne1 ? ne1 : 1;
  t->init = init;
  t->std = std;
  return 0;
}

/* Generates one tensor row by row (each row seeded from the seed, the tensor name and the
 * row index, so the values do not depend on chunking) and streams it to the writer. */
static int gen_tensor(weir_gguf_writer *w, const plan_tensor *t, uint64_t seed, float *fbuf,
                      uint8_t *qbuf, int64_t max_elems, const float *src) {
  int64_t cols = t->ne[0], rows = t->ne[1];
  size_t row_bytes = weir_dtype_row_bytes(t->dtype, cols);
  int64_t rows_per_chunk = max_elems / cols;
  if (rows_per_chunk < 1) rows_per_chunk = 1;
  uint64_t th = hash_str(t->name) ^ mix64(seed);
  for (int64_t r0 = 0; r0 < rows; r0 += rows_per_chunk) {
    int64_t nr = rows - r0 < rows_per_chunk ? rows - r0 : rows_per_chunk;
    for (int64_t r = 0; r < nr; r++) {
      uint64_t st = mix64(th + (uint64_t)(r0 + r) * 0xd1b54a32d192ed03ull);
      float *row = fbuf + r * cols;
      if (src) /* --weights-from: the source file's row (f32, same shape, checked) */
        memcpy(row, src + (size_t)(r0 + r) * (size_t)cols, (size_t)cols * sizeof *row);
      else if (t->init == INIT_FIXED)
        for (int64_t c = 0; c < cols; c++) row[c] = t->fixed[c];
      else if (t->init == INIT_NORM_WEIGHT)
        for (int64_t c = 0; c < cols; c++) row[c] = 1.0f + t->std * gauss(&st);
      else
        for (int64_t c = 0; c < cols; c++) row[c] = t->std * gauss(&st);
      int rc = weir_quantize_row(t->dtype, row, qbuf + (size_t)r * row_bytes, cols);
      if (rc) return rc;
    }
    int rc = weir_gguf_writer_put(w, qbuf, (size_t)nr * row_bytes);
    if (rc) return rc;
  }
  return 0;
}

/* A --type: the type of most matrices (base), of token_embd, of output.weight, and of
 * attn_v / ffn_down in the layers that get more bits (even layers: half of them, spread
 * over the depth), with llama.cpp's general.file_type number for the mix. */
typedef struct mk_type {
  const char *name;
  weir_dtype base, embd, out, more;
  uint32_t file_type; /* LLAMA_FTYPE numbering */
} mk_type;

static const mk_type k_types[] = {
    {"f32", WEIR_DTYPE_F32, WEIR_DTYPE_F32, WEIR_DTYPE_F32, WEIR_DTYPE_F32, 0},
    {"f16", WEIR_DTYPE_F16, WEIR_DTYPE_F16, WEIR_DTYPE_F16, WEIR_DTYPE_F16, 1},
    {"bf16", WEIR_DTYPE_BF16, WEIR_DTYPE_BF16, WEIR_DTYPE_BF16, WEIR_DTYPE_BF16, 32},
    {"q8_0", WEIR_DTYPE_Q8_0, WEIR_DTYPE_Q8_0, WEIR_DTYPE_Q8_0, WEIR_DTYPE_Q8_0, 7},
    {"q4_0", WEIR_DTYPE_Q4_0, WEIR_DTYPE_Q4_0, WEIR_DTYPE_Q8_0, WEIR_DTYPE_Q4_0, 2},
    {"q4_1", WEIR_DTYPE_Q4_1, WEIR_DTYPE_Q4_1, WEIR_DTYPE_Q4_1, WEIR_DTYPE_Q4_1, 3},
    {"q5_0", WEIR_DTYPE_Q5_0, WEIR_DTYPE_Q5_0, WEIR_DTYPE_Q5_0, WEIR_DTYPE_Q5_0, 8},
    {"q5_1", WEIR_DTYPE_Q5_1, WEIR_DTYPE_Q5_1, WEIR_DTYPE_Q5_1, WEIR_DTYPE_Q5_1, 9},
    {"iq4_nl", WEIR_DTYPE_IQ4_NL, WEIR_DTYPE_IQ4_NL, WEIR_DTYPE_IQ4_NL, WEIR_DTYPE_IQ4_NL, 25},
    {"q2_k", WEIR_DTYPE_Q2_K, WEIR_DTYPE_Q2_K, WEIR_DTYPE_Q2_K, WEIR_DTYPE_Q2_K, 10},
    {"q3_k", WEIR_DTYPE_Q3_K, WEIR_DTYPE_Q3_K, WEIR_DTYPE_Q3_K, WEIR_DTYPE_Q3_K, 11},
    {"q4_k", WEIR_DTYPE_Q4_K, WEIR_DTYPE_Q4_K, WEIR_DTYPE_Q4_K, WEIR_DTYPE_Q4_K, 14},
    {"q5_k", WEIR_DTYPE_Q5_K, WEIR_DTYPE_Q5_K, WEIR_DTYPE_Q5_K, WEIR_DTYPE_Q5_K, 16},
    {"q6_k", WEIR_DTYPE_Q6_K, WEIR_DTYPE_Q6_K, WEIR_DTYPE_Q6_K, WEIR_DTYPE_Q6_K, 18},
    {"iq4_xs", WEIR_DTYPE_IQ4_XS, WEIR_DTYPE_IQ4_XS, WEIR_DTYPE_IQ4_XS, WEIR_DTYPE_IQ4_XS, 30},
    {"q3_k_m", WEIR_DTYPE_Q3_K, WEIR_DTYPE_Q3_K, WEIR_DTYPE_Q6_K, WEIR_DTYPE_Q4_K, 12},
    {"q4_k_m", WEIR_DTYPE_Q4_K, WEIR_DTYPE_Q4_K, WEIR_DTYPE_Q6_K, WEIR_DTYPE_Q6_K, 15},
    {"q5_k_m", WEIR_DTYPE_Q5_K, WEIR_DTYPE_Q5_K, WEIR_DTYPE_Q6_K, WEIR_DTYPE_Q6_K, 17},
};

/* The --type named s (case-insensitive, so q4_K_M works too), or NULL. */
static const mk_type *find_type(const char *s) {
  for (size_t i = 0; i < sizeof k_types / sizeof k_types[0]; i++)
    if (strcasecmp(s, k_types[i].name) == 0) return &k_types[i];
  return NULL;
}

/* Whether any matrix of the type uses 256-element super-blocks. */
static int type_needs_256(const mk_type *t) {
  return weir_dtype_block_elems(t->base) == WEIR_QK_K ||
         weir_dtype_block_elems(t->out) == WEIR_QK_K ||
         weir_dtype_block_elems(t->more) == WEIR_QK_K;
}

static int parse_long(const char *flag, const char *s, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || *end || end == s || v < lo || v > hi) {
    fprintf(stderr, "weir mkmodel: %s must be an integer from %ld to %ld, got '%s'\n", flag, lo,
            hi, s);
    return -1;
  }
  *out = v;
  return 0;
}

static int parse_double(const char *flag, const char *s, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || *end || end == s || !(v > 0) || !isfinite(v)) {
    fprintf(stderr, "weir mkmodel: %s must be a positive number, got '%s'\n", flag, s);
    return -1;
  }
  *out = v;
  return 0;
}

#define ERRLEN 512

static int write_model(const mk_opts *o, char *err) {
  const mk_type *ty = find_type(o->type);
  int rc = 0;
  weir_gguf_writer *w = NULL;
  weir__vocab voc;
  plan_tensor *plan = NULL;
  float *fbuf = NULL;
  uint8_t *qbuf = NULL;
  char *tmp = NULL;
  const weir__chat_template *tpl = weir__chat_template_find(o->chat_template);
  float *factors = NULL;
  weir_gguf *src = NULL;        /* --weights-from */
  const float **src_data = NULL; /* its data per planned tensor */
  int specials_n = 0;
  memset(&voc, 0, sizeof voc);
  const weir_dtype wt = ty->base, out_t = ty->out;
  while (tpl->specials[specials_n]) specials_n++;
  rc = weir__vocab_build(o->tokenizer, tpl->specials, specials_n, tpl->bos, tpl->eos,
                         (int32_t)o->vocab, &voc, err, ERRLEN);
  if (rc) goto free_all;
  for (int i = 0; tpl->texts[i]; i++) /* a text token of the template is user-defined */
    for (int32_t id = 0; id < voc.n; id++)
      if (!strcmp(voc.tokens[id], tpl->texts[i])) voc.types[id] = WEIR__TOK_USER_DEFINED;
  if ((rc = weir_gguf_writer_new(&w))) goto free_all;

  /* Metadata, in the order and with the names llama.cpp's converter uses. */
  const char *a = o->arch;
  int qwen = strcmp(a, "qwen2") == 0, qwen3 = strcmp(a, "qwen3") == 0;
  int gemma2 = strcmp(a, "gemma2") == 0, gemma3 = strcmp(a, "gemma3") == 0;
  int gemma = gemma2 || gemma3, phi3 = strcmp(a, "phi3") == 0;
  char key[128];
  long head_dim = o->head_dim ? o->head_dim : o->dim / o->heads;
  long qd = o->heads * head_dim;
  long swa = o->swa >= 0 ? o->swa : gemma2 ? 4096 : gemma3 ? 512 : 0;
  long orig_ctx = o->orig_ctx ? o->orig_ctx : (o->ctx / 4 > 0 ? o->ctx / 4 : 1);
  /* RoPE factor tables (rope_freqs, LongRoPE), head_dim / 2 each. */
  factors = calloc((size_t)head_dim, sizeof *factors);
  if (!factors) {
    rc = WEIR_E_NOMEM;
    goto free_all;
  }
  if (o->rope_freqs) {
    /* Meta's llama3 scaling (factor 32, low 1, high 4): wavelengths past orig/low are
     * interpolated by the factor, those under orig/high kept, a smooth blend between. */
    const double fac = 32, lo = 1, hi = 4, pi = 3.14159265358979323846;
    for (long i = 0; i < head_dim / 2; i++) {
      double freq = pow(o->rope_base, -2.0 * (double)i / (double)head_dim), wl = 2 * pi / freq;
      if (wl < orig_ctx / hi) factors[i] = 1.0f;
      else if (wl > orig_ctx / lo) factors[i] = (float)fac;
      else {
        double smooth = (orig_ctx / wl - lo) / (hi - lo);
        factors[i] = (float)(1.0 / ((1 - smooth) / fac + smooth));
      }
    }
  } else if (o->longrope) {
    /* Growing with the dimension, as the published long factors do; short ones gentler. */
    for (long i = 0; i < head_dim / 2; i++) {
      factors[i] = (float)(1.0 + 0.35 * (double)i);
      factors[head_dim / 2 + i] = (float)(1.0 + 0.05 * (double)i);
    }
  }
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", a, suffix), key)
  if ((rc = weir_gguf_add_str(w, "general.architecture", a)) ||
      (rc = weir_gguf_add_str(w, "general.name", o->name)) ||
      (rc = weir_gguf_add_u32(w, KEY("vocab_size"), (uint32_t)o->vocab)) ||
      (rc = weir_gguf_add_u32(w, KEY("context_length"), (uint32_t)o->ctx)) ||
      (rc = weir_gguf_add_u32(w, KEY("embedding_length"), (uint32_t)o->dim)) ||
      (rc = weir_gguf_add_u32(w, KEY("block_count"), (uint32_t)o->layers)) ||
      (rc = weir_gguf_add_u32(w, KEY("feed_forward_length"), (uint32_t)o->ffn)) ||
      (rc = weir_gguf_add_u32(w, KEY("rope.dimension_count"), (uint32_t)head_dim)) ||
      (rc = weir_gguf_add_u32(w, KEY("attention.head_count"), (uint32_t)o->heads)) ||
      (rc = weir_gguf_add_u32(w, KEY("attention.head_count_kv"), (uint32_t)o->kv_heads)) ||
      (rc = weir_gguf_add_f32(w, KEY("rope.freq_base"), (float)o->rope_base)) ||
      (rc = weir_gguf_add_f32(w, KEY("attention.layer_norm_rms_epsilon"), (float)o->rms_eps)) ||
      (rc = weir_gguf_add_u32(w, "general.file_type", ty->file_type)))
    goto free_all;
  if ((head_dim != o->dim / o->heads || qwen3 || gemma) &&
      ((rc = weir_gguf_add_u32(w, KEY("attention.key_length"), (uint32_t)head_dim)) ||
       (rc = weir_gguf_add_u32(w, KEY("attention.value_length"), (uint32_t)head_dim))))
    goto free_all;
  if (swa > 0 && (rc = weir_gguf_add_u32(w, KEY("attention.sliding_window"), (uint32_t)swa)))
    goto free_all;
  if (gemma2 && ((rc = weir_gguf_add_f32(w, KEY("attn_logit_softcapping"), 50.0f)) ||
                 (rc = weir_gguf_add_f32(w, KEY("final_logit_softcapping"), 30.0f))))
    goto free_all;
  if (o->yarn > 0 &&
      ((rc = weir_gguf_add_str(w, KEY("rope.scaling.type"), "yarn")) ||
       (rc = weir_gguf_add_f32(w, KEY("rope.scaling.factor"), (float)o->yarn))))
    goto free_all;
  if ((o->yarn > 0 || o->longrope) &&
      (rc = weir_gguf_add_u32(w, KEY("rope.scaling.original_context_length"),
                              (uint32_t)orig_ctx)))
    goto free_all;
  if (o->longrope &&
      (rc = weir_gguf_add_f32(w, KEY("rope.scaling.attn_factor"),
                              (float)sqrt(1.0 + log((double)o->ctx / (double)orig_ctx) /
                                                    log((double)orig_ctx)))))
    goto free_all;
#undef KEY
  if (weir_dtype_block_elems(wt) > 1 &&
      (rc = weir_gguf_add_u32(w, "general.quantization_version", 2)))
    goto free_all;
  int gpt2 = strcmp(o->tokenizer, "gpt2") == 0;
  if ((rc = weir_gguf_add_str(w, "tokenizer.ggml.model", gpt2 ? "gpt2" : "llama")) ||
      /* Qwen2 and Qwen3 share one split (digits one by one, case-free contractions);
       * Llama 3's files name theirs llama-bpe (digits in groups of up to three). */
      (gpt2 && (rc = weir_gguf_add_str(w, "tokenizer.ggml.pre",
                                       qwen || qwen3 ? "qwen2"
                                       : !strcmp(o->chat_template, "llama3") ? "llama-bpe"
                                                                              : "gpt-2"))) ||
      /* Gemma's SentencePiece adds no space before the text (as its GGUFs say). */
      (!gpt2 && gemma &&
       (rc = weir_gguf_add_bool(w, "tokenizer.ggml.add_space_prefix", 0))) ||
      (rc = weir_gguf_add_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)voc.tokens,
                                  NULL, (uint64_t)voc.n)) ||
      (!gpt2 && (rc = weir_gguf_add_arr(w, "tokenizer.ggml.scores", WEIR_GGUF_F32, voc.scores,
                                        (uint64_t)voc.n))) ||
      (rc = weir_gguf_add_arr(w, "tokenizer.ggml.token_type", WEIR_GGUF_I32, voc.types,
                              (uint64_t)voc.n)) ||
      (gpt2 && (rc = weir_gguf_add_arr_str(w, "tokenizer.ggml.merges",
                                           (const char *const *)voc.merges, NULL,
                                           (uint64_t)voc.n_merges))) ||
      (rc = weir_gguf_add_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)voc.bos)) ||
      (rc = weir_gguf_add_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)voc.eos)) ||
      (voc.unk >= 0 &&
       (rc = weir_gguf_add_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)voc.unk))) ||
      (rc = weir_gguf_add_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)voc.pad)) ||
      (rc = weir_gguf_add_bool(w, "tokenizer.ggml.add_bos_token", voc.add_bos)) ||
      (rc = weir_gguf_add_bool(w, "tokenizer.ggml.add_eos_token", 0)) ||
      (tpl->jinja && (rc = weir_gguf_add_str(w, "tokenizer.chat_template", tpl->jinja))))
    goto free_all;

  /* Tensors. Scales keep activations near unit size: projections N(0, 1/fan_in), the
   * residual-writing projections further by 1/sqrt(2 layers), embedding and output rows
   * N(0, 4/dim) so logits spread over a few units. */
  int n_plan = 0;
  plan = calloc((size_t)(6 + o->layers * 16), sizeof *plan);
  if (!plan) {
    rc = WEIR_E_NOMEM;
    goto free_all;
  }
  int64_t e = o->dim, kv = o->kv_heads * head_dim, ff = o->ffn, nv = o->vocab;
  float s_in = 1.0f / sqrtf((float)e), s_ff = 1.0f / sqrtf((float)ff);
  float s_res = 1.0f / sqrtf(2.0f * (float)o->layers);
  plan_add(plan, &n_plan, "token_embd.weight", ty->embd, e, nv, INIT_NORMAL, 2.0f * s_in);
  plan_add(plan, &n_plan, "output_norm.weight", WEIR_DTYPE_F32, e, 0, INIT_NORM_WEIGHT, 0.1f);
  if (!o->tied)
    plan_add(plan, &n_plan, "output.weight", out_t, e, nv, INIT_NORMAL, 2.0f * s_in);
  if (o->rope_freqs) {
    plan_add(plan, &n_plan, "rope_freqs.weight", WEIR_DTYPE_F32, head_dim / 2, 0, INIT_FIXED, 0);
    plan[n_plan - 1].fixed = factors;
  }
  if (o->longrope) {
    plan_add(plan, &n_plan, "rope_factors_long.weight", WEIR_DTYPE_F32, head_dim / 2, 0,
             INIT_FIXED, 0);
    plan[n_plan - 1].fixed = factors;
    plan_add(plan, &n_plan, "rope_factors_short.weight", WEIR_DTYPE_F32, head_dim / 2, 0,
             INIT_FIXED, 0);
    plan[n_plan - 1].fixed = factors + head_dim / 2;
  }
  /* Gemma multiplies embeddings by sqrt(dim): smaller rows keep the residual near unit. */
  if (gemma) plan[0].std /= sqrtf((float)e);
  for (long l = 0; l < o->layers; l++) {
    char nm[64];
    const weir_dtype more = l % 2 == 0 ? ty->more : wt;
#define BLK(s) (snprintf(nm, sizeof nm, "blk.%ld.%s", l, s), nm)
    plan_add(plan, &n_plan, BLK("attn_norm.weight"), WEIR_DTYPE_F32, e, 0, INIT_NORM_WEIGHT,
             0.1f);
    if (phi3) {
      plan_add(plan, &n_plan, BLK("attn_qkv.weight"), more, e, qd + 2 * kv, INIT_NORMAL, s_in);
    } else {
      plan_add(plan, &n_plan, BLK("attn_q.weight"), wt, e, qd, INIT_NORMAL, s_in);
      plan_add(plan, &n_plan, BLK("attn_k.weight"), wt, e, kv, INIT_NORMAL, s_in);
      plan_add(plan, &n_plan, BLK("attn_v.weight"), more, e, kv, INIT_NORMAL, s_in);
    }
    if (qwen) {
      plan_add(plan, &n_plan, BLK("attn_q.bias"), WEIR_DTYPE_F32, qd, 0, INIT_NORMAL, 0.05f);
      plan_add(plan, &n_plan, BLK("attn_k.bias"), WEIR_DTYPE_F32, kv, 0, INIT_NORMAL, 0.05f);
      plan_add(plan, &n_plan, BLK("attn_v.bias"), WEIR_DTYPE_F32, kv, 0, INIT_NORMAL, 0.05f);
    }
    if (qwen3 || gemma3) {
      plan_add(plan, &n_plan, BLK("attn_q_norm.weight"), WEIR_DTYPE_F32, head_dim, 0,
               INIT_NORM_WEIGHT, 0.1f);
      plan_add(plan, &n_plan, BLK("attn_k_norm.weight"), WEIR_DTYPE_F32, head_dim, 0,
               INIT_NORM_WEIGHT, 0.1f);
    }
    plan_add(plan, &n_plan, BLK("attn_output.weight"), wt, qd, e, INIT_NORMAL,
             (qd == e ? s_in : 1.0f / sqrtf((float)qd)) * s_res);
    if (gemma) {
      plan_add(plan, &n_plan, BLK("post_attention_norm.weight"), WEIR_DTYPE_F32, e, 0,
               INIT_NORM_WEIGHT, 0.1f);
      plan_add(plan, &n_plan, BLK("post_ffw_norm.weight"), WEIR_DTYPE_F32, e, 0,
               INIT_NORM_WEIGHT, 0.1f);
    }
    plan_add(plan, &n_plan, BLK("ffn_norm.weight"), WEIR_DTYPE_F32, e, 0, INIT_NORM_WEIGHT,
             0.1f);
    if (phi3) {
      plan_add(plan, &n_plan, BLK("ffn_up.weight"), wt, e, 2 * ff, INIT_NORMAL, s_in);
    } else {
      plan_add(plan, &n_plan, BLK("ffn_gate.weight"), wt, e, ff, INIT_NORMAL, s_in);
      plan_add(plan, &n_plan, BLK("ffn_up.weight"), wt, e, ff, INIT_NORMAL, s_in);
    }
    plan_add(plan, &n_plan, BLK("ffn_down.weight"), more, ff, e, INIT_NORMAL, s_ff * s_res);
#undef BLK
  }
  uint64_t params = 0;
  for (int i = 0; i < n_plan; i++) {
    int64_t ne[2] = {plan[i].ne[0], plan[i].ne[1]};
    rc = weir_gguf_add_tensor(w, plan[i].name, plan[i].dtype, plan[i].ndim, ne, NULL);
    if (rc < 0) {
      snprintf(err, ERRLEN, "tensor %s: shape {%lld, %lld} does not suit type %s", plan[i].name,
               (long long)ne[0], (long long)ne[1], weir_dtype_name(plan[i].dtype));
      goto free_all;
    }
    params += (uint64_t)(ne[0] * ne[1]);
  }
  /* --weights-from: every planned tensor must be in the source, f32, with the planned shape,
   * and the source must hold nothing else (a file made with other flags is refused, named,
   * rather than written with some tensors random). */
  if (o->weights_from) {
    if ((rc = weir_gguf_open(o->weights_from, &src, err, ERRLEN))) goto free_all;
    src_data = calloc((size_t)n_plan, sizeof *src_data);
    if (!src_data) {
      rc = WEIR_E_NOMEM;
      goto free_all;
    }
    if (weir_gguf_tensor_count(src) != n_plan) {
      snprintf(err, ERRLEN, "%s has %lld tensors; these flags make %d (made with other flags?)",
               o->weights_from, (long long)weir_gguf_tensor_count(src), n_plan);
      rc = WEIR_E_INVAL;
      goto free_all;
    }
    for (int i = 0; i < n_plan; i++) {
      const weir_gguf_tensor *st = weir_gguf_find_tensor(src, plan[i].name);
      if (!st || st->t.dtype != WEIR_DTYPE_F32 || st->t.ndim != plan[i].ndim ||
          st->t.ne[0] != plan[i].ne[0] || (plan[i].ndim == 2 && st->t.ne[1] != plan[i].ne[1])) {
        snprintf(err, ERRLEN, "%s: tensor %s is %s; these flags need it f32 of shape {%lld, "
                 "%lld}", o->weights_from, plan[i].name, !st ? "missing"
                 : st->t.dtype != WEIR_DTYPE_F32 ? "not f32" : "of another shape",
                 (long long)plan[i].ne[0], (long long)plan[i].ne[1]);
        rc = WEIR_E_INVAL;
        goto free_all;
      }
      src_data[i] = st->t.data;
    }
  }

  const int64_t max_elems = 1 << 20;
  int64_t widest = o->dim > 2 * o->ffn ? o->dim : 2 * o->ffn;
  if (widest < qd + 2 * kv) widest = qd + 2 * kv;
  size_t fcap = (size_t)(widest > max_elems ? widest : max_elems);
  fbuf = malloc(fcap * sizeof *fbuf);
  qbuf = malloc(fcap * sizeof(float));
  size_t tl = strlen(o->out) + 5;
  tmp = malloc(tl);
  if (!fbuf || !qbuf || !tmp) {
    rc = WEIR_E_NOMEM;
    goto free_all;
  }
  snprintf(tmp, tl, "%s.tmp", o->out);
  if ((rc = weir_gguf_writer_begin(w, tmp, err, ERRLEN))) goto free_all;
  weir_progress progress = {0};
  char what[64];
  snprintf(what, sizeof what, "writing %.1fM parameters", (double)params / 1e6);
  weir_progress_begin(&progress, what, (uint64_t)n_plan, "tensors", 0);
  for (int i = 0; i < n_plan && !rc; i++) {
    rc = gen_tensor(w, &plan[i], (uint64_t)o->seed, fbuf, qbuf, max_elems,
                    src_data ? src_data[i] : NULL);
    weir_progress_update(&progress, (uint64_t)i + 1);
  }
  weir_progress_end(&progress, rc == 0);
  if (rc) {
    snprintf(err, ERRLEN, "%s: writing tensors failed: %s", tmp, strerror(errno));
    goto remove_tmp;
  }
  if ((rc = weir_gguf_writer_end(w, err, ERRLEN))) goto remove_tmp;
  if (rename(tmp, o->out) != 0) {
    snprintf(err, ERRLEN, "cannot rename %s to %s: %s", tmp, o->out, strerror(errno));
    rc = WEIR_E_IO;
    goto remove_tmp;
  }
  printf("wrote %s: %s, %ld layers, dim %ld, %ld heads (%ld KV), ffn %ld, vocab %ld, ctx %ld, "
         "%s, %s tokenizer, template %s, %.1fM parameters\n",
         o->out, o->arch, o->layers, o->dim, o->heads, o->kv_heads, o->ffn, o->vocab, o->ctx,
         o->type, o->tokenizer, o->chat_template, (double)params / 1e6);
  goto free_all;
remove_tmp:
  weir_gguf_writer_free(w);
  w = NULL;
  unlink(tmp);
free_all:
  if (rc && !err[0]) snprintf(err, ERRLEN, "%s", weir_strerror(rc));
  weir_gguf_writer_free(w);
  weir__vocab_free(&voc);
  free(plan);
  free(factors);
  free(src_data);
  weir_gguf_close(src);
  free(fbuf);
  free(qbuf);
  free(tmp);
  return rc;
}

/* ---- Encoders: bert and nomic-bert (issue 33) -------------------------------------------- */

/* A WordPiece vocabulary of exactly n tokens, the GGUF way (▁ opens a word, continuations
 * have no "##"): [PAD] 0, [unused*], [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103 as BERT's
 * uncased vocabulary places them, then every ASCII punctuation mark, letter and digit as a
 * word and as a continuation, then the corpus's words in order of first appearance. */
static int wordpiece_vocab(int32_t n, char ***tokens_out, int32_t **types_out) {
  char **tok = calloc((size_t)n, sizeof *tok);
  int32_t *ty = calloc((size_t)n, sizeof *ty);
  int32_t k = 0;
  if (!tok || !ty) goto fail;
#define PUSH(s, t)                                        \
  do {                                                    \
    if (k < n && !(tok[k] = strdup(s))) goto fail;        \
    if (k < n) ty[k++] = (t);                             \
  } while (0)
  char buf[64];
  PUSH("[PAD]", WEIR__TOK_CONTROL);
  for (int i = 1; i < 100; i++) {
    snprintf(buf, sizeof buf, "[unused%d]", i - 1);
    PUSH(buf, WEIR__TOK_CONTROL);
  }
  PUSH("[UNK]", WEIR__TOK_UNKNOWN);
  PUSH("[CLS]", WEIR__TOK_CONTROL);
  PUSH("[SEP]", WEIR__TOK_CONTROL);
  PUSH("[MASK]", WEIR__TOK_CONTROL);
  for (int c = 33; c < 127; c++) {
    if (isupper(c)) continue;
    snprintf(buf, sizeof buf, "\xE2\x96\x81%c", c);
    PUSH(buf, WEIR__TOK_NORMAL);
    if (isalnum(c)) {
      snprintf(buf, sizeof buf, "%c", c);
      PUSH(buf, WEIR__TOK_NORMAL);
    }
  }
  for (const char *p = weir__mkmodel_corpus; *p && k < n;) {
    if (!isalnum((unsigned char)*p)) {
      p++;
      continue;
    }
    size_t len = 0;
    while (isalnum((unsigned char)p[len]) && len < 40) len++;
    memcpy(buf, "\xE2\x96\x81", 3);
    for (size_t i = 0; i < len; i++) buf[3 + i] = (char)tolower((unsigned char)p[i]);
    buf[3 + len] = '\0';
    int seen = 0;
    for (int32_t i = 104; i < k && !seen; i++) seen = !strcmp(tok[i], buf);
    if (!seen) PUSH(buf, WEIR__TOK_NORMAL);
    /* A word's tail as a continuation piece too, so words split into several pieces. */
    if (len > 3) {
      snprintf(buf, sizeof buf, "%.*s", (int)(len - 2), p + 2);
      for (char *q = buf; *q; q++) *q = (char)tolower((unsigned char)*q);
      seen = 0;
      for (int32_t i = 104; i < k && !seen; i++) seen = !strcmp(tok[i], buf);
      if (!seen) PUSH(buf, WEIR__TOK_NORMAL);
    }
    p += len;
  }
  for (int32_t i = 0; k < n; i++) {
    snprintf(buf, sizeof buf, "[unused%d]", 99 + i);
    PUSH(buf, WEIR__TOK_CONTROL);
  }
#undef PUSH
  *tokens_out = tok;
  *types_out = ty;
  return 0;
fail:
  for (int32_t i = 0; tok && i < n; i++) free(tok[i]);
  free(tok);
  free(ty);
  return WEIR_E_NOMEM;
}

/* `weir mkmodel --arch bert|nomic-bert`: an encoder with the tensor names and keys of GGUF
 * (docs/models.md), random weights, and a WordPiece vocabulary. */
static int write_encoder(const mk_opts *o, char *err) {
  const mk_type *ty = find_type(o->type);
  const int nomic = !strcmp(o->arch, "nomic-bert");
  const char *a = o->arch;
  char key[128], **tokens = NULL;
  int32_t *types = NULL;
  weir_gguf_writer *w = NULL;
  plan_tensor *plan = NULL;
  float *fbuf = NULL;
  uint8_t *qbuf = NULL;
  char *tmp = NULL;
  int rc = wordpiece_vocab((int32_t)o->vocab, &tokens, &types);
  if (rc || (rc = weir_gguf_writer_new(&w))) goto free_all;
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", a, suffix), key)
  if ((rc = weir_gguf_add_str(w, "general.architecture", a)) ||
      (rc = weir_gguf_add_str(w, "general.name", o->name)) ||
      (rc = weir_gguf_add_u32(w, KEY("context_length"), (uint32_t)o->ctx)) ||
      (rc = weir_gguf_add_u32(w, KEY("embedding_length"), (uint32_t)o->dim)) ||
      (rc = weir_gguf_add_u32(w, KEY("feed_forward_length"), (uint32_t)o->ffn)) ||
      (rc = weir_gguf_add_u32(w, KEY("block_count"), (uint32_t)o->layers)) ||
      (rc = weir_gguf_add_u32(w, KEY("attention.head_count"), (uint32_t)o->heads)) ||
      (rc = weir_gguf_add_f32(w, KEY("attention.layer_norm_epsilon"), 1e-12f)) ||
      (rc = weir_gguf_add_bool(w, KEY("attention.causal"), 0)) ||
      (rc = weir_gguf_add_u32(w, KEY("pooling_type"), 1)) ||
      (nomic && (rc = weir_gguf_add_f32(w, KEY("rope.freq_base"), (float)o->rope_base))) ||
      (rc = weir_gguf_add_u32(w, "general.file_type", ty->file_type)) ||
      (rc = weir_gguf_add_str(w, "tokenizer.ggml.model", "bert")) ||
      (rc = weir_gguf_add_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tokens,
                                  NULL, (uint64_t)o->vocab)) ||
      (rc = weir_gguf_add_arr(w, "tokenizer.ggml.token_type", WEIR_GGUF_I32, types,
                              (uint64_t)o->vocab)) ||
      (rc = weir_gguf_add_u32(w, "tokenizer.ggml.token_type_count", 2)) ||
      (rc = weir_gguf_add_u32(w, "tokenizer.ggml.bos_token_id", 101)) ||
      (rc = weir_gguf_add_u32(w, "tokenizer.ggml.cls_token_id", 101)) ||
      (rc = weir_gguf_add_u32(w, "tokenizer.ggml.seperator_token_id", 102)) ||
      (rc = weir_gguf_add_u32(w, "tokenizer.ggml.unknown_token_id", 100)) ||
      (rc = weir_gguf_add_u32(w, "tokenizer.ggml.padding_token_id", 0)) ||
      (rc = weir_gguf_add_u32(w, "tokenizer.ggml.mask_token_id", 103)))
    goto free_all;
#undef KEY
  if (weir_dtype_block_elems(ty->base) > 1 &&
      (rc = weir_gguf_add_u32(w, "general.quantization_version", 2)))
    goto free_all;
  int n_plan = 0;
  if (!(plan = calloc((size_t)(8 + o->layers * 20), sizeof *plan))) {
    rc = WEIR_E_NOMEM;
    goto free_all;
  }
  const int64_t e = o->dim, ff = o->ffn, nv = o->vocab;
  const float s_in = 1.0f / sqrtf((float)e), s_ff = 1.0f / sqrtf((float)ff);
  plan_add(plan, &n_plan, "token_embd.weight", ty->embd, e, nv, INIT_NORMAL, 1.0f);
  if (!nomic)
    plan_add(plan, &n_plan, "position_embd.weight", ty->embd, e, o->ctx, INIT_NORMAL, 0.5f);
  plan_add(plan, &n_plan, "token_types.weight", WEIR_DTYPE_F32, e, 2, INIT_NORMAL, 0.5f);
  plan_add(plan, &n_plan, "token_embd_norm.weight", WEIR_DTYPE_F32, e, 0, INIT_NORM_WEIGHT, 0.1f);
  plan_add(plan, &n_plan, "token_embd_norm.bias", WEIR_DTYPE_F32, e, 0, INIT_NORMAL, 0.1f);
  for (long l = 0; l < o->layers; l++) {
    char nm[64];
#define BLK(s) (snprintf(nm, sizeof nm, "blk.%ld.%s", l, s), nm)
    if (nomic) {
      plan_add(plan, &n_plan, BLK("attn_qkv.weight"), ty->base, e, 3 * e, INIT_NORMAL, s_in);
    } else {
      plan_add(plan, &n_plan, BLK("attn_q.weight"), ty->base, e, e, INIT_NORMAL, s_in);
      plan_add(plan, &n_plan, BLK("attn_q.bias"), WEIR_DTYPE_F32, e, 0, INIT_NORMAL, 0.1f);
      plan_add(plan, &n_plan, BLK("attn_k.weight"), ty->base, e, e, INIT_NORMAL, s_in);
      plan_add(plan, &n_plan, BLK("attn_k.bias"), WEIR_DTYPE_F32, e, 0, INIT_NORMAL, 0.1f);
      plan_add(plan, &n_plan, BLK("attn_v.weight"), ty->base, e, e, INIT_NORMAL, s_in);
      plan_add(plan, &n_plan, BLK("attn_v.bias"), WEIR_DTYPE_F32, e, 0, INIT_NORMAL, 0.1f);
    }
    plan_add(plan, &n_plan, BLK("attn_output.weight"), ty->base, e, e, INIT_NORMAL, s_in);
    if (!nomic)
      plan_add(plan, &n_plan, BLK("attn_output.bias"), WEIR_DTYPE_F32, e, 0, INIT_NORMAL, 0.1f);
    plan_add(plan, &n_plan, BLK("attn_output_norm.weight"), WEIR_DTYPE_F32, e, 0,
             INIT_NORM_WEIGHT, 0.1f);
    plan_add(plan, &n_plan, BLK("attn_output_norm.bias"), WEIR_DTYPE_F32, e, 0, INIT_NORMAL,
             0.1f);
    plan_add(plan, &n_plan, BLK("ffn_up.weight"), ty->base, e, ff, INIT_NORMAL, s_in);
    if (nomic)
      plan_add(plan, &n_plan, BLK("ffn_gate.weight"), ty->base, e, ff, INIT_NORMAL, s_in);
    else
      plan_add(plan, &n_plan, BLK("ffn_up.bias"), WEIR_DTYPE_F32, ff, 0, INIT_NORMAL, 0.1f);
    plan_add(plan, &n_plan, BLK("ffn_down.weight"), ty->base, ff, e, INIT_NORMAL, s_ff);
    if (!nomic)
      plan_add(plan, &n_plan, BLK("ffn_down.bias"), WEIR_DTYPE_F32, e, 0, INIT_NORMAL, 0.1f);
    plan_add(plan, &n_plan, BLK("layer_output_norm.weight"), WEIR_DTYPE_F32, e, 0,
             INIT_NORM_WEIGHT, 0.1f);
    plan_add(plan, &n_plan, BLK("layer_output_norm.bias"), WEIR_DTYPE_F32, e, 0, INIT_NORMAL,
             0.1f);
#undef BLK
  }
  uint64_t params = 0;
  for (int i = 0; i < n_plan; i++) {
    int64_t ne[2] = {plan[i].ne[0], plan[i].ne[1]};
    rc = weir_gguf_add_tensor(w, plan[i].name, plan[i].dtype, plan[i].ndim, ne, NULL);
    if (rc < 0) {
      snprintf(err, ERRLEN, "tensor %s: shape {%lld, %lld} does not suit type %s", plan[i].name,
               (long long)ne[0], (long long)ne[1], weir_dtype_name(plan[i].dtype));
      goto free_all;
    }
    params += (uint64_t)(ne[0] * ne[1]);
  }
  const int64_t max_elems = 1 << 20;
  const int64_t widest = 3 * e > ff ? 3 * e : ff;
  const size_t fcap = (size_t)(widest > max_elems ? widest : max_elems);
  const size_t tl = strlen(o->out) + 5;
  fbuf = malloc(fcap * sizeof *fbuf);
  qbuf = malloc(fcap * sizeof(float));
  tmp = malloc(tl);
  if (!fbuf || !qbuf || !tmp) {
    rc = WEIR_E_NOMEM;
    goto free_all;
  }
  snprintf(tmp, tl, "%s.tmp", o->out);
  if ((rc = weir_gguf_writer_begin(w, tmp, err, ERRLEN))) goto free_all;
  for (int i = 0; i < n_plan && !rc; i++)
    rc = gen_tensor(w, &plan[i], (uint64_t)o->seed, fbuf, qbuf, max_elems, NULL);
  if (rc) {
    snprintf(err, ERRLEN, "%s: writing tensors failed: %s", tmp, strerror(errno));
    goto remove_tmp;
  }
  if ((rc = weir_gguf_writer_end(w, err, ERRLEN))) goto remove_tmp;
  if (rename(tmp, o->out) != 0) {
    snprintf(err, ERRLEN, "cannot rename %s to %s: %s", tmp, o->out, strerror(errno));
    rc = WEIR_E_IO;
    goto remove_tmp;
  }
  printf("wrote %s: %s, %ld layers, dim %ld, %ld heads, ffn %ld, vocab %ld (WordPiece), ctx "
         "%ld, %s, %.1fM parameters\n", o->out, a, o->layers, o->dim, o->heads, o->ffn,
         o->vocab, o->ctx, o->type, (double)params / 1e6);
  goto free_all;
remove_tmp:
  weir_gguf_writer_free(w);
  w = NULL;
  unlink(tmp);
free_all:
  if (rc && !err[0]) snprintf(err, ERRLEN, "%s", weir_strerror(rc));
  weir_gguf_writer_free(w);
  for (long i = 0; tokens && i < o->vocab; i++) free(tokens[i]);
  free(tokens);
  free(types);
  free(plan);
  free(fbuf);
  free(qbuf);
  free(tmp);
  return rc;
}

int weir__cmd_mkmodel(int argc, char **argv) {
  enum { O_PRESET = 256, O_ARCH, O_DIM, O_LAYERS, O_HEADS, O_KVH, O_FFN, O_VOCAB, O_CTX,
         O_ROPE, O_EPS, O_TYPE, O_TIED, O_TOK, O_TPL, O_SEED, O_NAME, O_OUT, O_HEAD_DIM, O_SWA,
         O_ROPE_FREQS, O_NO_ROPE_FREQS, O_YARN, O_LONGROPE, O_ORIG_CTX, O_WEIGHTS_FROM };
  static const struct option longopts[] = {
      {"preset", required_argument, 0, O_PRESET}, {"arch", required_argument, 0, O_ARCH},
      {"dim", required_argument, 0, O_DIM},       {"layers", required_argument, 0, O_LAYERS},
      {"heads", required_argument, 0, O_HEADS},   {"kv-heads", required_argument, 0, O_KVH},
      {"ffn", required_argument, 0, O_FFN},       {"vocab", required_argument, 0, O_VOCAB},
      {"ctx", required_argument, 0, O_CTX},       {"rope-base", required_argument, 0, O_ROPE},
      {"rms-eps", required_argument, 0, O_EPS},   {"type", required_argument, 0, O_TYPE},
      {"tied", no_argument, 0, O_TIED},           {"tokenizer", required_argument, 0, O_TOK},
      {"chat-template", required_argument, 0, O_TPL},
      {"seed", required_argument, 0, O_SEED},     {"name", required_argument, 0, O_NAME},
      {"out", required_argument, 0, O_OUT},       {"head-dim", required_argument, 0, O_HEAD_DIM},
      {"swa", required_argument, 0, O_SWA},       {"rope-freqs", no_argument, 0, O_ROPE_FREQS},
      {"no-rope-freqs", no_argument, 0, O_NO_ROPE_FREQS},
      {"yarn", required_argument, 0, O_YARN},     {"longrope", no_argument, 0, O_LONGROPE},
      {"orig-ctx", required_argument, 0, O_ORIG_CTX},
      {"weights-from", required_argument, 0, O_WEIGHTS_FROM}, {0, 0, 0, 0}};
  mk_opts o;
  const char *preset = "tiny";
  char err[ERRLEN] = "";
  /* First pass: the preset, so that every other flag overrides it whatever the order. */
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--preset") == 0 && i + 1 < argc) preset = argv[i + 1];
    else if (strncmp(argv[i], "--preset=", 9) == 0) preset = argv[i] + 9;
  }
  memset(&o, 0, sizeof o);
  if (preset_apply(preset, &o) != 0) {
    fprintf(stderr, "weir mkmodel: unknown preset '%s' (tiny, 1.1b, gemma3-1b, qwen3-0.6b, "
            "llama3.2-1b)\n", preset);
    return 2;
  }
  char default_name[64];
  snprintf(default_name, sizeof default_name, "weir-%s", preset);
  o.name = default_name;
  weir_opt op;
  const struct option *tables[] = {longopts};
  if (weir_opt_init(&op, "weir mkmodel", argc, argv, "o:", tables, 1) != 0) {
    fprintf(stderr, "weir mkmodel: out of memory\n");
    return 1;
  }
  int c, code = -1, tok_given = 0, tpl_given = 0;
  long v = 0;
  while (code < 0 && (c = weir_opt_next(&op)) != WEIR_OPT_END) {
    char *arg = op.arg;
    switch (c) {
    case O_PRESET: break;
    case O_ARCH: o.arch = arg; break;
    case O_DIM: if (parse_long("--dim", arg, 1, 1 << 16, &o.dim)) code = 2; break;
    case O_LAYERS: if (parse_long("--layers", arg, 1, 1024, &o.layers)) code = 2; break;
    case O_HEADS: if (parse_long("--heads", arg, 1, 1024, &o.heads)) code = 2; break;
    case O_KVH: if (parse_long("--kv-heads", arg, 1, 1024, &o.kv_heads)) code = 2; break;
    case O_FFN: if (parse_long("--ffn", arg, 1, 1 << 18, &o.ffn)) code = 2; break;
    case O_VOCAB: if (parse_long("--vocab", arg, 1, 1 << 20, &o.vocab)) code = 2; break;
    case O_CTX: if (parse_long("--ctx", arg, 1, 1 << 24, &o.ctx)) code = 2; break;
    case O_ROPE: if (parse_double("--rope-base", arg, &o.rope_base)) code = 2; break;
    case O_EPS: if (parse_double("--rms-eps", arg, &o.rms_eps)) code = 2; break;
    case O_TYPE: o.type = arg; break;
    case O_TIED: o.tied = 1; break;
    case O_TOK: o.tokenizer = arg, tok_given = 1; break;
    case O_TPL: o.chat_template = arg, tpl_given = 1; break;
    case O_SEED:
      if (parse_long("--seed", arg, 0, __LONG_MAX__, &v)) code = 2;
      o.seed = (unsigned long long)v;
      break;
    case O_NAME: o.name = arg; break;
    case O_HEAD_DIM: if (parse_long("--head-dim", arg, 2, 4096, &o.head_dim)) code = 2; break;
    case O_SWA: if (parse_long("--swa", arg, 0, 1 << 24, &o.swa)) code = 2; break;
    case O_ROPE_FREQS: o.rope_freqs = 1; break;
    case O_NO_ROPE_FREQS: o.rope_freqs = 0; break;
    case O_YARN: if (parse_double("--yarn", arg, &o.yarn)) code = 2; break;
    case O_LONGROPE: o.longrope = 1; break;
    case O_ORIG_CTX: if (parse_long("--orig-ctx", arg, 1, 1 << 24, &o.orig_ctx)) code = 2; break;
    case O_WEIGHTS_FROM: o.weights_from = arg; break;
    case 'o': case O_OUT: o.out = arg; break;
    case 'h': usage(stdout); code = 0; break;
    case WEIR_OPT_VERSION: weir_opt_print_version(); code = 0; break;
    case WEIR_OPT_POSITIONAL:
      fprintf(stderr, "weir mkmodel: unexpected argument '%s'\n", arg);
      code = 2;
      break;
    case WEIR_OPT_ERROR: fprintf(stderr, "%s\n", op.err); code = 2; break;
    default: usage(stderr); code = 2; break;
    }
  }
  weir_opt_fini(&op);
  if (code >= 0) return code;
  /* Each family's own tokenizer style and template unless the flags say otherwise. */
  if (!tok_given && !strcmp(o.arch, "qwen3")) o.tokenizer = "gpt2";
  if (!tpl_given && (!strcmp(o.arch, "gemma2") || !strcmp(o.arch, "gemma3")))
    o.chat_template = "gemma";
  if (!tpl_given && !strcmp(o.arch, "phi3")) o.chat_template = "phi3";
  if (!tpl_given && !strcmp(o.arch, "qwen3")) o.chat_template = "qwen3";
  const mk_type *ty = NULL;
  const char *bad = NULL;
  long head_size = o.head_dim ? o.head_dim : (o.heads ? o.dim / o.heads : 0);
  const int encoder = !strcmp(o.arch, "bert") || !strcmp(o.arch, "nomic-bert");
  if (!o.out) bad = "--out FILE is required";
  else if (encoder && o.vocab < 256)
    bad = "--arch bert and nomic-bert need --vocab 256 or more (the WordPiece vocabulary's "
          "special tokens, characters and words)";
  else if (encoder && o.weights_from)
    bad = "--weights-from is for the llama-family architectures, not bert or nomic-bert";
  else if (encoder) ;
  else if (strcmp(o.arch, "llama") && strcmp(o.arch, "mistral") && strcmp(o.arch, "qwen2") &&
           strcmp(o.arch, "qwen3") && strcmp(o.arch, "gemma2") && strcmp(o.arch, "gemma3") &&
           strcmp(o.arch, "phi3"))
    bad = "--arch must be llama, mistral, qwen2, qwen3, gemma2, gemma3, phi3, bert or "
          "nomic-bert";
  else if (o.rope_freqs + o.longrope + (o.yarn > 0) > 1)
    bad = "--rope-freqs, --yarn and --longrope exclude each other";
  else if (o.longrope && strcmp(o.arch, "phi3"))
    bad = "--longrope is for --arch phi3";
  else if (o.yarn != 0 && o.yarn < 1) bad = "--yarn must be at least 1";
  else if (!(ty = find_type(o.type)))
    bad = "--type must be f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, q2_k, q3_k, "
          "q4_k, q5_k, q6_k, iq4_xs, q3_k_m, q4_k_m or q5_k_m";
  else if (strcmp(o.tokenizer, "llama") && strcmp(o.tokenizer, "gpt2"))
    bad = "--tokenizer must be llama or gpt2";
  else if (!weir__chat_template_find(o.chat_template))
    bad = "--chat-template must be chatml, llama2, llama3, mistral, zephyr, gemma, qwen3, phi3 or none";
  else if (!o.head_dim && o.dim % o.heads != 0) bad = "--dim must be a multiple of --heads";
  else if (o.heads % o.kv_heads != 0) bad = "--heads must be a multiple of --kv-heads";
  else if (head_size % 2 != 0)
    bad = "the head size (--head-dim or dim / heads) must be even";
  else if (type_needs_256(ty) &&
           (o.dim % WEIR_QK_K || o.ffn % WEIR_QK_K || (o.heads * head_size) % WEIR_QK_K))
    bad = "with a 256-element block type (q2_k..q6_k, iq4_xs and the mixes), --dim, --ffn and "
          "heads x head size must be multiples of 256";
  else if (weir_dtype_block_elems(ty->base) > 1 &&
           (o.dim % 32 || o.ffn % 32 || (o.heads * head_size) % 32))
    bad = "with a block-quantized --type, --dim, --ffn and heads x head size must be multiples "
          "of 32";
  if (bad) {
    fprintf(stderr, "weir mkmodel: %s\n", bad);
    return 2;
  }
  int big_base = !strcmp(o.arch, "qwen2") || !strcmp(o.arch, "qwen3") || !strcmp(o.arch, "gemma3");
  int small_eps = big_base || !strcmp(o.arch, "gemma2");
  if (o.rope_base == 0) o.rope_base = !strcmp(o.arch, "nomic-bert") ? 1000.0
                                     : big_base                      ? 1000000.0
                                                                     : 10000.0;
  if (o.rms_eps == 0) o.rms_eps = small_eps ? 1e-6 : 1e-5;
  int rc = encoder ? write_encoder(&o, err) : write_model(&o, err);
  if (rc) {
    fprintf(stderr, "weir mkmodel: %s\n", err);
    return rc == WEIR_E_INVAL ? 2 : 1;
  }
  return 0;
}
