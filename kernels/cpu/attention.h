/* weir CPU kernels: the attention core over a paged KV cache.
 *
 * One call handles one task: a run of consecutive queries of one sequence and the group of
 * query heads that share one KV head (grouped-query attention). It walks the sequence's
 * block table once, converting each needed K/V block of that KV head to f32 a single time
 * for every query row of the task, and keeps an online softmax (running max m, running sum
 * l, f32 accumulator) per row, updated once per tile of 128 keys (several blocks; tiles at
 * multiples of 128 positions, so a row's result is bit-identical whichever other rows share
 * its task): acc = sum_j exp(s_j - m) v_j, out = acc / l with
 * s_j = scale * q . k_j, over the positions j <= the query's position (causal). With a
 * sliding window W only positions j > pos - W count, and blocks wholly before the first
 * query's window are not read (their block-table entries may be stale); with a soft-cap c
 * each s_j becomes c * tanh(s_j / c) first.
 *
 * The kernel knows nothing of the pool's overall layout beyond what the args give: block b
 * of the sequence starts at kv_base + block_table[b] * block_bytes; within it this KV
 * head's K row of token o (0 <= o < block_size) sits at k_offset + o * token_stride and its
 * V row at v_offset + o * token_stride, each head_dim values of f32, f16 or int8. An int8
 * row is symmetric: value d is row[d] * scale, with the row's f32 scale at k_scale_offset +
 * 4 * o (K) or v_scale_offset + 4 * o (V) in the same block.
 *
 * Thread-safety: reads q and the cache, writes only its own rows of out and its scratch;
 * tasks with distinct (sequence, KV head, query range) may run concurrently. */
#ifndef WEIR_KERNELS_CPU_ATTENTION_H
#define WEIR_KERNELS_CPU_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

typedef struct weir_attn_cpu_args {
  /* q of the task's first query and first head of the group: q[i * q_stride + g * head_dim
   * + d] is query i, group head g. out has the same layout. */
  const float *q;
  float *out;
  int64_t q_stride;  /* floats from one token's row to the next (n_heads * head_dim) */
  int32_t q_len;     /* queries in this task (>= 1) */
  int32_t n_group;   /* query heads sharing the KV head (>= 1) */
  int32_t head_dim;
  int32_t first_pos; /* position of the first query; query i is at first_pos + i and sees
                        positions 0 .. first_pos + i */
  const int32_t *block_table; /* the sequence's blocks, covering every position seen */
  int32_t block_size;
  const uint8_t *kv_base;
  size_t block_bytes;
  size_t k_offset, v_offset, token_stride; /* bytes, see above */
  int kv_f16;        /* 1: the cache holds f16; 0: f32 (unless kv_i8) */
  int kv_i8;         /* 1: the cache holds int8 rows with one f32 scale per row */
  size_t k_scale_offset, v_scale_offset; /* bytes, int8 only, see above */
  float scale;
  int32_t window;    /* > 0: sliding window (see above); 0: whole causal context */
  float softcap;     /* > 0: logit soft-cap; 0: none */
  float *scratch;    /* weir_attn_cpu_scratch_floats() floats, 64-byte aligned is best */
} weir_attn_cpu_args;

/* Floats of scratch one task needs. */
size_t weir_attn_cpu_scratch_floats(int32_t q_len, int32_t n_group, int32_t head_dim,
                                    int32_t block_size);

/* Runs the task. The caller has checked the block table against the pool. */
void weir_attn_cpu_run(const weir_attn_cpu_args *a);

#endif
