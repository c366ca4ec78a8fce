/* `weir convert`: writes a Llama-architecture GGUF from a neutral export directory (what
 * scripts/train-demo.py's `export` writes): DIR/model.json holds the hyperparameters, the
 * tokenizer and the chat template, DIR/tensors.bin the tensors as little-endian f32 at the
 * offsets model.json gives. The GGUF is written by weir's own writer, checked by weir's own
 * reader (the graph's tensors and shapes, the tokenizer) and only then renamed into place,
 * so a file at --out is always one weir loads. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "format/quantize_row.h"
#include "format/gguf.h"
#include "format/gguf_write.h"
#include "model/tokenizer.h"
#include "weir/status.h"

#define ERRLEN 512
#define MAX_TENSORS 4096

static void usage(FILE *f) {
  fputs("usage: weir convert --in DIR --out FILE [--type f16|f32|bf16|q8_0]\n"
        "Writes a Llama GGUF from an export directory (DIR/model.json + DIR/tensors.bin, as\n"
        "scripts/train-demo.py export writes them; format in docs/models.md).\n"
        "\n"
        "  --in DIR      the export directory\n"
        "  --out FILE    the GGUF to write (via FILE.tmp, renamed once weir has loaded it)\n"
        "  --type T      type of the matrices (default f16); norm weights stay f32\n",
        f);
}

static char *read_file(const char *path, size_t *len, char *err) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, ERRLEN, "cannot open %s: %s", path, strerror(errno));
    return NULL;
  }
  char *buf = NULL;
  long n = -1;
  if (fseek(f, 0, SEEK_END) == 0) n = ftell(f);
  if (n < 0 || fseek(f, 0, SEEK_SET) != 0) {
    snprintf(err, ERRLEN, "cannot read %s: %s", path, strerror(errno));
    goto close_file;
  }
  buf = malloc((size_t)n + 1);
  if (!buf) {
    snprintf(err, ERRLEN, "out of memory reading %s (%ld bytes)", path, n);
    goto close_file;
  }
  if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
    snprintf(err, ERRLEN, "cannot read %s: short read", path);
    free(buf);
    buf = NULL;
    goto close_file;
  }
  buf[n] = 0;
  *len = (size_t)n;
close_file:
  fclose(f);
  return buf;
}

/* A non-negative integer member of obj that fits in [lo, hi]. */
static int get_int(const cJSON *obj, const char *key, long long lo, long long hi,
                   long long *out, char *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo ||
      v->valuedouble > hi) {
    snprintf(err, ERRLEN, "model.json: \"%s\" must be an integer in [%lld, %lld]", key, lo, hi);
    return WEIR_E_FORMAT;
  }
  *out = (long long)v->valuedouble;
  return WEIR_OK;
}

static int get_num(const cJSON *obj, const char *key, double *out, char *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) {
    snprintf(err, ERRLEN, "model.json: \"%s\" must be a number", key);
    return WEIR_E_FORMAT;
  }
  *out = v->valuedouble;
  return WEIR_OK;
}

static int get_bool(const cJSON *obj, const char *key, int *out, char *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!cJSON_IsBool(v)) {
    snprintf(err, ERRLEN, "model.json: \"%s\" must be true or false", key);
    return WEIR_E_FORMAT;
  }
  *out = cJSON_IsTrue(v);
  return WEIR_OK;
}

static const char *get_str(const cJSON *obj, const char *key, int required, char *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (cJSON_IsString(v)) return v->valuestring;
  if (required || v) snprintf(err, ERRLEN, "model.json: \"%s\" must be a string", key);
  return NULL;
}

/* The tokenizer: parallel arrays of tokens, scores and types. */
typedef struct conv_vocab {
  int n;
  const char **tokens;
  float *scores;
  int32_t *types;
} conv_vocab;

static void vocab_free(conv_vocab *v) {
  free(v->tokens);
  free(v->scores);
  free(v->types);
}

static int read_vocab(const cJSON *tk, conv_vocab *v, char *err) {
  const cJSON *toks = cJSON_GetObjectItemCaseSensitive(tk, "tokens");
  const cJSON *scores = cJSON_GetObjectItemCaseSensitive(tk, "scores");
  const cJSON *types = cJSON_GetObjectItemCaseSensitive(tk, "token_type");
  if (!cJSON_IsArray(toks) || !cJSON_IsArray(scores) || !cJSON_IsArray(types)) {
    snprintf(err, ERRLEN, "model.json: tokenizer needs arrays \"tokens\", \"scores\" and "
             "\"token_type\"");
    return WEIR_E_FORMAT;
  }
  int n = cJSON_GetArraySize(toks);
  if (n < 1 || n > (1 << 22) || cJSON_GetArraySize(scores) != n ||
      cJSON_GetArraySize(types) != n) {
    snprintf(err, ERRLEN, "model.json: tokenizer arrays must be non-empty and of one length "
             "(tokens %d, scores %d, token_type %d)", n, cJSON_GetArraySize(scores),
             cJSON_GetArraySize(types));
    return WEIR_E_FORMAT;
  }
  v->n = n;
  v->tokens = calloc((size_t)n, sizeof *v->tokens);
  v->scores = calloc((size_t)n, sizeof *v->scores);
  v->types = calloc((size_t)n, sizeof *v->types);
  if (!v->tokens || !v->scores || !v->types) return WEIR_E_NOMEM;
  int i = 0;
  const cJSON *t, *s, *ty;
  cJSON_ArrayForEach(t, toks) {
    if (!cJSON_IsString(t) || !t->valuestring[0]) {
      snprintf(err, ERRLEN, "model.json: tokenizer.tokens[%d] must be a non-empty string", i);
      return WEIR_E_FORMAT;
    }
    v->tokens[i++] = t->valuestring;
  }
  i = 0;
  cJSON_ArrayForEach(s, scores) {
    if (!cJSON_IsNumber(s)) {
      snprintf(err, ERRLEN, "model.json: tokenizer.scores[%d] must be a number", i);
      return WEIR_E_FORMAT;
    }
    v->scores[i++] = (float)s->valuedouble;
  }
  i = 0;
  cJSON_ArrayForEach(ty, types) {
    if (!cJSON_IsNumber(ty) || ty->valuedouble < 1 || ty->valuedouble > 6 ||
        ty->valuedouble != floor(ty->valuedouble)) {
      snprintf(err, ERRLEN, "model.json: tokenizer.token_type[%d] must be an integer 1..6", i);
      return WEIR_E_FORMAT;
    }
    v->types[i++] = (int32_t)ty->valuedouble;
  }
  return WEIR_OK;
}

static int parse_type(const char *s, weir_dtype *out) {
  static const struct {
    const char *name;
    weir_dtype dt;
  } k[] = {{"f32", WEIR_DTYPE_F32}, {"f16", WEIR_DTYPE_F16}, {"bf16", WEIR_DTYPE_BF16},
           {"q8_0", WEIR_DTYPE_Q8_0}};
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
    if (!strcmp(s, k[i].name)) {
      *out = k[i].dt;
      return 0;
    }
  return -1;
}

static uint32_t file_type_of(weir_dtype dt) {
  switch (dt) {
  case WEIR_DTYPE_F32: return 0;
  case WEIR_DTYPE_F16: return 1;
  case WEIR_DTYPE_Q8_0: return 7;
  case WEIR_DTYPE_BF16: return 32;
  default: return 1;
  }
}

/* Opens the written file with weir's reader and checks the graph and the tokenizer. */
static int verify(const char *path, char *err) {
  weir_gguf *g = NULL;
  weir_tokenizer *tok = NULL;
  weir_llama_hparams hp;
  int rc = weir_gguf_open(path, &g, err, ERRLEN);
  if (rc == WEIR_OK) rc = weir_gguf_llama_hparams(g, &hp, err, ERRLEN);
  if (rc == WEIR_OK) rc = weir_gguf_llama_check(g, &hp, err, ERRLEN);
  if (rc == WEIR_OK) rc = weir_tokenizer_from_gguf(g, &tok, err, ERRLEN);
  weir_tokenizer_free(tok);
  weir_gguf_close(g);
  return rc;
}

static int convert(const char *dir, const char *out, weir_dtype wt, char *err) {
  char path[4096];
  size_t json_len = 0, bin_len = 0;
  char *json = NULL, *bin = NULL, *tmp = NULL;
  cJSON *root = NULL;
  weir_gguf_writer *w = NULL;
  conv_vocab voc = {0};
  void **bufs = NULL;
  int nbufs = 0, rc = WEIR_E_FORMAT;
  long long ctx, dim, layers, ffn, heads, kv_heads, bos, eos, unk;
  double eps, rope_base;
  int add_bos, add_eos, add_space;

  snprintf(path, sizeof path, "%s/model.json", dir);
  if (!(json = read_file(path, &json_len, err))) {
    rc = WEIR_E_IO;
    goto free_all;
  }
  snprintf(path, sizeof path, "%s/tensors.bin", dir);
  if (!(bin = read_file(path, &bin_len, err))) {
    rc = WEIR_E_IO;
    goto free_all;
  }
  root = cJSON_ParseWithLength(json, json_len);
  if (!cJSON_IsObject(root)) {
    snprintf(err, ERRLEN, "%s/model.json is not a JSON object", dir);
    goto free_all;
  }
  const cJSON *tk = cJSON_GetObjectItemCaseSensitive(root, "tokenizer");
  const cJSON *tensors = cJSON_GetObjectItemCaseSensitive(root, "tensors");
  if (!cJSON_IsObject(tk) || !cJSON_IsArray(tensors)) {
    snprintf(err, ERRLEN, "model.json needs a \"tokenizer\" object and a \"tensors\" array");
    goto free_all;
  }
  if ((rc = get_int(root, "context_length", 1, 1 << 24, &ctx, err)) ||
      (rc = get_int(root, "embedding_length", 1, 1 << 16, &dim, err)) ||
      (rc = get_int(root, "block_count", 1, 1024, &layers, err)) ||
      (rc = get_int(root, "feed_forward_length", 1, 1 << 18, &ffn, err)) ||
      (rc = get_int(root, "head_count", 1, 1024, &heads, err)) ||
      (rc = get_int(root, "head_count_kv", 1, 1024, &kv_heads, err)) ||
      (rc = get_num(root, "rms_eps", &eps, err)) ||
      (rc = get_num(root, "rope_freq_base", &rope_base, err)) ||
      (rc = read_vocab(tk, &voc, err)) ||
      (rc = get_int(tk, "bos_token_id", 0, voc.n - 1, &bos, err)) ||
      (rc = get_int(tk, "eos_token_id", 0, voc.n - 1, &eos, err)) ||
      (rc = get_int(tk, "unknown_token_id", 0, voc.n - 1, &unk, err)) ||
      (rc = get_bool(tk, "add_bos_token", &add_bos, err)) ||
      (rc = get_bool(tk, "add_eos_token", &add_eos, err)) ||
      (rc = get_bool(tk, "add_space_prefix", &add_space, err)))
    goto free_all;
  rc = WEIR_E_FORMAT;
  const char *tok_model = get_str(tk, "model", 1, err);
  if (!tok_model) goto free_all;
  if (strcmp(tok_model, "llama") != 0) {
    snprintf(err, ERRLEN, "model.json: tokenizer.model \"%s\": only \"llama\" (SentencePiece) "
             "is converted", tok_model);
    goto free_all;
  }
  err[0] = 0;
  const char *name = get_str(root, "general.name", 0, err);
  const char *desc = get_str(root, "general.description", 0, err);
  const char *tpl = get_str(tk, "chat_template", 0, err);
  if (err[0]) goto free_all;
  if (dim % heads || heads % kv_heads || (dim / heads) % 2) {
    snprintf(err, ERRLEN, "model.json: embedding_length %lld, head_count %lld, head_count_kv "
             "%lld do not make even heads shared evenly", dim, heads, kv_heads);
    goto free_all;
  }

  if ((rc = weir_gguf_writer_new(&w))) goto free_all;
#define KEY(k) "llama." k
  if ((rc = weir_gguf_add_str(w, "general.architecture", "llama")) ||
      (rc = weir_gguf_add_str(w, "general.name", name ? name : "weir-converted")) ||
      (desc && (rc = weir_gguf_add_str(w, "general.description", desc))) ||
      (rc = weir_gguf_add_u32(w, "general.file_type", file_type_of(wt))) ||
      (wt == WEIR_DTYPE_Q8_0 && (rc = weir_gguf_add_u32(w, "general.quantization_version", 2))) ||
      (rc = weir_gguf_add_u32(w, KEY("vocab_size"), (uint32_t)voc.n)) ||
      (rc = weir_gguf_add_u32(w, KEY("context_length"), (uint32_t)ctx)) ||
      (rc = weir_gguf_add_u32(w, KEY("embedding_length"), (uint32_t)dim)) ||
      (rc = weir_gguf_add_u32(w, KEY("block_count"), (uint32_t)layers)) ||
      (rc = weir_gguf_add_u32(w, KEY("feed_forward_length"), (uint32_t)ffn)) ||
      (rc = weir_gguf_add_u32(w, KEY("rope.dimension_count"), (uint32_t)(dim / heads))) ||
      (rc = weir_gguf_add_u32(w, KEY("attention.head_count"), (uint32_t)heads)) ||
      (rc = weir_gguf_add_u32(w, KEY("attention.head_count_kv"), (uint32_t)kv_heads)) ||
      (rc = weir_gguf_add_f32(w, KEY("rope.freq_base"), (float)rope_base)) ||
      (rc = weir_gguf_add_f32(w, KEY("attention.layer_norm_rms_epsilon"), (float)eps)) ||
      (rc = weir_gguf_add_str(w, "tokenizer.ggml.model", "llama")) ||
      (rc = weir_gguf_add_arr_str(w, "tokenizer.ggml.tokens", voc.tokens, NULL,
                                  (uint64_t)voc.n)) ||
      (rc = weir_gguf_add_arr(w, "tokenizer.ggml.scores", WEIR_GGUF_F32, voc.scores,
                              (uint64_t)voc.n)) ||
      (rc = weir_gguf_add_arr(w, "tokenizer.ggml.token_type", WEIR_GGUF_I32, voc.types,
                              (uint64_t)voc.n)) ||
      (rc = weir_gguf_add_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)bos)) ||
      (rc = weir_gguf_add_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eos)) ||
      (rc = weir_gguf_add_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)unk)) ||
      (rc = weir_gguf_add_bool(w, "tokenizer.ggml.add_bos_token", add_bos)) ||
      (rc = weir_gguf_add_bool(w, "tokenizer.ggml.add_eos_token", add_eos)) ||
      (rc = weir_gguf_add_bool(w, "tokenizer.ggml.add_space_prefix", add_space)) ||
      (tpl && (rc = weir_gguf_add_str(w, "tokenizer.chat_template", tpl))))
    goto free_all;
#undef KEY
  const cJSON *tr = cJSON_GetObjectItemCaseSensitive(root, "training");
  if (cJSON_IsObject(tr)) {
    long long steps, secs;
    const char *corpus = get_str(tr, "corpus", 0, err);
    if ((rc = get_int(tr, "steps", 0, 1ll << 40, &steps, err)) ||
        (rc = get_int(tr, "seconds", 0, 1ll << 40, &secs, err)) ||
        (rc = weir_gguf_add_u64(w, "weir.training.steps", (uint64_t)steps)) ||
        (rc = weir_gguf_add_u64(w, "weir.training.seconds", (uint64_t)secs)) ||
        (corpus && (rc = weir_gguf_add_str(w, "weir.training.corpus", corpus))))
      goto free_all;
  }

  int nt = cJSON_GetArraySize(tensors);
  if (nt < 1 || nt > MAX_TENSORS) {
    snprintf(err, ERRLEN, "model.json: \"tensors\" lists %d tensors (1..%d)", nt, MAX_TENSORS);
    rc = WEIR_E_FORMAT;
    goto free_all;
  }
  bufs = calloc((size_t)nt, sizeof *bufs);
  if (!bufs) {
    rc = WEIR_E_NOMEM;
    goto free_all;
  }
  const cJSON *t;
  cJSON_ArrayForEach(t, tensors) {
    rc = WEIR_E_FORMAT;
    const char *tname = cJSON_IsObject(t) ? get_str(t, "name", 1, err) : NULL;
    const cJSON *shape = cJSON_IsObject(t) ? cJSON_GetObjectItemCaseSensitive(t, "shape") : NULL;
    long long off;
    int nd = cJSON_IsArray(shape) ? cJSON_GetArraySize(shape) : 0;
    if (!tname || nd < 1 || nd > 2) {
      snprintf(err, ERRLEN, "model.json: tensors[%d] needs a \"name\" and a \"shape\" of 1 or "
               "2 dimensions", nbufs);
      goto free_all;
    }
    if (get_int(t, "offset", 0, (long long)bin_len, &off, err)) goto free_all;
    int64_t ne[2] = {1, 1};
    for (int d = 0; d < nd; d++) {
      const cJSON *e = cJSON_GetArrayItem(shape, d);
      if (!cJSON_IsNumber(e) || e->valuedouble < 1 || e->valuedouble > (1 << 24) ||
          e->valuedouble != floor(e->valuedouble)) {
        snprintf(err, ERRLEN, "model.json: tensor %s: dimension %d must be an integer in "
                 "[1, 2^24]", tname, d);
        goto free_all;
      }
      ne[d] = (int64_t)e->valuedouble;
    }
    uint64_t elems = (uint64_t)ne[0] * (uint64_t)ne[1];
    if (elems * 4 > bin_len - (uint64_t)off) {
      snprintf(err, ERRLEN, "tensor %s: %llu f32 values at offset %lld run past the end of "
               "tensors.bin (%zu bytes)", tname, (unsigned long long)elems, off, bin_len);
      goto free_all;
    }
    weir_dtype dt = nd == 2 ? wt : WEIR_DTYPE_F32;
    if (weir_dtype_block_elems(dt) > 1 && ne[0] % weir_dtype_block_elems(dt)) dt = WEIR_DTYPE_F16;
    uint64_t bytes = weir_gguf_tensor_bytes(dt, nd, ne);
    void *buf = malloc(bytes ? bytes : 1);
    if (!buf) {
      rc = WEIR_E_NOMEM;
      goto free_all;
    }
    bufs[nbufs++] = buf;
    const size_t row_bytes = bytes / (uint64_t)ne[1];
    float *row = malloc((size_t)ne[0] * sizeof *row);
    if (!row) {
      rc = WEIR_E_NOMEM;
      goto free_all;
    }
    int ok = 1;
    for (int64_t r = 0; r < ne[1] && ok; r++) {
      /* tensors.bin is little-endian f32, as this host is (x86-64, aarch64). */
      memcpy(row, bin + off + (size_t)r * (size_t)ne[0] * 4, (size_t)ne[0] * 4);
      for (int64_t c = 0; c < ne[0] && ok; c++)
        if (!isfinite(row[c])) {
          snprintf(err, ERRLEN, "tensor %s: value [%lld][%lld] is not finite", tname,
                   (long long)r, (long long)c);
          ok = 0;
        }
      if (ok && weir_quantize_row(dt, row, (char *)buf + (size_t)r * row_bytes, ne[0]) != 0) {
        snprintf(err, ERRLEN, "tensor %s: cannot convert to %s", tname, weir_dtype_name(dt));
        ok = 0;
      }
    }
    free(row);
    if (!ok) goto free_all;
    int idx = weir_gguf_add_tensor(w, tname, dt, nd, ne, buf);
    if (idx < 0) {
      rc = idx;
      snprintf(err, ERRLEN, "tensor %s: %s", tname,
               rc == WEIR_E_EXISTS ? "listed twice" : weir_strerror(rc));
      goto free_all;
    }
  }

  size_t tl = strlen(out) + 5;
  if (!(tmp = malloc(tl))) {
    rc = WEIR_E_NOMEM;
    goto free_all;
  }
  snprintf(tmp, tl, "%s.tmp", out);
  if ((rc = weir_gguf_write_file(w, tmp, err, ERRLEN))) goto remove_tmp;
  if ((rc = verify(tmp, err))) goto remove_tmp;
  if (rename(tmp, out) != 0) {
    snprintf(err, ERRLEN, "cannot rename %s to %s: %s", tmp, out, strerror(errno));
    rc = WEIR_E_IO;
    goto remove_tmp;
  }
  printf("wrote %s: llama, %lld layers, dim %lld, %lld heads (%lld KV), ffn %lld, vocab %d, "
         "ctx %lld, %s\n", out, layers, dim, heads, kv_heads, ffn, voc.n, ctx,
         weir_dtype_name(wt));
  goto free_all;
remove_tmp:
  unlink(tmp);
free_all:
  if (rc && !err[0]) snprintf(err, ERRLEN, "%s", weir_strerror(rc));
  for (int i = 0; i < nbufs; i++) free(bufs[i]);
  free(bufs);
  weir_gguf_writer_free(w);
  vocab_free(&voc);
  cJSON_Delete(root);
  free(json);
  free(bin);
  free(tmp);
  return rc;
}

int weir__cmd_convert(int argc, char **argv) {
  enum { O_IN = 256, O_OUT, O_TYPE, O_HELP };
  static const struct option longopts[] = {{"in", required_argument, 0, O_IN},
                                           {"out", required_argument, 0, O_OUT},
                                           {"type", required_argument, 0, O_TYPE},
                                           {"help", no_argument, 0, O_HELP},
                                           {0, 0, 0, 0}};
  const char *in = NULL, *out = NULL, *type = "f16";
  char err[ERRLEN] = "";
  if (weir__check_long_options("convert", argc, argv, longopts) != 0) return 2;
  optind = 0; /* glibc: full re-initialisation, the dispatcher may have used getopt */
  opterr = 1;
  int c;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    switch (c) {
    case O_IN: in = optarg; break;
    case O_OUT: out = optarg; break;
    case O_TYPE: type = optarg; break;
    case 'h': case O_HELP: usage(stdout); return 0;
    default: usage(stderr); return 2;
    }
  }
  weir_dtype wt;
  const char *bad = NULL;
  if (optind < argc) {
    fprintf(stderr, "weir convert: unexpected argument '%s'\n", argv[optind]);
    return 2;
  }
  if (!in) bad = "--in DIR is required";
  else if (!out) bad = "--out FILE is required";
  else if (parse_type(type, &wt) != 0) bad = "--type must be f16, f32, bf16 or q8_0";
  if (bad) {
    fprintf(stderr, "weir convert: %s\n", bad);
    return 2;
  }
  int rc = convert(in, out, wt, err);
  if (rc) {
    fprintf(stderr, "weir convert: %s\n", err);
    return 1;
  }
  return 0;
}
