/* weir CPU kernels: y[t] = W x[t] with 4-bit weights and int8 activations (W4A8).
 *
 * Weights. Row r of W holds unsigned 4-bit values q in [0, 15] with, per group of `group`
 * consecutive input columns (32, 64 or 128), an f16 scale d and an f16 offset m:
 *     w[r][k] = d[r][g] * q[r][k] + m[r][g],   g = k / group
 * (the Q4_1 form; an integer zero point z is m = -d * z). A symmetric weight (a Q4_0 source)
 * stores no m: m = -8 d, i.e. w = d * (q - 8).
 *
 * Layout (one allocation, see weir_q4_layout). Rows are taken four at a time ("quads"; the
 * last quad is padded with zero rows) and each quad is one contiguous run of memory, so a
 * thread's share of W is a single forward stream:
 *     quad = [nibbles: kp / 256 chunks x 4 rows x 128 bytes]
 *            [d: 4 rows x ngp f16][m: 4 rows x ngp f16 (asymmetric only)] [pad to 64 bytes]
 * kp is in_features rounded up to 256 (padding columns hold q = 0 and their groups d = m =
 * 0), ng = kp / group groups per row, stored with a row stride of ngp = ng rounded up to 16
 * (zeros) so the offsets' dot product runs in whole vectors. Within a chunk a row's 128 bytes follow the int8 kernels' stored
 * order (matmul_q8.h, weir_q8_stored_pos): byte j < 64 holds stored position j in its low
 * nibble and 64 + j in its high nibble, byte 64 + j holds 128 + j (low) and 192 + j (high).
 * So one 64-byte load and two masks give the 64 + 64 weights that meet two consecutive
 * 64-byte steps of the quantized activations, and every int32 lane of a SIMD register sums
 * products of one 32-column activation block.
 *
 * Activations are quantized per token and 32-column block exactly as the int8 kernels do
 * (weir_q8_quantize_act: x ~ xq * xd), after an optional per-input-channel multiplier (the
 * inverse AWQ scale). weir_q4_act_prep also writes, per 256-column chunk and int32 lane l
 * (16 lanes, l / 2 = the block), xdp = xd[block], and per weight group g the activation sum
 * xsg[g] = sum over the group's blocks of xd * (sum of xq), so that
 *     y = sum over chunks, lanes: (int32 lane sum of q * xq) * d * xdp  +  sum over g: m * xsg
 * and the offsets cost one short dot product per row and token.
 *
 * One token (decode) is a GEMV over quads; more tokens use register tiles of 4 rows x up to
 * 2 tokens over blocks of tokens whose activations fit in L2, so each quad is read from
 * memory once per token block.
 *
 * ISA: the int8 kernels' choice (weir_q8_isa_current: scalar, AVX2, AVX-512 BW, AVX-512
 * VNNI; WEIR_CPU_ISA lowers it). VNNI: vpdpbusd takes the unsigned nibbles times the signed
 * activations directly; AVX2 / AVX-512 BW: vpmaddubsw (15 * 127 * 2 cannot saturate) and
 * vpmaddwd.
 *
 * Threading: work splits over quads; weir_q4_matmul_chunk has the weir_parallel_fn
 * signature. Nothing keeps state; any number of calls may run at once. y must not alias the
 * inputs. */
#ifndef WEIR_KERNELS_CPU_MATMUL_Q4_H
#define WEIR_KERNELS_CPU_MATMUL_Q4_H

#include <stddef.h>
#include <stdint.h>

#include "matmul_q8.h"

#define WEIR_Q4_CHUNK 256     /* columns per chunk (= WEIR_Q8_ROW_ALIGN) */
#define WEIR_Q4_LANES 16      /* int32 lanes per chunk: xdp entries per chunk */
/* Bytes the kernels may read past the end of a packed weight: allocate that many more. */
#define WEIR_Q4_TAIL_PAD 64

typedef struct weir_q4_layout {
  int64_t rows, cols;  /* out_features, in_features */
  int64_t kp;          /* cols rounded up to WEIR_Q4_CHUNK */
  int64_t group;       /* 32, 64 or 128 */
  int64_t ng;          /* kp / group: scale groups per row (padding groups included) */
  int64_t ngp;         /* ng rounded up to 16: the row stride of d and m */
  int64_t nq;          /* quads: ceil(rows / 4) */
  int sym;             /* 1: no m (m = -8 d) */
  size_t nib_bytes;    /* nibble bytes of one quad: 2 * kp */
  size_t quad_bytes;   /* one quad, padded to 64 */
  size_t bytes;        /* nq * quad_bytes + WEIR_Q4_TAIL_PAD */
} weir_q4_layout;

/* Fills l for a rows x cols weight; returns 0, or -1 for a bad shape or group. */
int weir_q4_layout_init(weir_q4_layout *l, int64_t rows, int64_t cols, int64_t group, int sym);

/* Round-to-nearest asymmetric quantization of one group of n values (n <= 128):
 * d = f16((max - min) / 15), m = f16(min), q = clamp(round((x - m) / d), 0, 15), with the
 * f16-rounded d and m, so that d * q + m is exactly what the packed weight holds. A constant
 * group gets d = 0 (q = 0, x = m). Returns 0, or -1 when a value is Inf/NaN or d or m do not
 * fit f16 (|x| beyond 65504); then q = 0 and d, m are f16 NaN. Pure, thread-safe. */
int weir_q4_quantize_group(const float *x, int64_t n, uint8_t *q, uint16_t *d, uint16_t *m);

/* The same for values clipped to [lo, hi] first (the AWQ clipping search): min and max are
 * taken over the clipped values. */
int weir_q4_quantize_group_clip(const float *x, int64_t n, float lo, float hi, uint8_t *q,
                                uint16_t *d, uint16_t *m);

/* Writes row r of a packed weight from natural-order values: q[0..cols) in [0, 15], d and m
 * (f16 bits) [ng] (m ignored when l->sym). Columns cols..kp-1 get q = 0. Rows of one quad may
 * be written by different threads; the bytes of other rows are untouched. */
void weir_q4_store_row(const weir_q4_layout *l, uint8_t *w, int64_t r, const uint8_t *q,
                       const uint16_t *d, const uint16_t *m);
/* Reads row r back: q[0..cols), d and m [ng] f16 bits (for sym weights m = f16(-8 d) may not
 * be representable: read weir_q4_dequant_row for values). */
void weir_q4_load_row(const weir_q4_layout *l, const uint8_t *w, int64_t r, uint8_t *q,
                      uint16_t *d, uint16_t *m);
/* Row r as f32: d * q + m (sym: d * (q - 8)), each one f32 rounding of the exact value. */
void weir_q4_dequant_row(const weir_q4_layout *l, const uint8_t *w, int64_t r, float *out);

/* Bytes of activation workspace per token: xq (kp), then xd, xdp and xsg floats. */
size_t weir_q4_act_bytes(int64_t kp, int64_t group);

/* Prepares one token's activations for weights with `group`: x[0..cols) times inv_scale[k]
 * (NULL: none), quantized as weir_q8_quantize_act does into xq [kp], with xdp
 * [kp / 256 * 16] and xsg [ngp] (zero past ng) as described above; xd [kp / 32] is scratch.
 * tmp: cols floats of scratch (unused without inv_scale). Pure, thread-safe. */
void weir_q4_act_prep(const float *x, const float *inv_scale, int64_t cols, int64_t kp,
                      int64_t group, int8_t *xq, float *xd, float *xdp, float *xsg,
                      float *tmp);

typedef struct weir_q4_matmul_args {
  const weir_q4_layout *l;
  const uint8_t *w;   /* the packed weight */
  const int8_t *xq;   /* [n_tokens][kp] */
  const float *xdp;   /* [n_tokens][kp / 256 * 16] */
  const float *xsg;   /* [n_tokens][ngp] */
  int64_t n_tokens;
  float *y;           /* [n_tokens][rows] */
} weir_q4_matmul_args;

/* Computes y[t][r] for every token and every row of quads [q_begin, q_end). */
void weir_q4_matmul_quads(const weir_q4_matmul_args *a, int64_t q_begin, int64_t q_end);
/* weir_parallel_fn adapter: arg is a const weir_q4_matmul_args *, [begin, end) are quads. */
void weir_q4_matmul_chunk(void *arg, int64_t begin, int64_t end, int thread);

#endif
