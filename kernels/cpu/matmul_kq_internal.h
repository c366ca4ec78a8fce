/* What matmul_kq.c (the VNNI/AVX2/C kernels) and matmul_kq_amx.c (the AMX GEMM) share: the
 * GGUF block and WEIR_KQ_X16 layout facts (matmul_kq.h), read the same way by both. Internal
 * to kernels/cpu: plugins use matmul_kq.h. Pure functions; thread-safe. */
#ifndef WEIR_KERNELS_CPU_MATMUL_KQ_INTERNAL_H
#define WEIR_KERNELS_CPU_MATMUL_KQ_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "weir/tensor.h"

static inline uint16_t weir__kq_rd16(const uint8_t *p) {
  uint16_t v;
  memcpy(&v, p, 2);
  return v;
}

/* Q4_K / Q5_K: 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes. */
static inline void weir__kq_k4_scale_min(const uint8_t *s, int j, int *sc, int *m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

/* WEIR_KQ_X16: columns of a group (16 lanes of 32 columns; Q6_K 16 of 16, its scale's width)
 * and its bytes (those of the file's blocks it covers). */
static inline int weir__kq_x16_cols(weir_dtype t) { return t == WEIR_DTYPE_Q6_K ? 256 : 512; }
static inline size_t weir__kq_x16_bytes(weir_dtype t) {
  switch (t) {
  case WEIR_DTYPE_Q8_0: return 16 * 34;
  case WEIR_DTYPE_Q4_K: return 2 * 144;
  case WEIR_DTYPE_Q5_K: return 2 * 176;
  default: return 210; /* Q6_K */
  }
}

/* Per lane l of the WEIR_KQ_X16 group at p: w = sw[l] * u + mw[l], u the unsigned value the
 * layout stores (Q8_0: q + 128, mw = -128 sw; Q6_K: mw = -32 sw; Q4_K/Q5_K: d sc, -dmin m).
 * Defined in matmul_kq.c. */
void weir__kq_x16_scales(weir_dtype t, const uint8_t *p, float *sw, float *mw);

#endif
