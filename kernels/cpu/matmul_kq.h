/* weir CPU kernels: y[t] = W x[t] with W in its GGUF block types, read in place.
 *
 * Weights stay in the file's own blocks: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL (blocks of 32)
 * and Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS (super-blocks of 256); a row is the file's row,
 * byte for byte (layouts in weir/tensor.h). The kernels work on tiles of 256 columns (one
 * super-block, or eight 32-blocks). Each tile is decoded in registers into 256 unsigned bytes
 * u, in natural column order, and 16 pairs of f32 (sw, mw), one per 16 columns, such that
 *     w[k] = sw[k / 16] * u[k] + mw[k / 16]
 * (Q4_K: sw = d * sc, mw = -dmin * m; Q6_K: sw = d * sc, mw = -32 sw; Q8_0: u = q + 128,
 * mw = -128 d; IQ4: u = codebook value + 128; ...). Every format decodes exactly to this form
 * (the integer parts are exact; sw, mw are the products the format's definition names).
 *
 * Activations are quantized once per call and token (weir_kq_quantize_act) in the same
 * natural order: int8 q with one f32 scale per 256 columns for the K-types and IQ4_XS
 * (Q8_K-style) or per 32 columns for the 32-block types (Q8_0-style), kept per 16 columns as
 * xd16, plus xs16 = xd * (sum of q over the 16 columns) for the offset term. Then
 *     y = sum over tiles and 16-column groups g: sw[g] xd16[g] (sum u q) + mw[g] xs16[g].
 * The integer sums run on int8 instructions: AVX-512 VNNI vpdpbusd (unsigned u x signed q),
 * AVX2 vpmaddubsw + vpmaddwd (with the sign trick for the types whose u exceeds 127), or
 * portable C; weir_cpu_isa() picks the level at each call (WEIR_CPU_ISA lowers it, tests force
 * it with weir_cpu_isa_set()). An AVX-512 level without VNNI runs the AVX2 code.
 *
 * One token is a GEMV that streams each row once. More tokens run token blocks of up to 8
 * against row blocks that stay in L2, decoding each weight tile once per token block.
 *
 * Threading: work splits over rows; weir_kq_matmul_chunk has the weir_parallel_fn signature.
 * Nothing keeps state; calls may run concurrently. y must not alias the inputs. */
#ifndef WEIR_KERNELS_CPU_MATMUL_KQ_H
#define WEIR_KERNELS_CPU_MATMUL_KQ_H

#include <stddef.h>
#include <stdint.h>

#include "weir/tensor.h"

#define WEIR_KQ_TILE 256

/* 1 when the kernels run weights of type t. */
int weir_kq_supported(weir_dtype t);
/* The types above as a WEIR_DTYPE_BIT mask. */
uint64_t weir_kq_dtypes(void);

/* Columns of the activation scale for weight type t: 256 (K-types, IQ4_XS) or 32. */
int weir_kq_act_block(weir_dtype t);

/* Tiles of a row of `cols` columns: ceil(cols / 256). */
static inline int64_t weir_kq_tiles(int64_t cols) {
  return (cols + WEIR_KQ_TILE - 1) / WEIR_KQ_TILE;
}

/* Bytes of the quantized activations of n_tokens rows of `cols` columns: per token
 * tiles * 256 int8 then tiles * 16 f32 xd16 and tiles * 16 f32 xs16 (64-byte aligned parts
 * when the base is). */
size_t weir_kq_act_bytes(int64_t cols, int64_t n_tokens);

/* The quantized activations of one call: token t's q at q + t * tiles * 256, its xd16 and
 * xs16 at d16 / s16 + t * tiles * 16. Columns past `cols` hold zeros. */
typedef struct weir_kq_act {
  int64_t tiles;
  int8_t *q;
  float *d16;
  float *s16;
} weir_kq_act;

/* Lays out a weir_kq_act over buf (weir_kq_act_bytes(cols, n_tokens) bytes). */
void weir_kq_act_init(weir_kq_act *a, void *buf, int64_t cols, int64_t n_tokens);

/* Quantizes token t's row x[0..cols) for weight type `t`: per block of weir_kq_act_block(t)
 * columns d = max|x| / 127, q = round-to-nearest(x * 127 / max|x|). A non-finite input makes
 * its block's scale NaN (the results carry it). Pure, thread-safe. */
void weir_kq_quantize_act(weir_dtype type, const float *x, int64_t cols,
                          const weir_kq_act *a, int64_t t);

/* Row layouts the kernels read.
 * WEIR_KQ_FILE: the file's blocks, byte for byte.
 * WEIR_KQ_X16 (Q8_0, Q4_K, Q5_K rows of a multiple of 512 columns, Q6_K of 256; the same
 * bytes per row): per group of 16 lanes (a lane: a 32-column block; Q6_K a 16-column
 * sub-block), the group's scales, then the values reordered so that one vpdpbusd over 64
 * bytes adds 4 columns of each of the 16 lanes: a block's dot product completes in its int32
 * lane after 8 (Q6_K 4), and the f32 scaling runs once per group (in the file's layout a
 * 64-byte vector holds two blocks, and every vector needs its own conversion and scaling: 2 to
 * 2.5x the vector instructions per weight in prefill). Value (c, l, i) is lane l's column
 * 4c + i; "byte o" below is o = 4l + i of a 64-byte row of the value area.
 *   Q8_0: 16 f16 scales (32 bytes), then 8 x 64 bytes: q + 128 of (c, l, i) at 64c + o.
 *   Q4_K: the two super-blocks' 16-byte heads (d, dmin, the 12 scale bytes) as the file has
 *         them, then 4 x 64 bytes: at 64c + o (c, l, i) in the low nibble, (c + 4, l, i) in
 *         the high one (lane l is columns 32l..32l+31 of the 512; l / 8 its super-block).
 *   Q5_K: as Q4_K, then 8 x 8 bytes: bit o of the 64-bit word c is the 5th bit of (c, l, i).
 *   Q6_K: the 16 int8 scales and the f16 d (18 bytes), then 2 x 64 bytes: at 64c + o the low
 *         4 bits of (c, l, i) low and of (c + 2, l, i) high, then 64 bytes: at o the high 2
 *         bits of (c, l, i) in bits 2c, 2c + 1.
 * Their activations: see weir_kq_quantize_act_x16. */
typedef enum weir_kq_layout { WEIR_KQ_FILE = 0, WEIR_KQ_X16 = 1 } weir_kq_layout;

/* 1 when rows of type t and `cols` columns can take WEIR_KQ_X16 (Q8_0, Q4_K, Q5_K: a
 * multiple of 512 columns; Q6_K: of 256). */
int weir_kq_x16_fits(weir_dtype t, int64_t cols);
/* 1 when the path weir_kq_matmul_rows takes now runs WEIR_KQ_X16 at full speed (AVX-512
 * VNNI); the other paths read it too, through portable C. */
int weir_kq_x16_preferred(void);
/* Rewrites one row of type t and `cols` columns (weir_kq_x16_fits) from the file's layout at
 * src into WEIR_KQ_X16 at dst (row_bytes each; they may not overlap). Exact. */
void weir_kq_x16_pack_row(weir_dtype t, const uint8_t *src, uint8_t *dst, int64_t cols);
/* Token t's activations for WEIR_KQ_X16 weights of type `type`, in the buffer of
 * weir_kq_act_init: the int8 q of each group of G columns (512; Q6_K 256) in the weights'
 * order (q + t * tiles * 256 + G g: byte 64c + 4l + i is column (G / 16) l + 4c + i), and per
 * group at d16 / s16 + (t * tiles + g * G / 256) * 16, one entry per lane l:
 *   Q8_0: d16 the block's scale; s16 (as int32, not f32) -128 * (sum of its q);
 *   K-types: d16 the scale of its 256 columns; s16 that scale * (sum of the lane's q).
 * The scales and q are those weir_kq_quantize_act makes for the type. */
void weir_kq_quantize_act_x16(weir_dtype type, const float *x, int64_t cols,
                              const weir_kq_act *a, int64_t t);
/* Row `row` of a WEIR_KQ_X16 weight of type t as f32 ([cols]). */
void weir_kq_x16_dequant_row(weir_dtype t, const uint8_t *row, int64_t cols, float *out);

typedef struct weir_kq_matmul_args {
  weir_dtype type;
  weir_kq_layout layout; /* WEIR_KQ_FILE unless the rows were rewritten */
  const uint8_t *w;   /* [rows] rows of row_bytes, the GGUF blocks */
  size_t row_bytes;   /* weir_dtype_row_bytes(type, cols) or a longer stride */
  int64_t rows, cols; /* cols a multiple of the type's block */
  weir_kq_act act;    /* quantized for `type` */
  int64_t n_tokens;
  float *y;           /* [n_tokens][rows] */
} weir_kq_matmul_args;

/* Computes y[t][r] for every token and row_begin <= r < row_end. */
void weir_kq_matmul_rows(const weir_kq_matmul_args *a, int64_t row_begin, int64_t row_end);
/* weir_parallel_fn adapter: arg is a const weir_kq_matmul_args *, [begin, end) are rows. */
void weir_kq_matmul_chunk(void *arg, int64_t begin, int64_t end, int thread);

/* Row `row` (row_bytes bytes of type t) as f32 ([cols]), through the kernels' own decoding
 * (sw * u + mw): the embedding lookup. Returns 0, or -1 for an unsupported type. */
int weir_kq_dequant_row(weir_dtype type, const void *row, int64_t cols, float *out);

/* AMX-INT8 for WEIR_KQ_X16 calls of 16 tokens or more on the AVX-512 VNNI path
 * (matmul_kq_amx.h): 1 when such a call uses it now. On by default where the CPU has
 * AMX-INT8 and the OS grants the process XTILEDATA; WEIR_CPU_ISA set to anything but "amx"
 * turns it off, as it lowers the other levels (and a level below AVX-512 never runs it). */
int weir_kq_amx_enabled(void);
/* Tests and benchmarks: on = 1 turns AMX on (returns -1 and changes nothing where it is not
 * available), on = 0 off; returns 0. Must not race with running kernels. */
int weir_kq_amx_set(int on);

/* "scalar", "avx2", "avx512vnni": the path weir_kq_matmul_rows takes now. */
const char *weir_kq_isa_name(void);

#endif
