/* WEIR_KQ_X16 multi-token GEMM on AMX-INT8 (see matmul_kq_amx.h).
 *
 * Compiled with -mamx-tile -mamx-int8 and the AVX-512 set (kernels/CMakeLists.txt) for this
 * file only; nothing here runs unless weir_kq_amx_usable() said yes.
 *
 * Shape of the work. A tile product C[t][r] += sum_k A[t][k] B[k/4][4r + k%4] (tdpbssd,
 * int8 x int8 -> int32) takes 16 tokens (A's rows) against 16 weight rows (C's columns) over
 * K = 32 columns: one sub-block (Q6_K: K = 16), the span over which the weights share one
 * scale. So each sub-block's integer sums come out of the tile unscaled and are scaled into
 * f32 accumulators with AVX-512 (a vector over the 16 rows per token): per 16 x 16 x 32 MACs
 * one tile product, one tile store and 16 x (conversion + FMA) (+ one FMA of the mins for
 * Q4_K/Q5_K).
 *
 * Weights: a block of up to 64 rows is decoded once per call into B tiles (signed values:
 * Q4_K/Q5_K u, Q6_K u - 32, Q8_0 the file's q, so that only Q4_K/Q5_K keep a mins term) plus
 * per-sub-block f32 scales, and reused by every token block. Activations: every token block
 * of 16 is rearranged once per call into A tiles (a sub-block's 32 bytes per token) plus
 * per-token scales. Both live in a per-thread scratch kept across calls. */
#include "matmul_kq_amx.h"

#include <stdlib.h>
#include <string.h>

#if WEIR_KQ_AMX_BUILT
#include <immintrin.h>
#include <pthread.h>
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
  static int v = -1;
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
  v = ok;
  return v;
}

/* ---- per-thread scratch ------------------------------------------------------------------ */

/* Grown as needed, freed when the thread ends (pthread key destructor). */
typedef struct amx_scratch {
  void *p;
  size_t n;
} amx_scratch;

static pthread_key_t g_key;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_key_ok;

static void scratch_free(void *v) {
  amx_scratch *s = v;
  if (s) free(s->p);
  free(s);
}
static void key_init(void) { g_key_ok = pthread_key_create(&g_key, scratch_free) == 0; }

/* n bytes, 64-byte aligned, or NULL when memory runs out. */
static void *scratch_get(size_t n) {
  pthread_once(&g_once, key_init);
  if (!g_key_ok) return NULL;
  amx_scratch *s = pthread_getspecific(g_key);
  if (!s) {
    s = calloc(1, sizeof *s);
    if (!s) return NULL;
    if (pthread_setspecific(g_key, s) != 0) {
      free(s);
      return NULL;
    }
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

/* ---- layout facts (matmul_kq.h, WEIR_KQ_X16) ----------------------------------------------- */

static inline uint16_t rd16(const uint8_t *p) {
  uint16_t v;
  memcpy(&v, p, 2);
  return v;
}

static int gcols(weir_dtype t) { return t == WEIR_DTYPE_Q6_K ? 256 : 512; }
static size_t gbytes(weir_dtype t) {
  switch (t) {
  case WEIR_DTYPE_Q8_0: return 16 * 34;
  case WEIR_DTYPE_Q4_K: return 2 * 144;
  case WEIR_DTYPE_Q5_K: return 2 * 176;
  default: return 210;
  }
}

/* Q4_K / Q5_K: 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes. */
static inline void k4_scale_min(const uint8_t *s, int j, int *sc, int *m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

/* Per lane l of a group: w = sw[l] * v + mw[l] with v the signed value the B tile holds. The
 * products are the ones x16_scales in matmul_kq.c forms (d * sc in f32). */
static void group_scales(weir_dtype t, const uint8_t *p, float *sw, float *mw) {
  if (t == WEIR_DTYPE_Q8_0) {
    for (int l = 0; l < 16; l++) {
      sw[l] = weir_f16_to_f32(rd16(p + 2 * l));
      mw[l] = 0;
    }
    return;
  }
  if (t == WEIR_DTYPE_Q6_K) {
    float d = weir_f16_to_f32(rd16(p + 16));
    for (int l = 0; l < 16; l++) {
      sw[l] = d * (float)(int8_t)p[l];
      mw[l] = 0;
    }
    return;
  }
  for (int sb = 0; sb < 2; sb++) {
    const uint8_t *h = p + 16 * sb;
    float d = weir_f16_to_f32(rd16(h)), dmin = weir_f16_to_f32(rd16(h + 2));
    for (int j = 0; j < 8; j++) {
      int sc, m;
      k4_scale_min(h + 4, j, &sc, &m);
      sw[8 * sb + j] = d * (float)sc;
      mw[8 * sb + j] = -dmin * (float)m;
    }
  }
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

/* Per call: the weights' scratch (one row block) and the activations' (every token block). */
typedef struct amx_plan {
  weir_dtype type;
  int nch;          /* K / 4: rows of a B tile (8; Q6_K 4) */
  int kb;           /* K: bytes of an A row (32; Q6_K 16) */
  int64_t groups;   /* groups of a row */
  int64_t ntb;      /* token blocks */
  int8_t *wt;       /* [RB / SUB][groups][16 lanes][nch][64] */
  float *wsw, *wmw; /* [RB / SUB][groups][16 lanes][16 rows] */
  int8_t *at;       /* [ntb][groups][16 lanes][16 tokens][kb] */
  float *axd, *aqs; /* [ntb][groups][16 lanes][16 tokens] */
  int8_t *dec;      /* [16 rows][nch][64] decode staging */
} amx_plan;

/* Rearranges the activations (weir_kq_quantize_act_x16's layout) into A tiles. Tokens past
 * n_tokens are zeros. */
static void pack_act(const weir_kq_matmul_args *a, const amx_plan *pl) {
  const int gc = gcols(a->type), kb = pl->kb, nch = pl->nch;
  const int64_t tiles = a->act.tiles, kp = tiles * 256;
  const int q8 = a->type == WEIR_DTYPE_Q8_0;
  for (int64_t tb = 0; tb < pl->ntb; tb++)
    for (int64_t g = 0; g < pl->groups; g++) {
      int8_t *at = pl->at + (tb * pl->groups + g) * 16 * 16 * kb;
      float *xd = pl->axd + (tb * pl->groups + g) * 256, *qs = pl->aqs + (tb * pl->groups + g) * 256;
      for (int tt = 0; tt < TB; tt++) {
        const int64_t t = tb * TB + tt;
        if (t >= a->n_tokens) {
          for (int l = 0; l < 16; l++) {
            memset(at + (l * 16 + tt) * kb, 0, (size_t)kb);
            xd[l * 16 + tt] = 0;
            qs[l * 16 + tt] = 0;
          }
          continue;
        }
        const int8_t *xq = a->act.q + t * kp + (int64_t)gc * g;
        const int64_t o = (t * tiles + g * (gc / 256)) * 16;
        for (int l = 0; l < 16; l++) {
          int8_t *dst = at + (l * 16 + tt) * kb;
          int32_t sum = 0;
          for (int c = 0; c < nch; c++) {
            memcpy(dst + 4 * c, xq + 64 * c + 4 * l, 4);
            for (int i = 0; i < 4; i++) sum += xq[64 * c + 4 * l + i];
          }
          xd[l * 16 + tt] = a->act.d16[o + l];
          qs[l * 16 + tt] = q8 ? 0.0f : (float)sum;
        }
      }
    }
}

/* Decodes rows [r, r + n) (n <= RB) into B tiles and scales; rows past n are zeros. */
static void pack_rows(const weir_kq_matmul_args *a, const amx_plan *pl, int64_t r, int n) {
  const int nch = pl->nch;
  const size_t gb = gbytes(a->type);
  const __m512i vidx = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                          _mm512_set1_epi32(nch * 64));
  for (int s = 0; s < RB / SUB; s++) {
    if (s * SUB >= n) break;
    for (int64_t g = 0; g < pl->groups; g++) {
      const int64_t sg = s * pl->groups + g;
      float *sw = pl->wsw + sg * 256, *mw = pl->wmw + sg * 256;
      for (int rr = 0; rr < SUB; rr++) {
        const int ri = s * SUB + rr;
        int8_t *d = pl->dec + rr * nch * 64;
        if (ri >= n) {
          memset(d, 0, (size_t)nch * 64);
          for (int l = 0; l < 16; l++) sw[l * 16 + rr] = mw[l * 16 + rr] = 0;
          continue;
        }
        const uint8_t *p = a->w + (size_t)(r + ri) * a->row_bytes + g * gb;
        __m512i w[8];
        group_decode(a->type, p, w);
        for (int c = 0; c < nch; c++) _mm512_storeu_si512(d + 64 * c, w[c]);
        float s1[16], m1[16];
        group_scales(a->type, p, s1, m1);
        for (int l = 0; l < 16; l++) {
          sw[l * 16 + rr] = s1[l];
          mw[l * 16 + rr] = m1[l];
        }
      }
      /* B tile of lane l, row c: dword rr = staging row rr's dword l of vector c */
      int8_t *bt = pl->wt + sg * 16 * nch * 64;
      for (int l = 0; l < 16; l++)
        for (int c = 0; c < nch; c++)
          _mm512_storeu_si512(bt + (l * nch + c) * 64,
                              _mm512_i32gather_epi32(vidx, pl->dec + 64 * c + 4 * l, 1));
    }
  }
}

/* The tile products of unit u (8 lanes: lanes 8 (u % 2).. of group u / 2) of sub-block s
 * against token block tb, into cb[0..7]. Lane pairs alternate between C tiles 0, 1 and 2, 3
 * so that a pair's products need not wait for the previous pair's stores. */
static inline void tile_unit(const amx_plan *pl, int s, int64_t tb, int64_t u, int32_t (*cb)[16][16]) {
  const int nch = pl->nch, kb = pl->kb, l0 = (int)(u & 1) * 8;
  const int64_t g = u >> 1;
  const int8_t *bt = pl->wt + (s * pl->groups + g) * 16 * nch * 64;
  const int8_t *at = pl->at + (tb * pl->groups + g) * 16 * 16 * kb;
  for (int l = l0; l < l0 + 8; l += 4) {
    _tile_loadd(4, at + l * 16 * kb, kb);
    _tile_loadd(6, bt + l * nch * 64, 64);
    _tile_zero(0);
    _tile_dpbssd(0, 4, 6);
    _tile_loadd(5, at + (l + 1) * 16 * kb, kb);
    _tile_loadd(7, bt + (l + 1) * nch * 64, 64);
    _tile_zero(1);
    _tile_dpbssd(1, 5, 7);
    _tile_stored(0, cb[l - l0], 64);
    _tile_stored(1, cb[l - l0 + 1], 64);
    _tile_loadd(4, at + (l + 2) * 16 * kb, kb);
    _tile_loadd(6, bt + (l + 2) * nch * 64, 64);
    _tile_zero(2);
    _tile_dpbssd(2, 4, 6);
    _tile_loadd(5, at + (l + 3) * 16 * kb, kb);
    _tile_loadd(7, bt + (l + 3) * nch * 64, 64);
    _tile_zero(3);
    _tile_dpbssd(3, 5, 7);
    _tile_stored(2, cb[l - l0 + 2], 64);
    _tile_stored(3, cb[l - l0 + 3], 64);
  }
}

/* Scales unit u's integer sums (cb, tokens x rows) into acc[token] (a vector over rows). */
static inline void scale_unit(const weir_kq_matmul_args *a, const amx_plan *pl, int s, int64_t tb,
                              int64_t u, int32_t (*cb)[16][16], __m512 *acc) {
  const weir_dtype type = a->type;
  const int mins = type == WEIR_DTYPE_Q4_K || type == WEIR_DTYPE_Q5_K;
  const int l0 = (int)(u & 1) * 8;
  const int64_t g = u >> 1, sg = s * pl->groups + g, tg = tb * pl->groups + g;
  const float *sw = pl->wsw + sg * 256, *mw = pl->wmw + sg * 256;
  const float *xd = pl->axd + tg * 256, *qs = pl->aqs + tg * 256;
  if (type == WEIR_DTYPE_Q8_0) { /* an activation scale per lane */
    for (int j = 0; j < 8; j++) {
      const int l = l0 + j;
      const __m512 vs = _mm512_loadu_ps(sw + l * 16);
#pragma GCC unroll 16
      for (int t = 0; t < 16; t++)
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(cb[j][t])),
                                 _mm512_mul_ps(vs, _mm512_set1_ps(xd[l * 16 + t])), acc[t]);
    }
    return;
  }
  /* one activation scale for the 8 lanes (a Q4_K/Q5_K super-block, half a Q6_K one); two
   * halves of 8 tokens so that 16 totals + 8 partial sums stay in registers */
  for (int h = 0; h < 16; h += 8) {
    __m512 ps[8];
#pragma GCC unroll 8
    for (int t = 0; t < 8; t++) ps[t] = _mm512_setzero_ps();
    for (int j = 0; j < 8; j++) {
      const int l = l0 + j;
      const __m512 vs = _mm512_loadu_ps(sw + l * 16);
#pragma GCC unroll 8
      for (int t = 0; t < 8; t++)
        ps[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(cb[j][h + t])), vs, ps[t]);
      if (mins) {
        const __m512 vm = _mm512_loadu_ps(mw + l * 16);
#pragma GCC unroll 8
        for (int t = 0; t < 8; t++) ps[t] = _mm512_fmadd_ps(vm, _mm512_set1_ps(qs[l * 16 + h + t]), ps[t]);
      }
    }
#pragma GCC unroll 8
    for (int t = 0; t < 8; t++)
      acc[h + t] = _mm512_fmadd_ps(ps[t], _mm512_set1_ps(xd[l0 * 16 + h + t]), acc[h + t]);
  }
}

/* Sub-block s of the row block at r (nrow valid rows in the block) against token block tb.
 * The tile products of the next unit are issued before the current unit is scaled (cb holds
 * two units), so the tile unit and the vector ports overlap. */
static inline void run_sub(const weir_kq_matmul_args *a, const amx_plan *pl, int64_t r, int nrow,
                           int s, int64_t tb, int32_t (*cb)[16][16]) {
  __m512 acc[16];
  for (int t = 0; t < 16; t++) acc[t] = _mm512_setzero_ps();
  const int64_t units = pl->groups * 2;
  tile_unit(pl, s, tb, 0, cb);
  for (int64_t u = 0; u < units; u++) {
    if (u + 1 < units) tile_unit(pl, s, tb, u + 1, cb + ((u + 1) & 1) * 8);
    scale_unit(a, pl, s, tb, u, cb + (u & 1) * 8, acc);
  }
  const int64_t row0 = r + s * SUB;
  int valid = nrow - s * SUB;
  if (valid > SUB) valid = SUB;
  const __mmask16 m = (__mmask16)((1u << valid) - 1);
  for (int t = 0; t < 16; t++) {
    const int64_t tok = tb * TB + t;
    if (tok >= a->n_tokens) break;
    _mm512_mask_storeu_ps(a->y + tok * a->rows + row0, m, acc[t]);
  }
}

int weir_kq_amx_rows(const weir_kq_matmul_args *a, int64_t r0, int64_t r1) {
  amx_plan pl = {.type = a->type};
  pl.nch = a->type == WEIR_DTYPE_Q6_K ? 4 : 8;
  pl.kb = 4 * pl.nch;
  pl.groups = a->cols / gcols(a->type);
  pl.ntb = (a->n_tokens + TB - 1) / TB;
  const size_t wt_b = (size_t)(RB / SUB) * pl.groups * 16 * pl.nch * 64;
  const size_t ws_b = (size_t)(RB / SUB) * pl.groups * 256 * sizeof(float);
  const size_t at_b = (size_t)pl.ntb * pl.groups * 16 * 16 * pl.kb;
  const size_t as_b = (size_t)pl.ntb * pl.groups * 256 * sizeof(float);
  const size_t dec_b = (size_t)SUB * pl.nch * 64;
  const size_t cb_b = 16 * 16 * 16 * sizeof(int32_t);
  uint8_t *base = scratch_get(wt_b + 2 * ws_b + at_b + 2 * as_b + dec_b + cb_b);
  if (!base) return -1;
  int32_t(*cb)[16][16] = (int32_t(*)[16][16])base; /* 16 lanes of C, 64-byte aligned */
  uint8_t *p = base + cb_b;
  pl.wt = (int8_t *)p;
  p += wt_b;
  pl.at = (int8_t *)p;
  p += at_b;
  pl.dec = (int8_t *)p;
  p += dec_b;
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
  for (int i = 0; i < 4; i++) { /* C */
    cfg.rows[i] = 16;
    cfg.colsb[i] = 64;
  }
  for (int i = 4; i < 6; i++) { /* A: 16 tokens x K bytes */
    cfg.rows[i] = 16;
    cfg.colsb[i] = (uint16_t)pl.kb;
  }
  for (int i = 6; i < 8; i++) { /* B: K / 4 rows x 16 rows' 4 bytes */
    cfg.rows[i] = (uint8_t)pl.nch;
    cfg.colsb[i] = 64;
  }
  pack_act(a, &pl);
  _tile_loadconfig(&cfg);
  for (int64_t r = r0; r < r1; r += RB) {
    const int n = (int)(r1 - r < RB ? r1 - r : RB);
    pack_rows(a, &pl, r, n);
    for (int64_t tb = 0; tb < pl.ntb; tb++)
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
