/* weir CPU kernels: y[t] = W x[t] with int8 weights and int8 activations.
 *
 * Weights: W is row-major [rows][kp] int8 q (kp = in_features padded with zeros to a multiple
 * of 256) with one f32 scale per `group` consecutive columns of a row (group is 32, 64, 128,
 * or kp for one scale per output channel): w[r][k] = q[r][k] * wd[r][k / group]. q is stored
 * biased, as the byte q + 128 (q ^ 0x80), which VNNI's unsigned x signed product takes as is,
 * and interleaved within each 256-column chunk (weir_q8_stored_pos); activations xq use the
 * same interleaving, unbiased.
 * Activations: each token's row is quantized per block of 32 columns (WEIR_Q8_BLOCK) by
 * weir_q8_quantize_act: x[t][k] ~ xq[t][k] * xd[t][k / 32].
 * The kernel sums int8 x int8 products in int32 lanes that each belong to one 32-column
 * block, over a whole 256-column chunk, then adds each block's sum times wd * xd in f32.
 *
 * One token (decode) is a GEMV over groups of 4 rows; more tokens run a register-blocked
 * tile (4 rows x up to 2 tokens) over blocks of tokens whose activations fit in L2, so each
 * 4-row slice of W (4 * kp bytes) is read from memory once per token block and reused from
 * L1 for every token of the block.
 *
 * ISA: scalar, AVX2 (maddubs with the sign trick), AVX-512 BW (the same, 64 bytes at a time)
 * and AVX-512 VNNI (one vpdpbusd per 64 bytes, row and token). The level follows weir_cpu_isa() (WEIR_CPU_ISA lowers it);
 * VNNI is used when the CPU has it, the level is avx512, and WEIR_CPU_ISA is not exactly
 * "avx512" (WEIR_CPU_ISA=avx512vnni or unset selects it).
 *
 * Threading: work splits over output rows; weir_q8_matmul_chunk has the weir_parallel_fn
 * signature. The kernel keeps no state: any number of calls may run at once. y must not
 * alias the inputs. */
#ifndef WEIR_KERNELS_CPU_MATMUL_Q8_H
#define WEIR_KERNELS_CPU_MATMUL_Q8_H

#include <stdint.h>

/* Activation block (columns per activation scale). */
#define WEIR_Q8_BLOCK 32
/* Rows (weights and activations) are padded to a multiple of this many columns, and stored
 * interleaved within each such chunk (see weir_q8_stored_pos). */
#define WEIR_Q8_ROW_ALIGN 256
/* Bytes of quantized activations a token block of the int8 and int4 GEMMs may occupy: it
 * stays in L2 while the weight rows of a thread's share stream past it. */
#define WEIR_Q8_ACT_BLOCK_BYTES (192 * 1024)

/* Where column `col` (0..255) of a 256-column chunk is stored within the chunk. The chunk is
 * four 64-byte steps; in each step 4-byte lane l holds 4 columns of block l / 2, so every
 * lane of every step belongs to the same 32-column block and SIMD int32 lanes can sum a whole
 * chunk before any scale is applied: column 32 * blk + o (o < 32) is at
 * 64 * (o / 8) + 4 * (2 * blk + (o / 4) % 2) + o % 4. */
static inline int weir_q8_stored_pos(int col) {
  int blk = col >> 5, o = col & 31;
  return ((o >> 3) << 6) | ((2 * blk + ((o >> 2) & 1)) << 2) | (o & 3);
}

typedef enum weir_q8_isa {
  WEIR_Q8_ISA_SCALAR = 0,
  WEIR_Q8_ISA_AVX2 = 1,
  WEIR_Q8_ISA_AVX512 = 2,
  WEIR_Q8_ISA_AVX512_VNNI = 3,
} weir_q8_isa;

/* The path the kernels take now (decided on first use, see above). Thread-safe. */
weir_q8_isa weir_q8_isa_current(void);
/* "scalar", "avx2", "avx512", "avx512vnni". */
const char *weir_q8_isa_name(weir_q8_isa isa);

/* Padded row length for `cols` columns and a group size (0 = per channel): a multiple of
 * WEIR_Q8_ROW_ALIGN (and so of the group). Returns 0 for an invalid group. */
int64_t weir_q8_padded_cols(int64_t cols, int64_t group);

/* Copies a row of kp natural-order int8 values to the stored order, XOR-ing each byte with
 * `bias` (0x80 for weights, 0 for activations). */
void weir_q8_interleave(const int8_t *natural, uint8_t *stored, int64_t kp, uint8_t bias);

/* Symmetric round-to-nearest quantization of x[0..n) into kp (>= n, a multiple of `group`)
 * int8 values in [-127, 127] with kp / group f32 scales: d = max|x| / 127 over each group,
 * q = round(x / d); columns n..kp-1 are zero. A group of zeros has d = 0. A non-finite value
 * makes its group's d NaN (so results carry the NaN). Pure, thread-safe. */
void weir_q8_quantize(const float *x, int64_t n, int64_t kp, int64_t group, int8_t *q,
                      float *d);

/* Floats the SIMD paths may read past the end of the wd and xd arrays (the values are
 * unused, the memory must be readable): allocate that many more. */
#define WEIR_Q8_SCALE_PAD 8

/* One activation row for the kernels: weir_q8_quantize(x, n, kp, WEIR_Q8_BLOCK, ...) written
 * straight into the stored order (the same values, bit for bit; AVX2 or AVX-512 when the
 * kernels use them). xq gets kp bytes, xd kp / 32 scales. Pure, thread-safe. */
void weir_q8_quantize_act(const float *x, int64_t n, int64_t kp, int8_t *xq, float *xd);

typedef struct weir_q8_matmul_args {
  const uint8_t *wq; /* [rows][kp], q + 128, stored order */
  const float *wd;   /* [rows][kp / group] (+ WEIR_Q8_SCALE_PAD readable floats) */
  int64_t rows;
  int64_t kp;        /* multiple of WEIR_Q8_ROW_ALIGN */
  int64_t group;     /* multiple of 32 dividing kp */
  const int8_t *xq;  /* [n_tokens][kp], stored order */
  const float *xd;   /* [n_tokens][kp / 32] (+ WEIR_Q8_SCALE_PAD readable floats) */
  int64_t n_tokens;
  float *y;          /* [n_tokens][rows] */
} weir_q8_matmul_args;

/* Computes y[t][r] for every token and row_begin <= r < row_end. */
void weir_q8_matmul_rows(const weir_q8_matmul_args *a, int64_t row_begin, int64_t row_end);
/* weir_parallel_fn adapter: arg is a const weir_q8_matmul_args *, [begin, end) are rows. */
void weir_q8_matmul_chunk(void *arg, int64_t begin, int64_t end, int thread);

#endif
