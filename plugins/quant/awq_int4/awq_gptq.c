/* Error-compensating rounding for quant/awq_int4 (the GPTQ rule; see docs/quant-awq.md).
 *
 * Round-to-nearest rounds every weight on its own. With calibration samples X of the input
 * (already divided by the AWQ scale s), the output error of a row's rounding error e is
 * e H e^T with H = X^T X. Taking the input columns in order and rounding each one, the
 * rounding error of the columns already done can be compensated exactly (for this quadratic)
 * by moving the columns still to be rounded: with H = V V^T, V upper triangular,
 *
 *     w_j = w0_j + sum_{k < j} (w0_k - q_k) G_kj,   G_kj = V_kj / V_jj,
 *
 * where w0 is the row before rounding and q_k the value column k was rounded to (this is the
 * GPTQ update written with V instead of the Cholesky factor of H^-1; the two are equal, and V
 * needs no inversion: it is the Cholesky factor of H with rows and columns reversed). Each
 * group's scale and offset are taken from the moved values when the group is reached.
 * H gets a damping of `damp` times its mean diagonal, so that a few samples (fewer than
 * inputs) still give a positive definite matrix; channels that are zero in every sample get 1.
 *
 * Cost: the Cholesky factor is n^3/3 multiply-adds for n inputs (once per group of weights
 * sharing an input) and the updates rows * n^2 / 2 per weight, both on the host's threads
 * through the f32 GEMM of kernels/cpu/matmul.h and the loops below. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "awq_int4.h"
#include "cpu_isa.h"
#include "convert.h"
#include "matmul.h"
#include "quant_common.h"

/* Columns per Cholesky panel. */
#define CHOL_B 64

/* Eight floats as one value (two SSE registers, or one AVX register in the AVX2 build);
 * macros rather than functions, since passing such a value changes with the ISA. */
typedef float v8 __attribute__((vector_size(32)));
typedef float v8u __attribute__((vector_size(32), aligned(4)));
#define ld8(p) ((v8) * (const v8u *)(const void *)(p))
#define hsum8(v) (((v)[0] + (v)[4]) + ((v)[1] + (v)[5]) + (((v)[2] + (v)[6]) + ((v)[3] + (v)[7])))

typedef struct chol_job {
  float *a;       /* [n][n], lower triangle */
  int64_t n, j0, j1;
  const float *p; /* [n][CHOL_B] panel rows, zero past j1 - j0 */
} chol_job;

/* Panel rows: a[i][j0..j1) solved against the factored diagonal block. */
static void panel_chunk(void *arg, int64_t begin, int64_t end, int thread) {
  (void)thread;
  const chol_job *j = arg;
  const int64_t n = j->n, j0 = j->j0, j1 = j->j1;
  for (int64_t i = j->j1 + begin; i < j->j1 + end; i++) {
    float *ai = j->a + i * n;
    for (int64_t c = j0; c < j1; c++) {
      const float *ac = j->a + c * n;
      float s = ai[c];
      for (int64_t k = j0; k < c; k++) s -= ai[k] * ac[k];
      ai[c] = s / ac[c];
    }
  }
}

/* Trailing update of rows i in [j1 + begin, j1 + end): a[i][j] -= p[i] . p[j], j1 <= j <= i.
 * Four columns at a time share the loads of p[i]. Compiled twice: for any x86-64 and with
 * AVX2 + FMA (chosen by weir_cpu_isa(), so WEIR_CPU_ISA=scalar picks the first). */
#define TRAIL_BODY \
  const int64_t n = jb->n, j1 = jb->j1; \
  const float *p = jb->p; \
  for (int64_t i = j1 + begin; i < j1 + end; i++) { \
    float *ai = jb->a + i * n; \
    const float *pi = p + i * CHOL_B; \
    int64_t j = j1; \
    for (; j + 4 <= i + 1; j += 4) { \
      const float *p0 = p + j * CHOL_B; \
      v8 s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0}; \
      for (int k = 0; k < CHOL_B; k += 8) { \
        const v8 x = ld8(pi + k); \
        s0 += x * ld8(p0 + k); \
        s1 += x * ld8(p0 + CHOL_B + k); \
        s2 += x * ld8(p0 + 2 * CHOL_B + k); \
        s3 += x * ld8(p0 + 3 * CHOL_B + k); \
      } \
      ai[j] -= hsum8(s0); \
      ai[j + 1] -= hsum8(s1); \
      ai[j + 2] -= hsum8(s2); \
      ai[j + 3] -= hsum8(s3); \
    } \
    for (; j <= i; j++) { \
      v8 s0 = {0}; \
      for (int k = 0; k < CHOL_B; k += 8) s0 += ld8(pi + k) * ld8(p + j * CHOL_B + k); \
      ai[j] -= hsum8(s0); \
    } \
  }

static void trail_chunk_base(void *arg, int64_t begin, int64_t end, int thread) {
  (void)thread;
  const chol_job *jb = arg;
  TRAIL_BODY
}

#if defined(__x86_64__)
WEIR_TARGET_AVX2 static void trail_chunk_avx2(void *arg, int64_t begin, int64_t end,
                                              int thread) {
  (void)thread;
  const chol_job *jb = arg;
  TRAIL_BODY
}
#endif

static weir_parallel_fn trail_fn(void) {
#if defined(__x86_64__)
  if (weir_cpu_isa() >= WEIR_CPU_ISA_AVX2) return trail_chunk_avx2;
#endif
  return trail_chunk_base;
}

static void run(const weir_host *h, int64_t n, int64_t grain, weir_parallel_fn fn, void *arg) {
  if (n <= 0) return;
  if (h->parallel_for && weir_cpu_host_threads(h) > 1 && n > grain)
    h->parallel_for(h->ctx, n, grain, fn, arg);
  else fn(arg, 0, n, 0);
}

/* In-place Cholesky factor of a (lower triangle read and written): a = L L^T. Returns 0, -1
 * when a is not positive definite (in floating point), WEIR_E_NOMEM. */
static int cholesky(const weir_host *h, float *a, int64_t n) {
  float *p = malloc(sizeof(float) * (size_t)(n * CHOL_B));
  if (!p) return WEIR_E_NOMEM;
  int rc = 0;
  for (int64_t j0 = 0; j0 < n && rc == 0; j0 += CHOL_B) {
    const int64_t j1 = n - j0 < CHOL_B ? n : j0 + CHOL_B;
    for (int64_t j = j0; j < j1 && rc == 0; j++) { /* the diagonal block */
      float *aj = a + j * n;
      double s = aj[j];
      for (int64_t k = j0; k < j; k++) s -= (double)aj[k] * aj[k];
      if (!(s > 0)) {
        rc = -1;
        break;
      }
      aj[j] = (float)sqrt(s);
      for (int64_t i = j + 1; i < j1; i++) {
        float *ai = a + i * n;
        float t = ai[j];
        for (int64_t k = j0; k < j; k++) t -= ai[k] * aj[k];
        ai[j] = t / aj[j];
      }
    }
    if (rc != 0 || j1 == n) break;
    chol_job jb = {.a = a, .n = n, .j0 = j0, .j1 = j1, .p = p};
    run(h, n - j1, 32, panel_chunk, &jb);
    for (int64_t i = j1; i < n; i++) {
      float *pi = p + i * CHOL_B;
      memcpy(pi, a + i * n + j0, sizeof(float) * (size_t)(j1 - j0));
      memset(pi + (j1 - j0), 0, sizeof(float) * (size_t)(CHOL_B - (j1 - j0)));
    }
    run(h, n - j1, 16, trail_fn(), &jb);
  }
  free(p);
  return rc;
}

int awq_gptq_factor(const awq_plugin *p, const float *x, int64_t ns, int64_t cols,
                    const float *s, double damp, float **gt_out) {
  const weir_host *h = p->base.host;
  const int64_t n = cols;
  *gt_out = NULL;
  if (ns < 1 || n < 1) return WEIR_E_INVAL;
  if (n > AWQ_GPTQ_MAX_COLS) return WEIR_E_NOTSUP; /* n^2 floats twice: 8 GiB at the limit */
  float *xr = malloc(sizeof(float) * (size_t)(n * ns));
  float *a = malloc(sizeof(float) * (size_t)(n * n));
  float *gt = NULL;
  int rc = WEIR_E_NOMEM;
  if (!xr || !a) goto out;
  /* Reversed channel order: the product below is H with rows and columns reversed. */
  for (int64_t c = 0; c < n; c++) {
    const int64_t k = n - 1 - c;
    const float inv = s ? 1.0f / s[k] : 1.0f;
    for (int64_t t = 0; t < ns; t++) xr[c * ns + t] = x[t * n + k] * inv;
  }
  weir_matmul_args ma = {.w = xr, .w_dtype = WEIR_DTYPE_F32, .rows = n, .cols = ns, .x = xr,
                         .y = a, .n_tokens = n};
  run(h, n, 16, weir_matmul_chunk, &ma);
  double mean = 0;
  for (int64_t i = 0; i < n; i++) {
    if (!(a[i * n + i] > 0)) a[i * n + i] = 0; /* NaN too: the channel counts as dead */
    mean += a[i * n + i];
  }
  mean /= (double)n;
  if (!(mean > 0)) mean = 1;
  /* Damping grows tenfold while float rounding leaves the matrix indefinite. */
  float *h0 = malloc(sizeof(float) * (size_t)n);
  if (!h0) goto out;
  for (int64_t i = 0; i < n; i++) h0[i] = a[i * n + i];
  double d = damp * mean;
  for (int attempt = 0;; attempt++) {
    for (int64_t i = 0; i < n; i++) a[i * n + i] = (h0[i] > 0 ? h0[i] : (float)mean) + (float)d;
    int c = cholesky(h, a, n);
    if (c == 0) break;
    if (c != -1 || attempt == 4) {
      free(h0);
      rc = c == -1 ? WEIR_E_RANGE : c;
      goto out;
    }
    /* The lower triangle was overwritten: rebuild it from the product's upper triangle. */
    for (int64_t i = 0; i < n; i++)
      for (int64_t j = 0; j < i; j++) a[i * n + j] = a[j * n + i];
    d = d > 0 ? d * 10 : mean * 1e-3;
  }
  free(h0);
  /* V[k][j] = L[n-1-k][n-1-j]; G[k][j] = V[k][j] / V[j][j] for k < j, stored per group of
   * columns k transposed: the block of group g0 holds gt[g0 * n + j * gw + (k - g0)]. */
  gt = malloc(sizeof(float) * (size_t)(n * n));
  if (!gt) goto out;
  for (int64_t g0 = 0; g0 < n; g0 += p->group) {
    const int64_t gw = n - g0 < p->group ? n - g0 : p->group;
    float *blk = gt + g0 * n;
    for (int64_t j = 0; j < n; j++) {
      const float vjj = a[(n - 1 - j) * n + (n - 1 - j)];
      for (int64_t kk = 0; kk < gw; kk++) {
        const int64_t k = g0 + kk;
        blk[j * gw + kk] = k < j ? a[(n - 1 - k) * n + (n - 1 - j)] / vjj : 0.0f;
      }
    }
  }
  *gt_out = gt;
  gt = NULL;
  rc = WEIR_OK;
out:
  free(xr);
  free(a);
  free(gt);
  return rc;
}

int awq_gptq_rows(const awq_src *src, int64_t r0, int64_t nr, uint8_t *q, uint16_t *d,
                  uint16_t *m) {
  const int64_t cols = src->cols, group = src->group, ngr = (cols + group - 1) / group;
  int rc = WEIR_OK;
  float *w0 = malloc(sizeof(float) * (size_t)(nr * cols));
  float *cur = malloc(sizeof(float) * (size_t)(nr * cols));
  float *a = malloc(sizeof(float) * (size_t)(nr * group));
  float *y = malloc(sizeof(float) * (size_t)(nr * cols));
  float *gg = malloc(sizeof(float) * (size_t)(group * group));
  if (!w0 || !cur || !a || !y || !gg || group > 128) {
    rc = WEIR_E_NOMEM;
    goto out;
  }
  for (int64_t i = 0; i < nr; i++)
    if ((rc = awq_load_scaled_row(src, r0 + i, w0 + i * cols)) != WEIR_OK) goto out;
  memcpy(cur, w0, sizeof(float) * (size_t)(nr * cols));
  for (int64_t g0 = 0, gi = 0; g0 < cols; g0 += group, gi++) {
    const int64_t gw = cols - g0 < group ? cols - g0 : group, g1 = g0 + gw;
    const float *blk = src->gt + g0 * cols;
    /* The group's own block, G[k][j] for k, j in the group, row by row: the moves inside the
     * group read it along j. */
    for (int64_t kk = 0; kk < gw; kk++)
      for (int64_t jj = 0; jj < gw; jj++) gg[kk * gw + jj] = blk[(g0 + jj) * gw + kk];
    for (int64_t i = 0; i < nr; i++) {
      float *ci = cur + i * cols;
      uint8_t *qi = q + i * cols;
      uint16_t *dh = &d[i * ngr + gi], *mh = &m[i * ngr + gi];
      if (weir_q4_quantize_group(ci + g0, gw, qi + g0, dh, mh) != 0) {
        rc = WEIR_E_RANGE;
        memset(a + i * group, 0, sizeof(float) * (size_t)gw);
        continue;
      }
      const float df = weir_f16_to_f32(*dh), mf = weir_f16_to_f32(*mh);
      const float inv = df > 0.0f ? 1.0f / df : 0.0f;
      for (int64_t k = g0; k < g1; k++) {
        /* The same rounding as weir_q4_quantize_group, on the moved value. */
        float r = ((ci[k] - mf) * inv + 12582912.0f) - 12582912.0f;
        r = r < 0.0f ? 0.0f : r > 15.0f ? 15.0f : r;
        if (!(r == r)) r = 0.0f;
        qi[k] = (uint8_t)r;
        const float ak = w0[i * cols + k] - (df * r + mf);
        a[i * group + (k - g0)] = ak;
        const float *gk = gg + (k - g0) * gw;
        for (int64_t j = k + 1; j < g1; j++) ci[j] += ak * gk[j - g0];
      }
    }
    if (g1 == cols) break;
    /* The group's errors move every later column at once: y = A G[group, g1..). Only the
     * last group can be shorter than `group`, so a's rows are gw apart here. */
    weir_matmul_args ma = {.w = blk, .w_dtype = WEIR_DTYPE_F32, .rows = cols, .cols = gw,
                           .x = a, .y = y, .n_tokens = nr};
    weir_matmul_rows(&ma, g1, cols);
    for (int64_t i = 0; i < nr; i++)
      for (int64_t j = g1; j < cols; j++) cur[i * cols + j] += y[i * cols + j];
  }
out:
  free(w0);
  free(cur);
  free(a);
  free(y);
  free(gg);
  return rc;
}
