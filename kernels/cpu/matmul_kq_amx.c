/* WEIR_KQ_X16 multi-token GEMM on AMX-INT8 (see matmul_kq_amx.h).
 *
 * Compiled with -mamx-tile -mamx-int8 and the AVX-512 set (kernels/CMakeLists.txt) for this
 * file only; nothing here runs unless weir_kq_amx_available() said yes.
 *
 * Shape of the work. A tile product C[r][t] += sum_k A[r][k] B[k/4][4t + k%4] (int8 x int8
 * -> int32) takes 16 weight rows (A's rows) against 16 tokens (C's columns). The weights'
 * scales change every 32 columns (a sub-block; Q6_K 16), so the integer sums must be scaled
 * at that grain, and a tile store plus 16 conversions per 32 columns would cost more than the
 * product itself. The K-types avoid that: within a super-block the weight is d * sc * u (+ the
 * mins) with integer sc and u, so v = sc * u (Q6_K sc * (u - 32)) is an integer below 4096 in
 * magnitude, stored as two bytes v = 256 hi + lo; lo . q + 256 (hi . q) over the 256 columns
 * is the super-block's exact integer sum, accumulated in two C tiles (tdpbusd for the
 * unsigned lo, tdpbssd for hi) and scaled once per super-block: by d, plus the mins
 * (-dmin m times the sub-block's sum of q, one FMA per sub-block), times the token's scale.
 * Q8_0 has a scale on both sides per 32 columns: one tdpbssd of K = 32 per block, scaled per
 * block.
 *
 * Weights: a block of up to 64 rows is decoded once per call into A tiles (16 rows x 64
 * bytes) plus f32 scales, and reused by every token block. Activations: every token block of
 * 16 is rearranged once per call into B tiles plus per-token scales. Both live in a per-thread
 * scratch kept across calls. */
#include "matmul_kq_amx.h"
#include "matmul_kq_internal.h"

#include <stdlib.h>
#include <string.h>

#if WEIR_KQ_AMX_BUILT
#include <immintrin.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <cpuid.h>

#include "weir/numeric.h"

#define ARCH_GET_XCOMP_PERM 0x1022
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

/* 1 when the CPU has AMX-TILE and AMX-INT8 (CPUID.7.0:EDX bits 24, 25) and the kernel grants
 * this process XTILEDATA. The request is per process and idempotent; it is made once. */
int weir_kq_amx_available(void) {
  static _Atomic int g_avail = -1;
  int v = atomic_load_explicit(&g_avail, memory_order_relaxed);
  if (v >= 0) return v;
  unsigned a, b, c, d;
  int ok = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) && (d & (1u << 24)) && (d & (1u << 25))) {
    unsigned long mask = 0;
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0 &&
        syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &mask) == 0 &&
        (mask & (1ul << XFEATURE_XTILEDATA)))
      ok = 1;
  }
  atomic_store_explicit(&g_avail, ok, memory_order_relaxed);
  return ok;
}

/* ---- per-thread scratch ------------------------------------------------------------------ */

/* One per thread that ran the kernel, grown as needed. No pthread key destructor: the kernels
 * live in plugins that the host may dlclose while the pool's threads still exist, and a key
 * destructor would then jump into unmapped code when such a thread exits. Instead every
 * thread's scratch is on a global list that the library destructor frees (at dlclose or exit,
 * when no kernel runs); a thread that ends before that leaves its buffer there until then. */
typedef struct amx_scratch {
  void *p;
  size_t n;
  struct amx_scratch *next;
} amx_scratch;

static pthread_mutex_t g_scratch_mu = PTHREAD_MUTEX_INITIALIZER;
static amx_scratch *g_scratch_all;
static _Thread_local amx_scratch *t_scratch;

__attribute__((destructor)) static void scratch_free_all(void) {
  pthread_mutex_lock(&g_scratch_mu);
  amx_scratch *s = g_scratch_all;
  g_scratch_all = NULL;
  pthread_mutex_unlock(&g_scratch_mu);
  while (s) {
    amx_scratch *next = s->next;
    free(s->p);
    free(s);
    s = next;
  }
}

/* n bytes, 64-byte aligned, or NULL when memory runs out. */
static void *scratch_get(size_t n) {
  amx_scratch *s = t_scratch;
  if (!s) {
    s = calloc(1, sizeof *s);
    if (!s) return NULL;
    pthread_mutex_lock(&g_scratch_mu);
    s->next = g_scratch_all;
    g_scratch_all = s;
    pthread_mutex_unlock(&g_scratch_mu);
    t_scratch = s;
  }
  if (s->n < n) {
    void *p = aligned_alloc(64, (n + 63) / 64 * 64);
    if (!p) return NULL;
    free(s->p);
    s->p = p;
    s->n = n;
  }
  return s->p;
}

/* ---- layout facts (matmul_kq.h, WEIR_KQ_X16; shared ones in matmul_kq_internal.h) ------- */

/* Per lane l of a group: w = sw[l] * v + mw[l] with v the signed value group_decode gives:
 * the X16 scales (matmul_kq.c's, d * sc in f32) with no offset where v is the signed value
 * (Q8_0: q, not q + 128; Q6_K: u - 32). */
static void group_scales(weir_dtype t, const uint8_t *p, float *sw, float *mw) {
  weir__kq_x16_scales(t, p, sw, mw);
  if (t == WEIR_DTYPE_Q8_0 || t == WEIR_DTYPE_Q6_K) memset(mw, 0, 16 * sizeof *mw);
}

/* The group at p as signed bytes in the X16 order: w[c] byte 4l + i is lane l, column 4c + i
 * (c < 8; Q6_K c < 4). */
static inline void group_decode(weir_dtype type, const uint8_t *p, __m512i *w) {
  const __m512i m0f = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
  if (type == WEIR_DTYPE_Q8_0) {
    const __m512i x80 = _mm512_set1_epi8((char)0x80);
    for (int c = 0; c < 8; c++) w[c] = _mm512_xor_si512(_mm512_loadu_si512(p + 32 + 64 * c), x80);
  } else if (type == WEIR_DTYPE_Q6_K) {
    const __m512i v0 = _mm512_loadu_si512(p + 18), v1 = _mm512_loadu_si512(p + 82);
    const __m512i hb = _mm512_loadu_si512(p + 146), s32 = _mm512_set1_epi8(32);
    w[0] = _mm512_or_si512(_mm512_and_si512(v0, m0f), _mm512_and_si512(_mm512_slli_epi16(hb, 4), m30));
    w[1] = _mm512_or_si512(_mm512_and_si512(v1, m0f), _mm512_and_si512(_mm512_slli_epi16(hb, 2), m30));
    w[2] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v0, 4), m0f), _mm512_and_si512(hb, m30));
    w[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v1, 4), m0f),
                           _mm512_and_si512(_mm512_srli_epi16(hb, 2), m30));
    for (int c = 0; c < 4; c++) w[c] = _mm512_sub_epi8(w[c], s32);
  } else {
    for (int c = 0; c < 4; c++) {
      __m512i v = _mm512_loadu_si512(p + 32 + 64 * c);
      w[c] = _mm512_and_si512(v, m0f);
      w[c + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m0f);
    }
    if (type == WEIR_DTYPE_Q5_K) {
      const __m512i v16 = _mm512_set1_epi8(16);
      for (int c = 0; c < 8; c++) {
        uint64_t mb;
        memcpy(&mb, p + 288 + 8 * c, 8);
        w[c] = _mm512_mask_add_epi8(w[c], _cvtu64_mask64(mb), w[c], v16);
      }
    }
  }
}

/* ---- the kernel ---------------------------------------------------------------------------- */

enum { RB = 64, SUB = 16, TB = 16 };

typedef struct tilecfg {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} tilecfg;

/* Per call: the weights' scratch (one row block) and the activations' (every token block).
 *
 * K-types (Q4_K, Q5_K, Q6_K): a super-block's integer weight v = sc * u (Q6_K sc * (u - 32))
 * is split into v = 256 hi + lo (lo unsigned, hi signed; |v| < 4096), each a byte, so that the
 * super-block's whole integer dot product is lo . q + 256 (hi . q): two tile products per 64
 * columns that accumulate over the super-block's 256 columns in two C tiles, stored and
 * scaled once per super-block (by d, then the token's activation scale; the mins of Q4_K/Q5_K
 * as one FMA per sub-block). A tiles: 16 rows x 64 bytes of lo (or hi), chunk k of the
 * super-block; B tiles: the same 64 columns of 16 tokens, 4 bytes per token per row.
 * Q8_0: per 32-column block (both sides have their own scale there): A 16 rows x 32 bytes q,
 * B 8 x 64 bytes of the tokens' q, one C tile per block. */
typedef struct amx_plan {
  weir_dtype type;
  int ksb;          /* super-blocks per group: Q4_K/Q5_K 2, Q6_K 1; Q8_0 0 */
  int64_t groups;   /* groups of a row */
  int64_t ntb;      /* token blocks */
  int8_t *wt;       /* [RB / SUB][groups] x 16 x group-columns x (K-types 2, Q8_0 1) bytes */
  float *wsw, *wmw; /* [RB / SUB][groups][256]: K: d [sb][row], -dmin m [sb][8][row]; Q8_0 d [lane][row] */
  int8_t *at;       /* [ntb][groups] x 16 x group-columns bytes of B tiles */
  float *axd, *aqs; /* [ntb][groups][256]: scales [sb or lane][token]; Q4_K/Q5_K sum q [lane][token] */
} amx_plan;

/* Byte j (0..63) of chunk k (0..3) of super-block sb, in a group in the X16 order: the lanes
 * of super-block sb are dwords 8 sb.. of each 64-byte vector c (Q6_K: all 16 of them). */
static inline int chunk_off(int ksb, int sb, int k, int j) {
  if (ksb == 1) return 64 * k + j;
  return j < 32 ? 128 * k + 32 * sb + j : 128 * k + 64 + 32 * sb + (j - 32);
}

/* Rearranges the activations (weir_kq_quantize_act_x16's layout) into B tiles. Tokens past
 * n_tokens are zeros. */
static void pack_act(const weir_kq_matmul_args *a, const amx_plan *pl) {
  const int gc = weir__kq_x16_cols(a->type), ksb = pl->ksb;
  const int64_t tiles = a->act.tiles, kp = tiles * 256;
  for (int64_t tb = 0; tb < pl->ntb; tb++)
    for (int64_t g = 0; g < pl->groups; g++) {
      const int64_t tg = tb * pl->groups + g;
      int8_t *at = pl->at + tg * 16 * gc;
      float *xd = pl->axd + tg * 256, *qs = pl->aqs + tg * 256;
      for (int tt = 0; tt < TB; tt++) {
        const int64_t t = tb * TB + tt;
        const int live = t < a->n_tokens;
        const int8_t *xq = live ? a->act.q + t * kp + (int64_t)gc * g : NULL;
        const int64_t o = live ? (t * tiles + g * (gc / 256)) * 16 : 0;
        if (ksb == 0) { /* Q8_0: lane l, row c: token tt's bytes 64c + 4l .. + 3 */
          for (int l = 0; l < 16; l++) {
            for (int c = 0; c < 8; c++) {
              int8_t *d = at + l * 512 + c * 64 + 4 * tt;
              if (live) memcpy(d, xq + 64 * c + 4 * l, 4);
              else memset(d, 0, 4);
            }
            xd[l * 16 + tt] = live ? a->act.d16[o + l] : 0.0f;
          }
          continue;
        }
        for (int sb = 0; sb < ksb; sb++) {
          for (int k = 0; k < 4; k++) {
            int8_t *b = at + (sb * 4 + k) * 1024;
            for (int kk = 0; kk < 16; kk++) {
              if (live) memcpy(b + kk * 64 + 4 * tt, xq + chunk_off(ksb, sb, k, 4 * kk), 4);
              else memset(b + kk * 64 + 4 * tt, 0, 4);
            }
          }
          xd[sb * 16 + tt] = live ? a->act.d16[o + (ksb == 2 ? 8 * sb : 0)] : 0.0f;
        }
        if (a->type != WEIR_DTYPE_Q6_K)
          for (int l = 0; l < 16; l++) {
            int32_t sum = 0;
            if (live)
              for (int c = 0; c < 8; c++)
                for (int i = 0; i < 4; i++) sum += xq[64 * c + 4 * l + i];
            qs[l * 16 + tt] = (float)sum;
          }
      }
    }
}

/* Decodes rows [r, r + n) (n <= RB) into A tiles and scales; rows past n are zeros. */
static void pack_rows(const weir_kq_matmul_args *a, const amx_plan *pl, int64_t r, int n) {
  const weir_dtype type = a->type;
  const int gc = weir__kq_x16_cols(type), ksb = pl->ksb;
  const size_t gb = weir__kq_x16_bytes(type);
  const int64_t per_sg = (int64_t)16 * gc * (ksb ? 2 : 1);
  for (int s = 0; s < RB / SUB; s++) {
    if (s * SUB >= n) break;
    for (int64_t g = 0; g < pl->groups; g++) {
      const int64_t sg = s * pl->groups + g;
      int8_t *wt = pl->wt + sg * per_sg;
      float *sw = pl->wsw + sg * 256, *mw = pl->wmw + sg * 256;
      for (int rr = 0; rr < SUB; rr++) {
        const int ri = s * SUB + rr;
        const int live = ri < n;
        const uint8_t *p = live ? a->w + (size_t)(r + ri) * a->row_bytes + g * gb : NULL;
        __m512i w[8];
        float s1[16], m1[16];
        if (live) {
          group_decode(type, p, w);
          group_scales(type, p, s1, m1);
        } else {
          for (int c = 0; c < 8; c++) w[c] = _mm512_setzero_si512();
          for (int l = 0; l < 16; l++) s1[l] = m1[l] = 0;
        }
        if (ksb == 0) { /* Q8_0: lane l's tile, row rr: dword l of each vector */
          _Alignas(64) int8_t tmp[8][64];
          for (int c = 0; c < 8; c++) _mm512_store_si512(tmp[c], w[c]);
          for (int l = 0; l < 16; l++) {
            for (int c = 0; c < 8; c++) memcpy(wt + l * 512 + rr * 32 + 4 * c, tmp[c] + 4 * l, 4);
            sw[l * 16 + rr] = s1[l];
          }
          continue;
        }
        /* the integer scales: Q4_K/Q5_K from the heads, Q6_K the int8 scales */
        int sc[16];
        if (!live) {
          for (int l = 0; l < 16; l++) sc[l] = 0;
        } else if (type == WEIR_DTYPE_Q6_K) {
          for (int l = 0; l < 16; l++) sc[l] = (int8_t)p[l];
        } else {
          for (int sb = 0; sb < 2; sb++)
            for (int j = 0; j < 8; j++) {
              int m;
              weir__kq_k4_scale_min(p + 16 * sb + 4, j, &sc[8 * sb + j], &m);
            }
        }
        for (int h = 0; h < 2; h++) {
          _Alignas(64) int16_t mult[32];
          for (int e = 0; e < 32; e++) mult[e] = (int16_t)sc[8 * h + e / 4];
          const __m512i vm = _mm512_load_si512(mult);
          for (int c = 0; c < (ksb == 1 ? 4 : 8); c++) {
            const __m256i half = h ? _mm512_extracti64x4_epi64(w[c], 1) : _mm512_castsi512_si256(w[c]);
            const __m512i u = ksb == 1 ? _mm512_cvtepi8_epi16(half) : _mm512_cvtepu8_epi16(half);
            const __m512i v = _mm512_mullo_epi16(u, vm);
            const int sb = ksb == 1 ? 0 : h, k = ksb == 1 ? c : c >> 1;
            const int off = ksb == 1 ? 32 * h : 32 * (c & 1);
            int8_t *lo = wt + ((sb * 4 + k) * 2) * 1024 + rr * 64 + off;
            _mm256_storeu_si256((__m256i *)lo, _mm512_cvtepi16_epi8(v));
            _mm256_storeu_si256((__m256i *)(lo + 1024), _mm512_cvtepi16_epi8(_mm512_srai_epi16(v, 8)));
          }
        }
        /* d per super-block; -dmin m per sub-block */
        if (type == WEIR_DTYPE_Q6_K) {
          sw[rr] = live ? weir_f16_to_f32(weir__kq_rd16(p + 16)) : 0.0f;
        } else {
          for (int sb = 0; sb < 2; sb++) {
            sw[sb * 16 + rr] = live ? weir_f16_to_f32(weir__kq_rd16(p + 16 * sb)) : 0.0f;
            for (int j = 0; j < 8; j++) mw[sb * 128 + j * 16 + rr] = m1[8 * sb + j];
          }
        }
      }
    }
  }
}

/* K-types: super-block unit u of sub-block s against token blocks tb and tb2 (tb2 may equal
 * tb): the weight tiles (2 lo, 3 hi) are loaded once for both, the activations into 6 and 7,
 * the sums into C tiles 0, 1 (tb) and 4, 5 (tb2), stored to cb[0..3]. */
static inline void kt_products(const amx_plan *pl, int s, int64_t tb, int64_t tb2, int64_t u,
                               int32_t (*cb)[16][16]) {
  const int64_t g = u / pl->ksb;
  const int sb = (int)(u % pl->ksb);
  const int gc = weir__kq_x16_cols(pl->type);
  const int8_t *wa = pl->wt + (s * pl->groups + g) * 32 * gc + sb * 8 * 1024;
  const int8_t *b0 = pl->at + (tb * pl->groups + g) * 16 * gc + sb * 4 * 1024;
  const int8_t *b1 = pl->at + (tb2 * pl->groups + g) * 16 * gc + sb * 4 * 1024;
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(4);
  _tile_zero(5);
  for (int k = 0; k < 4; k++) {
    _tile_loadd(2, wa + (k * 2) * 1024, 64);
    _tile_loadd(6, b0 + k * 1024, 64);
    _tile_loadd(3, wa + (k * 2 + 1) * 1024, 64);
    _tile_loadd(7, b1 + k * 1024, 64);
    _tile_dpbusd(0, 2, 6);
    _tile_dpbssd(1, 3, 6);
    _tile_dpbusd(4, 2, 7);
    _tile_dpbssd(5, 3, 7);
  }
  _tile_stored(0, cb[0], 64);
  _tile_stored(1, cb[1], 64);
  _tile_stored(4, cb[2], 64);
  _tile_stored(5, cb[3], 64);
}

/* K-types: scales super-block unit u's sums (cb: lo, hi; rows x tokens) into acc[row]. */
static inline void kt_scale(const amx_plan *pl, int s, int64_t tb, int64_t u,
                            int32_t (*cb)[16][16], __m512 *acc) {
  const int64_t g = u / pl->ksb;
  const int sb = (int)(u % pl->ksb);
  const int64_t sg = s * pl->groups + g, tg = tb * pl->groups + g;
  const float *d = pl->wsw + sg * 256 + sb * 16, *mw = pl->wmw + sg * 256 + sb * 128;
  const __m512 xd = _mm512_loadu_ps(pl->axd + tg * 256 + sb * 16);
  if (pl->type == WEIR_DTYPE_Q6_K) {
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++) {
      const __m512i v = _mm512_add_epi32(_mm512_load_si512(cb[0][r]),
                                         _mm512_slli_epi32(_mm512_load_si512(cb[1][r]), 8));
      acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(v), _mm512_set1_ps(d[r])), xd, acc[r]);
    }
    return;
  }
  __m512 qs[8];
  const float *q = pl->aqs + tg * 256 + sb * 128;
#pragma GCC unroll 8
  for (int j = 0; j < 8; j++) qs[j] = _mm512_loadu_ps(q + j * 16);
#pragma GCC unroll 16
  for (int r = 0; r < 16; r++) {
    const __m512i v = _mm512_add_epi32(_mm512_load_si512(cb[0][r]),
                                       _mm512_slli_epi32(_mm512_load_si512(cb[1][r]), 8));
    __m512 ps = _mm512_mul_ps(_mm512_cvtepi32_ps(v), _mm512_set1_ps(d[r]));
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) ps = _mm512_fmadd_ps(_mm512_set1_ps(mw[j * 16 + r]), qs[j], ps);
    acc[r] = _mm512_fmadd_ps(ps, xd, acc[r]);
  }
}

/* Q8_0: the tile products of unit u (8 blocks: lanes 8 (u % 2).. of group u / 2) into
 * cb[0..7]; lane pairs alternate between C tiles 0, 1 and 2, 3. */
static inline void q8_products(const amx_plan *pl, int s, int64_t tb, int64_t u, int32_t (*cb)[16][16]) {
  const int l0 = (int)(u & 1) * 8;
  const int64_t g = u >> 1;
  const int8_t *wa = pl->wt + (s * pl->groups + g) * 16 * 512;
  const int8_t *ba = pl->at + (tb * pl->groups + g) * 16 * 512;
  for (int l = l0; l < l0 + 8; l += 4) {
    _tile_loadd(4, wa + l * 512, 32);
    _tile_loadd(6, ba + l * 512, 64);
    _tile_zero(0);
    _tile_dpbssd(0, 4, 6);
    _tile_loadd(5, wa + (l + 1) * 512, 32);
    _tile_loadd(7, ba + (l + 1) * 512, 64);
    _tile_zero(1);
    _tile_dpbssd(1, 5, 7);
    _tile_stored(0, cb[l - l0], 64);
    _tile_stored(1, cb[l - l0 + 1], 64);
    _tile_loadd(4, wa + (l + 2) * 512, 32);
    _tile_loadd(6, ba + (l + 2) * 512, 64);
    _tile_zero(2);
    _tile_dpbssd(2, 4, 6);
    _tile_loadd(5, wa + (l + 3) * 512, 32);
    _tile_loadd(7, ba + (l + 3) * 512, 64);
    _tile_zero(3);
    _tile_dpbssd(3, 5, 7);
    _tile_stored(2, cb[l - l0 + 2], 64);
    _tile_stored(3, cb[l - l0 + 3], 64);
  }
}

static inline void q8_scale(const amx_plan *pl, int s, int64_t tb, int64_t u, int32_t (*cb)[16][16],
                            __m512 *acc) {
  const int l0 = (int)(u & 1) * 8;
  const int64_t g = u >> 1, sg = s * pl->groups + g, tg = tb * pl->groups + g;
  const float *sw = pl->wsw + sg * 256;
  for (int j = 0; j < 8; j++) {
    const int l = l0 + j;
    const __m512 xd = _mm512_loadu_ps(pl->axd + tg * 256 + l * 16);
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++)
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(cb[j][r])),
                               _mm512_mul_ps(_mm512_set1_ps(sw[l * 16 + r]), xd), acc[r]);
  }
}

/* Writes acc[row] (vectors over the tokens of block tb) to y. */
static void write_y(const weir_kq_matmul_args *a, int64_t row0, int valid, int64_t tb, const __m512 *acc) {
  _Alignas(64) float out[16][16];
  for (int i = 0; i < 16; i++) _mm512_store_ps(out[i], acc[i]);
  for (int t = 0; t < 16; t++) {
    const int64_t tok = tb * TB + t;
    if (tok >= a->n_tokens) break;
    float *y = a->y + tok * a->rows + row0;
    for (int i = 0; i < valid; i++) y[i] = out[i][t];
  }
}

/* Sub-block s of the row block at r (nrow valid rows in the block) against token block tb
 * (K-types: and tb + 1, sharing the weight tiles). The next unit's tile products are issued
 * before the current unit is scaled (cb holds two units), so the tile unit and the vector
 * ports overlap. */
static void run_sub(const weir_kq_matmul_args *a, const amx_plan *pl, int64_t r, int nrow, int s,
                    int64_t tb, int32_t (*cb)[16][16]) {
  const int64_t row0 = r + s * SUB;
  int valid = nrow - s * SUB;
  if (valid > SUB) valid = SUB;
  if (pl->ksb) {
    const int two = tb + 1 < pl->ntb;
    const int64_t tb2 = two ? tb + 1 : tb;
    __m512 acc[2][16];
    for (int i = 0; i < 16; i++) acc[0][i] = acc[1][i] = _mm512_setzero_ps();
    const int64_t units = pl->groups * pl->ksb;
    kt_products(pl, s, tb, tb2, 0, cb);
    for (int64_t u = 0; u < units; u++) {
      if (u + 1 < units) kt_products(pl, s, tb, tb2, u + 1, cb + ((u + 1) & 1) * 4);
      kt_scale(pl, s, tb, u, cb + (u & 1) * 4, acc[0]);
      if (two) kt_scale(pl, s, tb2, u, cb + (u & 1) * 4 + 2, acc[1]);
    }
    write_y(a, row0, valid, tb, acc[0]);
    if (two) write_y(a, row0, valid, tb2, acc[1]);
    return;
  }
  __m512 acc[16];
  for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_ps();
  const int64_t units = pl->groups * 2;
  q8_products(pl, s, tb, 0, cb);
  for (int64_t u = 0; u < units; u++) {
    if (u + 1 < units) q8_products(pl, s, tb, u + 1, cb + ((u + 1) & 1) * 8);
    q8_scale(pl, s, tb, u, cb + (u & 1) * 8, acc);
  }
  write_y(a, row0, valid, tb, acc);
}

int weir_kq_amx_rows(const weir_kq_matmul_args *a, int64_t r0, int64_t r1) {
  amx_plan pl = {.type = a->type};
  const int gc = weir__kq_x16_cols(a->type);
  pl.ksb = a->type == WEIR_DTYPE_Q8_0 ? 0 : a->type == WEIR_DTYPE_Q6_K ? 1 : 2;
  pl.groups = a->cols / gc;
  pl.ntb = (a->n_tokens + TB - 1) / TB;
  const size_t wt_b = (size_t)(RB / SUB) * pl.groups * 16 * gc * (pl.ksb ? 2 : 1);
  const size_t ws_b = (size_t)(RB / SUB) * pl.groups * 256 * sizeof(float);
  const size_t at_b = (size_t)pl.ntb * pl.groups * 16 * gc;
  const size_t as_b = (size_t)pl.ntb * pl.groups * 256 * sizeof(float);
  const size_t cb_b = 16 * 16 * 16 * sizeof(int32_t);
  uint8_t *base = scratch_get(cb_b + wt_b + at_b + 2 * ws_b + 2 * as_b);
  if (!base) return -1;
  int32_t(*cb)[16][16] = (int32_t(*)[16][16])base; /* two units of C, 64-byte aligned */
  uint8_t *p = base + cb_b;
  pl.wt = (int8_t *)p;
  p += wt_b;
  pl.at = (int8_t *)p;
  p += at_b;
  pl.wsw = (float *)p;
  p += ws_b;
  pl.wmw = (float *)p;
  p += ws_b;
  pl.axd = (float *)p;
  p += as_b;
  pl.aqs = (float *)p;

  tilecfg cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int i = 0; i < 4; i++) { /* C: 16 rows x 16 tokens */
    cfg.rows[i] = 16;
    cfg.colsb[i] = 64;
  }
  for (int i = 4; i < 6; i++) { /* A: 16 rows x K bytes (64; Q8_0 32) */
    cfg.rows[i] = 16;
    cfg.colsb[i] = pl.ksb ? 64 : 32;
  }
  for (int i = 6; i < 8; i++) { /* B: K / 4 rows x 16 tokens' 4 bytes */
    cfg.rows[i] = pl.ksb ? 16 : 8;
    cfg.colsb[i] = 64;
  }
  pack_act(a, &pl);
  _tile_loadconfig(&cfg);
  for (int64_t r = r0; r < r1; r += RB) {
    const int n = (int)(r1 - r < RB ? r1 - r : RB);
    pack_rows(a, &pl, r, n);
    for (int64_t tb = 0; tb < pl.ntb; tb += pl.ksb ? 2 : 1)
      for (int s = 0; s * SUB < n; s++) run_sub(a, &pl, r, n, s, tb, cb);
  }
  _tile_release();
  return 0;
}

#else

int weir_kq_amx_available(void) { return 0; }
int weir_kq_amx_rows(const weir_kq_matmul_args *a, int64_t r0, int64_t r1) {
  (void)a;
  (void)r0;
  (void)r1;
  return -1;
}

#endif
