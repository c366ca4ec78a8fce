/* The fp16 quant plugin on CUDA: packing every supported GGUF source type (checked through
 * embed against the host's own decoding), the GEMV path (1-8 tokens, aligned and unaligned
 * rows) and the cuBLAS path against a double-precision reference, out-of-range ids. Skips (77)
 * without a GPU. */
#include <CUnit/Basic.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_host.h"

static ch_plugin quant;
#define Q ((const weir_quant_ops *)quant.ops)

/* Encodes w ([out][in] f32) as `type` in GGUF layout; returns the bytes and fills `expect`
 * with the values the f16 weight must hold (the source's exact value rounded to f16). */
static unsigned char *encode(const float *w, int64_t in, int64_t out, weir_dtype type,
                             float *expect) {
  const size_t rb = weir_dtype_row_bytes(type, in);
  unsigned char *buf = calloc((size_t)out, rb);
  for (int64_t r = 0; r < out; r++) {
    unsigned char *row = buf + (size_t)r * rb;
    const float *x = w + r * in;
    float *e = expect + r * in;
    switch (type) {
    case WEIR_DTYPE_F32:
      memcpy(row, x, (size_t)in * 4);
      for (int64_t i = 0; i < in; i++) e[i] = ch_f16_to_f32(ch_f32_to_f16(x[i]));
      break;
    case WEIR_DTYPE_F16:
    case WEIR_DTYPE_BF16:
      for (int64_t i = 0; i < in; i++) {
        uint16_t u = type == WEIR_DTYPE_F16 ? ch_f32_to_f16(x[i]) : weir_f32_to_bf16(x[i]);
        memcpy(row + 2 * i, &u, 2);
        float v = type == WEIR_DTYPE_F16 ? ch_f16_to_f32(u) : weir_bf16_to_f32(u);
        e[i] = ch_f16_to_f32(ch_f32_to_f16(v));
      }
      break;
    case WEIR_DTYPE_Q8_0:
    case WEIR_DTYPE_Q4_0:
    case WEIR_DTYPE_Q4_1:
      for (int64_t b = 0; b < in / 32; b++) {
        const float *xb = x + b * 32;
        float lo = xb[0], hi = xb[0], amax = 0;
        for (int j = 0; j < 32; j++) {
          if (xb[j] < lo) lo = xb[j];
          if (xb[j] > hi) hi = xb[j];
          if (fabsf(xb[j]) > amax) amax = fabsf(xb[j]);
        }
        if (type == WEIR_DTYPE_Q8_0) {
          unsigned char *blk = row + b * 34;
          uint16_t dh = ch_f32_to_f16(amax / 127.0f);
          float d = ch_f16_to_f32(dh);
          memcpy(blk, &dh, 2);
          for (int j = 0; j < 32; j++) {
            int q = d > 0 ? (int)lrintf(xb[j] / d) : 0;
            q = q < -127 ? -127 : q > 127 ? 127 : q;
            blk[2 + j] = (unsigned char)(signed char)q;
            e[b * 32 + j] = ch_f16_to_f32(ch_f32_to_f16((float)q * d));
          }
        } else if (type == WEIR_DTYPE_Q4_0) {
          unsigned char *blk = row + b * 18;
          uint16_t dh = ch_f32_to_f16(amax / 7.0f);
          float d = ch_f16_to_f32(dh);
          memcpy(blk, &dh, 2);
          for (int j = 0; j < 32; j++) {
            int q = d > 0 ? (int)lrintf(xb[j] / d) + 8 : 8;
            q = q < 0 ? 0 : q > 15 ? 15 : q;
            blk[2 + (j & 15)] |= (unsigned char)(j < 16 ? q : q << 4);
            e[b * 32 + j] = ch_f16_to_f32(ch_f32_to_f16((float)(q - 8) * d));
          }
        } else {
          unsigned char *blk = row + b * 20;
          uint16_t dh = ch_f32_to_f16((hi - lo) / 15.0f), mh = ch_f32_to_f16(lo);
          float d = ch_f16_to_f32(dh), m = ch_f16_to_f32(mh);
          memcpy(blk, &dh, 2);
          memcpy(blk + 2, &mh, 2);
          for (int j = 0; j < 32; j++) {
            int q = d > 0 ? (int)lrintf((xb[j] - m) / d) : 0;
            q = q < 0 ? 0 : q > 15 ? 15 : q;
            blk[4 + (j & 15)] |= (unsigned char)(j < 16 ? q : q << 4);
            e[b * 32 + j] = ch_f16_to_f32(ch_f32_to_f16((float)q * d + m));
          }
        }
      }
      break;
    default: break;
    }
  }
  return buf;
}

static void *pack(const unsigned char *src, weir_dtype type, int64_t in, int64_t out) {
  weir_tensor t = {.data = (void *)src, .dtype = type, .ndim = 2, .ne = {in, out, 1, 1},
                   .nb = {weir_dtype_block_bytes(type), weir_dtype_row_bytes(type, in), 0, 0}};
  weir_quant_pack_args a = {.struct_size = sizeof a, .src = &t, .name = "test.weight"};
  void *w = NULL;
  int rc = Q->pack(quant.self, &a, &w);
  if (rc != WEIR_OK) fprintf(stderr, "\n  pack: %s (%s)\n", weir_strerror(rc), ch_last_error(&quant));
  CU_ASSERT_EQUAL_FATAL(rc, WEIR_OK);
  CU_ASSERT_EQUAL(Q->weight_bytes(quant.self, w), (size_t)(in * out * 2));
  return w;
}

static void test_pack_embed(void) {
  static const weir_dtype types[] = {WEIR_DTYPE_F32, WEIR_DTYPE_F16, WEIR_DTYPE_BF16,
                                     WEIR_DTYPE_Q8_0, WEIR_DTYPE_Q4_0, WEIR_DTYPE_Q4_1};
  const int64_t in = 256, out = 40, n = 23;
  float *w = malloc((size_t)(in * out) * 4), *expect = malloc((size_t)(in * out) * 4);
  int32_t ids[23];
  float *dout = ch_dalloc((size_t)(n * in) * 4), *got = malloc((size_t)(n * in) * 4);
  double *ref = malloc((size_t)(n * in) * sizeof *ref);
  int32_t *dids = ch_dalloc(sizeof ids);
  for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
    ch_fill_uniform(w, (size_t)(in * out), -2, 2);
    unsigned char *src = encode(w, in, out, types[ti], expect);
    void *pw = pack(src, types[ti], in, out);
    for (int i = 0; i < n; i++) ids[i] = (int32_t)(ch_rand_u32() % out);
    ids[0] = 0;
    ids[1] = (int32_t)out - 1;
    for (int i = 0; i < n; i++)
      for (int j = 0; j < in; j++) ref[i * in + j] = expect[ids[i] * in + j];
    ch_h2d(dids, ids, sizeof ids);
    ch_poison(dout, (size_t)(n * in) * 4);
    CU_ASSERT_EQUAL(Q->embed(quant.self, pw, dids, dout, n), WEIR_OK);
    ch_d2h(got, dout, (size_t)(n * in) * 4);
    double err = ch_rel_err(got, ref, (size_t)(n * in));
    printf("\n  pack %s: rel err %.3g", weir_dtype_name(types[ti]), err);
    /* Exact but for a possible last-bit difference where the device fuses q * d + m. */
    CU_ASSERT(err < 1e-4);
    Q->release(quant.self, pw);
    free(src);
  }
  ch_dfree(dout);
  ch_dfree(dids);
  free(got);
  free(ref);
  free(w);
  free(expect);
}

static void check_matmul(int64_t in, int64_t out, int64_t n_tokens, weir_dtype type) {
  float *w = malloc((size_t)(in * out) * 4), *wq = malloc((size_t)(in * out) * 4);
  ch_fill_uniform(w, (size_t)(in * out), -1, 1);
  unsigned char *src = encode(w, in, out, type, wq);
  void *pw = pack(src, type, in, out);
  float *x = malloc((size_t)(n_tokens * in) * 4);
  ch_fill_uniform(x, (size_t)(n_tokens * in), -1, 1);
  double *ref = malloc((size_t)(n_tokens * out) * sizeof *ref);
  /* Beyond 8 tokens the activations go through f16 on their way to cuBLAS. */
  const int round_x = n_tokens > 8;
  for (int64_t t = 0; t < n_tokens; t++)
    for (int64_t o = 0; o < out; o++) {
      double acc = 0;
      for (int64_t i = 0; i < in; i++) {
        float xv = x[t * in + i];
        if (round_x) xv = ch_f16_to_f32(ch_f32_to_f16(xv));
        acc += (double)wq[o * in + i] * xv;
      }
      ref[t * out + o] = acc;
    }
  float *dx = ch_dalloc((size_t)(n_tokens * in) * 4), *dy = ch_dalloc((size_t)(n_tokens * out) * 4);
  ch_h2d(dx, x, (size_t)(n_tokens * in) * 4);
  ch_poison(dy, (size_t)(n_tokens * out) * 4);
  int rc = Q->matmul(quant.self, pw, dx, dy, n_tokens);
  if (rc != WEIR_OK) fprintf(stderr, "\n  matmul: %s (%s)\n", weir_strerror(rc), ch_last_error(&quant));
  CU_ASSERT_EQUAL_FATAL(rc, WEIR_OK);
  float *y = malloc((size_t)(n_tokens * out) * 4);
  ch_d2h(y, dy, (size_t)(n_tokens * out) * 4);
  double err = ch_rel_err(y, ref, (size_t)(n_tokens * out));
  printf("\n  matmul %lldx%lld, %lld tokens, %s: rel err %.3g", (long long)out, (long long)in,
         (long long)n_tokens, weir_dtype_name(type), err);
  CU_ASSERT(err < 1e-4);
  Q->release(quant.self, pw);
  ch_dfree(dx);
  ch_dfree(dy);
  free(w);
  free(wq);
  free(src);
  free(x);
  free(ref);
  free(y);
}

static void test_gemv(void) {
  for (int64_t n = 1; n <= 8; n++) check_matmul(2048, 256, n, WEIR_DTYPE_F16);
  check_matmul(5632, 64, 1, WEIR_DTYPE_Q8_0);
  check_matmul(200, 33, 3, WEIR_DTYPE_F32); /* rows not 16-byte aligned: the scalar path */
}

static void test_gemm(void) {
  check_matmul(2048, 256, 9, WEIR_DTYPE_F16);
  check_matmul(1024, 300, 77, WEIR_DTYPE_Q4_0);
  check_matmul(512, 2048, 512, WEIR_DTYPE_BF16);
}

static void test_errors(void) {
  /* An id outside the table: reported by the next embed call (the device cannot answer
   * synchronously without a stall). */
  const int64_t in = 64, out = 10;
  float *w = malloc((size_t)(in * out) * 4), *e = malloc((size_t)(in * out) * 4);
  ch_fill_uniform(w, (size_t)(in * out), -1, 1);
  unsigned char *src = encode(w, in, out, WEIR_DTYPE_F32, e);
  void *pw = pack(src, WEIR_DTYPE_F32, in, out);
  int32_t ids[2] = {3, 10};
  int32_t *dids = ch_dalloc(sizeof ids);
  float *dout = ch_dalloc(2 * in * 4);
  ch_h2d(dids, ids, sizeof ids);
  CU_ASSERT_EQUAL(Q->embed(quant.self, pw, dids, dout, 2), WEIR_OK);
  CU_ASSERT_EQUAL(CH_DEV->synchronize(ch_dev.self), WEIR_OK);
  CU_ASSERT_EQUAL(Q->embed(quant.self, pw, dids, dout, 1), WEIR_E_RANGE);
  CU_ASSERT_EQUAL(Q->embed(quant.self, pw, dids, dout, 1), WEIR_OK);
  Q->release(quant.self, pw);

  weir_tensor t = {.data = src, .dtype = WEIR_DTYPE_I8, .ndim = 2, .ne = {in, out, 1, 1},
                   .nb = {1, (size_t)in, 0, 0}};
  weir_quant_pack_args a = {.struct_size = sizeof a, .src = &t, .name = "bad"};
  void *bad = NULL;
  CU_ASSERT_EQUAL(Q->pack(quant.self, &a, &bad), WEIR_E_NOTSUP);
  t.dtype = WEIR_DTYPE_Q8_0;
  t.ne[0] = 40; /* not a multiple of the 32-element block */
  CU_ASSERT_EQUAL(Q->pack(quant.self, &a, &bad), WEIR_E_NOTSUP);
  ch_dfree(dids);
  ch_dfree(dout);
  free(w);
  free(e);
  free(src);
}

int main(void) {
  ch_device_open_or_skip();
  ch_seed_from_env(0x9a470003u);
  int rc = ch_plugin_open(&quant, "weir_quant_fp16_cuda.so");
  if (rc != WEIR_OK) {
    fprintf(stderr, "fp16 (cuda) failed to load: %s: %s\n", weir_strerror(rc),
            ch_last_error(&quant));
    return 1;
  }
  static const ch_test tests[] = {
      {"pack every source type, embed", test_pack_embed},
      {"GEMV (1-8 tokens)", test_gemv},
      {"GEMM through cuBLAS", test_gemm},
      {"errors", test_errors},
      {NULL, NULL},
  };
  rc = ch_run_suite("cuda_quant", tests);
  ch_plugin_close(&quant);
  ch_device_close();
  return rc;
}
