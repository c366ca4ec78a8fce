/* Paged attention core with online softmax (see attention.h). */
#include "attention.h"

#include <math.h>
#include <string.h>

#include "convert.h"
#include "cpu_isa.h"

#if WEIR_X86
#include <immintrin.h>
#endif

typedef struct vec_ops {
  float (*dot)(const float *a, const float *b, int32_t n);
  void (*axpy)(float *y, float alpha, const float *x, int32_t n); /* y += alpha x */
  void (*scal)(float *y, float alpha, int32_t n);                 /* y *= alpha */
} vec_ops;

static float dot_scalar(const float *a, const float *b, int32_t n) {
  float s[4] = {0, 0, 0, 0};
  int32_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int j = 0; j < 4; j++) s[j] += a[i + j] * b[i + j];
  for (; i < n; i++) s[0] += a[i] * b[i];
  return (s[0] + s[1]) + (s[2] + s[3]);
}
static void axpy_scalar(float *y, float alpha, const float *x, int32_t n) {
  for (int32_t i = 0; i < n; i++) y[i] += alpha * x[i];
}
static void scal_scalar(float *y, float alpha, int32_t n) {
  for (int32_t i = 0; i < n; i++) y[i] *= alpha;
}

#if WEIR_X86
WEIR_TARGET_AVX2 static float dot_avx2(const float *a, const float *b, int32_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
  }
  for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  s0 = _mm256_add_ps(s0, s1);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  float r = _mm_cvtss_f32(s);
  for (; i < n; i++) r += a[i] * b[i];
  return r;
}
WEIR_TARGET_AVX2 static void axpy_avx2(float *y, float alpha, const float *x, int32_t n) {
  __m256 av = _mm256_set1_ps(alpha);
  int32_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; i++) y[i] += alpha * x[i];
}
WEIR_TARGET_AVX2 static void scal_avx2(float *y, float alpha, int32_t n) {
  __m256 av = _mm256_set1_ps(alpha);
  int32_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(av, _mm256_loadu_ps(y + i)));
  for (; i < n; i++) y[i] *= alpha;
}
WEIR_TARGET_AVX512 static float dot_avx512(const float *a, const float *b, int32_t n) {
  __m512 s0 = _mm512_setzero_ps();
  for (int32_t i = 0; i < n; i += 16) {
    __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u);
    s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), s0);
  }
  return _mm512_reduce_add_ps(s0);
}
WEIR_TARGET_AVX512 static void axpy_avx512(float *y, float alpha, const float *x, int32_t n) {
  __m512 av = _mm512_set1_ps(alpha);
  for (int32_t i = 0; i < n; i += 16) {
    __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u);
    __m512 r = _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i));
    _mm512_mask_storeu_ps(y + i, m, r);
  }
}
WEIR_TARGET_AVX512 static void scal_avx512(float *y, float alpha, int32_t n) {
  __m512 av = _mm512_set1_ps(alpha);
  for (int32_t i = 0; i < n; i += 16) {
    __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(av, _mm512_maskz_loadu_ps(m, y + i)));
  }
}
#endif

static vec_ops pick_ops(void) {
  switch (weir_cpu_isa()) {
#if WEIR_X86
  case WEIR_CPU_ISA_AVX512: return (vec_ops){dot_avx512, axpy_avx512, scal_avx512};
  case WEIR_CPU_ISA_AVX2: return (vec_ops){dot_avx2, axpy_avx2, scal_avx2};
#endif
  default: return (vec_ops){dot_scalar, axpy_scalar, scal_scalar};
  }
}

/* Scratch layout, each region rounded up to 16 floats so every row stays 64-byte aligned
 * when the scratch is: kf, vf [block_size][hd16]; qs, acc [rows][hd16]; m, l [rows];
 * s [block_size]. */
static size_t up16(size_t n) { return (n + 15) & ~(size_t)15; }

size_t weir_attn_cpu_scratch_floats(int32_t q_len, int32_t n_group, int32_t head_dim,
                                    int32_t block_size) {
  size_t rows = (size_t)q_len * (size_t)n_group, hd = up16((size_t)head_dim);
  return 2 * (size_t)block_size * hd + 2 * rows * hd + 2 * up16(rows) + up16((size_t)block_size);
}

void weir_attn_cpu_run(const weir_attn_cpu_args *a) {
  const vec_ops ops = pick_ops();
  const int32_t hd = a->head_dim, bs = a->block_size;
  const size_t hdp = up16((size_t)hd);
  const int32_t rows = a->q_len * a->n_group;
  float *kf = a->scratch;
  float *vf = kf + (size_t)bs * hdp;
  float *qs = vf + (size_t)bs * hdp;
  float *acc = qs + (size_t)rows * hdp;
  float *mrow = acc + (size_t)rows * hdp;
  float *lrow = mrow + up16((size_t)rows);
  float *s = lrow + up16((size_t)rows);

  /* The scale is folded into q once instead of into every score. */
  for (int32_t i = 0; i < a->q_len; i++)
    for (int32_t g = 0; g < a->n_group; g++) {
      float *dst = qs + (size_t)(i * a->n_group + g) * hdp;
      const float *src = a->q + i * a->q_stride + (int64_t)g * hd;
      for (int32_t d = 0; d < hd; d++) dst[d] = src[d] * a->scale;
    }
  for (int32_t r = 0; r < rows; r++) {
    mrow[r] = -INFINITY;
    lrow[r] = 0.0f;
    memset(acc + (size_t)r * hdp, 0, (size_t)hd * sizeof(float));
  }

  const int32_t last_pos = a->first_pos + a->q_len - 1;
  const int32_t n_blocks = last_pos / bs + 1;
  for (int32_t b = 0; b < n_blocks; b++) {
    const uint8_t *blk = a->kv_base + (size_t)a->block_table[b] * a->block_bytes;
    const int32_t tok0 = b * bs;
    const int32_t ntok = last_pos + 1 - tok0 < bs ? last_pos + 1 - tok0 : bs;
    const float *krow, *vrow; /* row o at krow + o * kstride */
    size_t kstride;
    if (a->kv_f16) {
      for (int32_t o = 0; o < ntok; o++) {
        weir_f16_to_f32_row((const uint16_t *)(blk + a->k_offset + o * a->token_stride),
                            kf + o * hdp, hd);
        weir_f16_to_f32_row((const uint16_t *)(blk + a->v_offset + o * a->token_stride),
                            vf + o * hdp, hd);
      }
      krow = kf;
      vrow = vf;
      kstride = hdp;
    } else {
      /* f32 rows are read in place. */
      krow = (const float *)(blk + a->k_offset);
      vrow = (const float *)(blk + a->v_offset);
      kstride = a->token_stride / sizeof(float);
    }
    /* Queries before this block's first position see none of it. */
    int32_t i_first = tok0 - a->first_pos > 0 ? tok0 - a->first_pos : 0;
    for (int32_t i = i_first; i < a->q_len; i++) {
      const int32_t pos = a->first_pos + i;
      const int32_t nvalid = pos - tok0 + 1 < ntok ? pos - tok0 + 1 : ntok;
      for (int32_t g = 0; g < a->n_group; g++) {
        const int32_t r = i * a->n_group + g;
        const float *qr = qs + (size_t)r * hdp;
        float *ar = acc + (size_t)r * hdp;
        float bm = -INFINITY;
        for (int32_t o = 0; o < nvalid; o++) {
          s[o] = ops.dot(qr, krow + o * kstride, hd);
          if (s[o] > bm) bm = s[o];
        }
        if (bm > mrow[r]) {
          /* New running max: rescale what was accumulated under the old one. */
          float f = mrow[r] == -INFINITY ? 0.0f : expf(mrow[r] - bm);
          if (f != 1.0f) {
            ops.scal(ar, f, hd);
            lrow[r] *= f;
          }
          mrow[r] = bm;
        }
        for (int32_t o = 0; o < nvalid; o++) {
          float e = expf(s[o] - mrow[r]);
          lrow[r] += e;
          ops.axpy(ar, e, vrow + o * kstride, hd);
        }
      }
    }
  }

  for (int32_t i = 0; i < a->q_len; i++)
    for (int32_t g = 0; g < a->n_group; g++) {
      const int32_t r = i * a->n_group + g;
      float *dst = a->out + i * a->q_stride + (int64_t)g * hd;
      const float *ar = acc + (size_t)r * hdp;
      float inv = lrow[r] > 0.0f ? 1.0f / lrow[r] : 0.0f;
      for (int32_t d = 0; d < hd; d++) dst[d] = ar[d] * inv;
    }
}
