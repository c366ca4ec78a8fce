/* The load-time repacks of issue 34 against the layouts they replace, kernel against kernel in
 * one process (scripts/gpu-check issue34 runs it): for the projections of the 1.1B shape
 * (dim 2048, 256 KV dims, ffn 5632; 22 layers, so the weights do not fit in L2),
 *   awq_int4: the row-per-warp dp4a GEMV on the row layout (weir_cuda_gemv_q4_dp4a) against
 *             the tiled layout's (weir_cuda_gemv_q4t_dp4a_set, one weight per launch, as the
 *             row kernel), group 128;
 *   q6_K:     weir_cuda_gguf_matmul on the file's 210-byte blocks against the repacked planes
 *             (WEIR_CUDA_GGUF_Q6_K_R);
 *   f16:      the row-per-warp GEMV (weir_cuda_gemv_f16_rows) against the tiled one
 *             (weir_cuda_gemv_f16, 2-4 rows per warp), same weights, batches up to 8 (its
 *             limit; larger batches go to cuBLAS in the plugin);
 * at batches of 1, 2, 4, 8 and 16 tokens. Each pass runs every weight of every layer once;
 * passes alternate A B A B ..., the median pass of each is reported as time and weight GB/s
 * (the bytes each layout holds, read once per pass). The weights are random bytes with finite
 * scales: speed does not depend on the values. Needs a GPU (exits 77 without one).
 *
 * weir_cuda_layouts_bench [--batches 1,2,4,8,16] [--passes 9] [--json FILE] */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weir_cuda_gguf.h"
#include "weir_cuda_kernels.h"

#define LAYERS 22
#define NW 7

static const int64_t k_rows[NW] = {2048, 256, 256, 2048, 5632, 5632, 2048};
static const int64_t k_cols[NW] = {2048, 2048, 2048, 2048, 2048, 2048, 5632};

#define CK(call)                                                                              \
  do {                                                                                        \
    cudaError_t e_ = (call);                                                                  \
    if (e_ != cudaSuccess) {                                                                  \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));  \
      exit(1);                                                                                \
    }                                                                                         \
  } while (0)

static uint64_t rng = 0x1A70075EEDull;
static uint8_t rbyte(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint8_t)(rng >> 32);
}

static void *upload(const void *h, size_t n) {
  void *d = NULL;
  CK(cudaMalloc(&d, n));
  CK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
  return d;
}

static int cmp_f(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

static int parse_list(const char *s, int *out, int max) {
  int n = 0;
  while (s && *s && n < max) {
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || v <= 0 || v > 16) return -1;
    out[n++] = (int)v;
    if (*end && *end != ',') return -1;
    s = *end == ',' ? end + 1 : end;
  }
  return n;
}

/* One layout's weights (all layers) and how a pass runs them. */
typedef struct layout {
  const char *name;
  int kind; /* 0 q4 rows, 1 q4 tiled, 2 q6_K file blocks, 3 q6_K planes, 4 f16 rows,
             * 5 f16 tiled (4 and 5 share a: one f16 copy) */
  void *a[LAYERS][NW], *b[LAYERS][NW], *c[LAYERS][NW];
  size_t row_bytes[NW];
  double bytes;
} layout;

static void *act4[NW], *actg[NW]; /* quantized activations per weight shape (max batch) */
static float *actf[NW];            /* f32 activations per weight shape (16 tokens) */
static float *ybuf;

static void pass(const layout *L, int n) {
  for (int l = 0; l < LAYERS; l++)
    for (int i = 0; i < NW; i++) {
      const int64_t rows = k_rows[i], cols = k_cols[i];
      switch (L->kind) {
      case 0:
        CK(weir_cuda_gemv_q4_dp4a(0, L->a[l][i], L->b[l][i], L->c[l][i], act4[i], ybuf, cols,
                                  cols, rows, 128, n));
        break;
      case 1: {
        const void *t = L->a[l][i], *s = L->b[l][i];
        const int sym = 0;
        float *y = ybuf;
        CK(weir_cuda_gemv_q4t_dp4a_set(0, 1, &t, &s, &sym, &rows, &y, act4[i], cols, cols, 128,
                                       n));
        break;
      }
      case 4:
      case 5:
        CK((L->kind == 4 ? weir_cuda_gemv_f16_rows : weir_cuda_gemv_f16)(
            0, L->a[l][i], actf[i], ybuf, cols, rows, n));
        break;
      default:
        CK(weir_cuda_gguf_matmul(0, L->kind == 2 ? 14 : WEIR_CUDA_GGUF_Q6_K_R, L->a[l][i],
                                 L->row_bytes[i], actg[i], ybuf, cols, rows, n));
      }
    }
}

int main(int argc, char **argv) {
  int batches[16] = {1, 2, 4, 8, 16}, nb = 5, passes = 9;
  const char *json = NULL;
  for (int i = 1; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(argv[i], "--batches") && v && (nb = parse_list(v, batches, 16)) > 0) i++;
    else if (!strcmp(argv[i], "--passes") && v && (passes = atoi(v)) > 0 && passes <= 99) i++;
    else if (!strcmp(argv[i], "--json") && v) json = argv[++i];
    else {
      fprintf(stderr, "usage: %s [--batches 1,2,4,8,16] [--passes 9] [--json FILE]\n", argv[0]);
      return 2;
    }
  }
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    printf("no CUDA device\n");
    return 77;
  }
  /* Activations for 16 tokens of each shape (values are irrelevant to speed: zeros and a
   * finite scale). */
  for (int i = 0; i < NW; i++) {
    const int64_t cols = k_cols[i];
    float *x = NULL;
    CK(cudaMalloc((void **)&x, (size_t)(16 * cols) * 4));
    CK(cudaMemset(x, 0, (size_t)(16 * cols) * 4));
    CK(cudaMalloc(&act4[i], weir_cuda_q8_act_bytes(16, cols)));
    CK(cudaMalloc(&actg[i], weir_cuda_gguf_act_bytes(16, cols)));
    CK(weir_cuda_q8_quantize_act(0, x, NULL, act4[i], 16, cols, cols));
    CK(weir_cuda_gguf_quantize_act(0, x, actg[i], 16, cols));
    actf[i] = x;
  }
  CK(cudaMalloc((void **)&ybuf, 16 * 5632 * 4));

  static layout L[6] = {{.name = "awq_int4 rows", .kind = 0},
                        {.name = "awq_int4 tiled", .kind = 1},
                        {.name = "q6_K blocks", .kind = 2},
                        {.name = "q6_K planes", .kind = 3},
                        {.name = "f16 rows", .kind = 4},
                        {.name = "f16 tiled", .kind = 5}};
  for (int i = 0; i < NW; i++) {
    const int64_t rows = k_rows[i], cols = k_cols[i], ng = cols / 128;
    const size_t nib = (size_t)(rows * cols / 2), sc = (size_t)(rows * ng) * 2;
    size_t tb = 0, sb = 0;
    weir_cuda_q4t_bytes(rows, cols, 128, &tb, &sb);
    const size_t q6 = (size_t)(cols / 256) * 210, q6r = weir_cuda_gguf_repacked_row_bytes(14, cols);
    L[2].row_bytes[i] = q6;
    L[3].row_bytes[i] = q6r;
    uint8_t *hn = malloc(nib), *hq6 = malloc(q6 * (size_t)rows), *hq6r = malloc(q6r * (size_t)rows);
    uint16_t *hd = malloc(sc), *hm = malloc(sc);
    uint8_t *ht = malloc(tb), *hs = malloc(sb);
    if (!hn || !hq6 || !hq6r || !hd || !hm || !ht || !hs) return 1;
    /* One random weight per shape, uploaded once per layer (separate copies: 22 layers do
     * not fit in L2, as in a model). */
    for (size_t k = 0; k < nib; k++) hn[k] = rbyte();
    for (size_t k = 0; k < sc / 2; k++) hd[k] = 0x2000, hm[k] = 0xA000; /* 2^-7, -2^-7 */
    for (size_t k = 0; k < q6 * (size_t)rows; k++) hq6[k] = rbyte();
    for (int64_t r = 0; r < rows; r++)
      for (int64_t s = 0; s < cols / 256; s++) { /* a finite d in every super-block */
        hq6[(size_t)r * q6 + (size_t)s * 210 + 208] = 0x00;
        hq6[(size_t)r * q6 + (size_t)s * 210 + 209] = 0x20;
      }
    if (weir_cuda_q4t_repack(ht, hs, hn, hd, hm, rows, cols, 128) != 0 ||
        weir_cuda_gguf_repack(14, hq6r, q6r, hq6, q6, rows, cols) != 0) {
      fprintf(stderr, "repack failed\n");
      return 1;
    }
    /* f16: random halves in [-1, 1) (sign, exponent 14 or less, random mantissa). */
    const size_t fb = (size_t)(rows * cols) * 2;
    uint16_t *hf = malloc(fb);
    if (!hf) return 1;
    for (size_t k = 0; k < fb / 2; k++)
      hf[k] = (uint16_t)(((rbyte() & 0x80u) << 8) | ((rbyte() % 15u) << 10) | ((rbyte() << 2) & 0x3FFu));
    for (int l = 0; l < LAYERS; l++) {
      L[4].a[l][i] = L[5].a[l][i] = upload(hf, fb);
      L[0].a[l][i] = upload(hn, nib);
      L[0].b[l][i] = upload(hd, sc);
      L[0].c[l][i] = upload(hm, sc);
      L[1].a[l][i] = upload(ht, tb);
      L[1].b[l][i] = upload(hs, sb);
      L[2].a[l][i] = upload(hq6, q6 * (size_t)rows);
      L[3].a[l][i] = upload(hq6r, q6r * (size_t)rows);
    }
    L[0].bytes += (double)LAYERS * (double)(nib + 2 * sc);
    L[1].bytes += (double)LAYERS * (double)(tb + sb);
    L[2].bytes += (double)LAYERS * (double)(q6 * (size_t)rows);
    L[3].bytes += (double)LAYERS * (double)(q6r * (size_t)rows);
    L[4].bytes += (double)LAYERS * (double)fb;
    L[5].bytes += (double)LAYERS * (double)fb;
    free(hf);
    free(hn), free(hq6), free(hq6r), free(hd), free(hm), free(ht), free(hs);
  }
  CK(cudaDeviceSynchronize());
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  FILE *jf = json ? fopen(json, "w") : NULL;
  if (jf) fprintf(jf, "{\"shape\": \"1.1B projections x 22 layers\", \"rows\": [");
  int first = 1;
  printf("%-16s %5s %10s %9s %8s\n", "layout", "batch", "pass ms", "GB/s", "vs base");
  for (int pair = 0; pair < 3; pair++) {
    const layout *A = &L[2 * pair], *B = &L[2 * pair + 1];
    for (int bi = 0; bi < nb; bi++) {
      const int n = batches[bi];
      if (A->kind == 4 && n > 8) continue; /* the f16 GEMV's limit */
      float ta[99], tbm[99];
      pass(A, n); /* warm-up */
      pass(B, n);
      for (int p = 0; p < passes; p++) {
        for (int w = 0; w < 2; w++) {
          CK(cudaEventRecord(e0, 0));
          pass(w ? B : A, n);
          CK(cudaEventRecord(e1, 0));
          CK(cudaEventSynchronize(e1));
          CK(cudaEventElapsedTime(w ? &tbm[p] : &ta[p], e0, e1));
        }
      }
      qsort(ta, (size_t)passes, sizeof ta[0], cmp_f);
      qsort(tbm, (size_t)passes, sizeof tbm[0], cmp_f);
      const double ma = ta[passes / 2], mb = tbm[passes / 2];
      printf("%-16s %5d %10.3f %9.1f %8s\n", A->name, n, ma, A->bytes / (ma * 1e-3) / 1e9, "");
      printf("%-16s %5d %10.3f %9.1f %7.2fx\n", B->name, n, mb, B->bytes / (mb * 1e-3) / 1e9,
             ma / mb);
      if (jf) {
        fprintf(jf,
                "%s\n  {\"base\": \"%s\", \"repacked\": \"%s\", \"batch\": %d, \"base_ms\": %.4f, "
                "\"repacked_ms\": %.4f, \"base_gbs\": %.1f, \"repacked_gbs\": %.1f, "
                "\"speedup\": %.3f}",
                first ? "" : ",", A->name, B->name, n, ma, mb, A->bytes / (ma * 1e-3) / 1e9,
                B->bytes / (mb * 1e-3) / 1e9, ma / mb);
        first = 0;
      }
    }
  }
  if (jf) {
    fprintf(jf, "\n]}\n");
    fclose(jf);
  }
  return 0;
}
