/* weir CPU kernels: rotary position embedding, in place.
 *
 * x is [n_tokens][n_heads * head_dim]; for tokens [t0, t1) the first rot_dim values of each
 * head are rotated by angle positions[t] * freq_scale * freq_base^(-2i/rot_dim) for pair i:
 * NORM rotates adjacent pairs (x[2i], x[2i+1]), NEOX rotates (x[i], x[i + rot_dim/2]).
 * Values past rot_dim are left alone. rot_dim must be even and <= head_dim (the caller checks).
 * Angles are computed in double: positions reach tens of thousands of radians, where a float
 * angle would lose the low bits. Thread-safe over disjoint token ranges.
 *
 * The angles' cos and sin are the cost of RoPE on a small model (a sincos per pair, token,
 * layer and q/k call, plus a pow per pair): the table cache below computes them once per step
 * and serves every layer and both q and k from the table. The table holds exactly the floats
 * the direct kernels compute, so both paths give bit-identical results. */
#ifndef WEIR_KERNELS_CPU_ROPE_H
#define WEIR_KERNELS_CPU_ROPE_H

#include <stddef.h>
#include <stdint.h>

/* Same numbering as weir_rope_style in weir/device.h. */
#define WEIR_KROPE_NORM 0
#define WEIR_KROPE_NEOX 2

void weir_rope_rows(float *x, const int32_t *positions, int64_t t0, int64_t t1, int32_t n_heads,
                    int32_t head_dim, int32_t rot_dim, float freq_base, float freq_scale,
                    int style);

/* ---- the step's cos/sin table --------------------------------------------------------- */

/* One parameter set: either the base form (inv_freq NULL: pair i turns by
 * position * freq_scale * freq_base^(-2i/rot_dim), mscale ignored) or the frequency-table
 * form of weir_rope_rows_freqs (families.h: position * inv_freq[i], values times mscale). */
typedef struct weir_rope_params {
  int32_t rot_dim;       /* even, > 0 */
  float freq_base;       /* base form */
  float freq_scale;      /* base form */
  const float *inv_freq; /* [rot_dim / 2], or NULL for the base form; read, not kept */
  float mscale;          /* frequency-table form */
} weir_rope_params;

/* cos/sin of one step's angles for one parameter set: cs[t * half + i], sn[...] for the
 * step's token t and pair i, mscale included. Owned by its cache. */
typedef struct weir_rope_slot {
  /* key: the parameter set (inv_freq copied) and the step's positions */
  weir_rope_params p;
  float *inv_key;   /* [half] copy of inv_freq (frequency-table form) */
  int32_t *pos;     /* [n_tokens] */
  int64_t n_tokens;
  /* value */
  double *freq;     /* [half] per-pair frequency: base^(-2i/rot_dim), or inv_freq[i] */
  float *cs, *sn;   /* [n_tokens][half] */
  size_t cap_tokens; /* rows cs/sn/pos have room for */
  int32_t cap_half;  /* pairs freq/inv_key and a row have room for */
  uint64_t used;    /* LRU stamp */
  int valid;        /* 1 once every row of cs/sn is filled for this key */
} weir_rope_slot;

/* A few parameter sets (models alternate two: sliding-window layers use their own base). */
#define WEIR_ROPE_CACHE_SLOTS 4
/* A step whose table would pass this many pairs (tokens x rot_dim/2; 8 bytes each) is not
 * tabled: the caller rotates with the direct kernels, so memory stays bounded whatever the
 * context length (4 MiB per slot). */
#define WEIR_ROPE_TABLE_MAX_PAIRS ((int64_t)1 << 19)

/* Zero-initialise (= {0}) before first use. Thread-safety: one thread at a time per cache
 * (the device and attention plugins' instances are driven by one thread at a time);
 * weir_rope_slot_fill and weir_rope_apply may run in parallel over disjoint token ranges. */
typedef struct weir_rope_cache {
  weir_rope_slot slot[WEIR_ROPE_CACHE_SLOTS];
  uint64_t clock;
} weir_rope_cache;

/* The slot for these positions and parameters. *fill = 0: its table already holds them (a
 * later layer, or k after q). *fill = 1: the slot was (re)keyed and the caller must run
 * weir_rope_slot_fill over every token [0, n_tokens) and then weir_rope_slot_done before
 * the next get (until then the slot counts as empty, so an abandoned fill is redone).
 * NULL when the step is too large to table (WEIR_ROPE_TABLE_MAX_PAIRS), the parameters are
 * not valid for a table, or memory ran out: then rotate with the direct kernels. */
weir_rope_slot *weir_rope_cache_get(weir_rope_cache *c, const int32_t *positions,
                                    int64_t n_tokens, const weir_rope_params *p, int *fill);
/* Computes table rows [t0, t1) (the same formula and rounding as the direct kernels). */
void weir_rope_slot_fill(weir_rope_slot *s, int64_t t0, int64_t t1);
/* Marks a filled slot valid. */
void weir_rope_slot_done(weir_rope_slot *s);
/* Rotates tokens [t0, t1) of x ([n_tokens][n_heads * head_dim]) with the slot's table. */
void weir_rope_apply(float *x, const weir_rope_slot *s, int64_t t0, int64_t t1, int32_t n_heads,
                     int32_t head_dim, int style);
/* Frees every slot's memory; the cache is empty (and reusable) afterwards. */
void weir_rope_cache_free(weir_rope_cache *c);

#endif
