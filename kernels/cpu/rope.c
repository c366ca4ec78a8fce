/* RoPE (see rope.h). */
#include "rope.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Pairs handled per stack buffer; longer rot_dim is processed in pieces. */
#define ROPE_PAIRS 128

/* Rotates pairs [i0, i1) of every head of one token row by cs/sn (indexed from i0). Plain C
 * the compiler vectorises, with no FMA contraction at the baseline ISA: the products round
 * as they always did, so every path gives the same bits. */
static inline void rotate_row(float *row, int32_t n_heads, int32_t head_dim, int32_t half,
                              int32_t i0, int32_t i1, const float *cs, const float *sn,
                              int style) {
  for (int32_t h = 0; h < n_heads; h++) {
    float *v = row + (int64_t)h * head_dim;
    if (style == WEIR_KROPE_NEOX) {
      for (int32_t i = i0; i < i1; i++) {
        float x0 = v[i], x1 = v[i + half], c = cs[i - i0], s = sn[i - i0];
        v[i] = x0 * c - x1 * s;
        v[i + half] = x0 * s + x1 * c;
      }
    } else {
      for (int32_t i = i0; i < i1; i++) {
        float x0 = v[2 * i], x1 = v[2 * i + 1], c = cs[i - i0], s = sn[i - i0];
        v[2 * i] = x0 * c - x1 * s;
        v[2 * i + 1] = x0 * s + x1 * c;
      }
    }
  }
}

/* base^(-2i/rot_dim): the same expression (and so the same double) everywhere. */
static inline double base_freq(float freq_base, int32_t i, int32_t rot_dim) {
  return pow((double)freq_base, -2.0 * i / (double)rot_dim);
}

void weir_rope_rows(float *x, const int32_t *positions, int64_t t0, int64_t t1, int32_t n_heads,
                    int32_t head_dim, int32_t rot_dim, float freq_base, float freq_scale,
                    int style) {
  const int32_t half = rot_dim / 2;
  double fr[ROPE_PAIRS];
  float cs[ROPE_PAIRS], sn[ROPE_PAIRS];
  for (int32_t i0 = 0; i0 < half; i0 += ROPE_PAIRS) {
    int32_t i1 = i0 + ROPE_PAIRS < half ? i0 + ROPE_PAIRS : half;
    for (int32_t i = i0; i < i1; i++) fr[i - i0] = base_freq(freq_base, i, rot_dim);
    for (int64_t t = t0; t < t1; t++) {
      double p = (double)positions[t] * (double)freq_scale;
      for (int32_t i = i0; i < i1; i++) {
        double theta = p * fr[i - i0];
        cs[i - i0] = (float)cos(theta);
        sn[i - i0] = (float)sin(theta);
      }
      rotate_row(x + t * (int64_t)n_heads * head_dim, n_heads, head_dim, half, i0, i1, cs, sn,
                 style);
    }
  }
}

/* ---- the step's table ------------------------------------------------------------------ */

static int same_f32(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

/* The parameter sets are equal (positions aside). */
static int same_params(const weir_rope_slot *s, const weir_rope_params *p) {
  if (!s->freq || s->p.rot_dim != p->rot_dim || !s->p.inv_freq != !p->inv_freq) return 0;
  if (!p->inv_freq) return same_f32(s->p.freq_base, p->freq_base) &&
                           same_f32(s->p.freq_scale, p->freq_scale);
  return same_f32(s->p.mscale, p->mscale) &&
         memcmp(s->inv_key, p->inv_freq, sizeof(float) * (size_t)(p->rot_dim / 2)) == 0;
}

static void slot_free(weir_rope_slot *s) {
  free(s->inv_key);
  free(s->pos);
  free(s->freq);
  free(s->cs);
  free(s->sn);
  memset(s, 0, sizeof *s);
}

/* Grows *p to hold n elements of size sz; 0 on success, -1 (nothing changed) when out of
 * memory. */
static int grow(void **p, size_t n, size_t sz) {
  void *q = realloc(*p, n * sz);
  if (!q) return -1;
  *p = q;
  return 0;
}

weir_rope_slot *weir_rope_cache_get(weir_rope_cache *c, const int32_t *positions,
                                    int64_t n_tokens, const weir_rope_params *p, int *fill) {
  *fill = 0;
  if (!c || !positions || !p || n_tokens <= 0 || p->rot_dim <= 0 || p->rot_dim % 2 != 0)
    return NULL;
  const int32_t half = p->rot_dim / 2;
  if (n_tokens > WEIR_ROPE_TABLE_MAX_PAIRS / half) return NULL;
  c->clock++;
  const size_t pos_bytes = sizeof(int32_t) * (size_t)n_tokens;
  /* A hit: the same parameters and the same positions (compared by value: the host may
   * reuse one positions buffer for every step). */
  for (int k = 0; k < WEIR_ROPE_CACHE_SLOTS; k++) {
    weir_rope_slot *s = &c->slot[k];
    if (s->valid && s->n_tokens == n_tokens && same_params(s, p) &&
        memcmp(s->pos, positions, pos_bytes) == 0) {
      s->used = c->clock;
      return s;
    }
  }
  /* A miss: the least recently used slot with these parameters (its frequencies stay),
   * else an unused slot, else the least recently used one. */
  weir_rope_slot *v = NULL;
  for (int k = 0; k < WEIR_ROPE_CACHE_SLOTS; k++) {
    weir_rope_slot *s = &c->slot[k];
    if (same_params(s, p) && (!v || s->used < v->used)) v = s;
  }
  for (int k = 0; !v && k < WEIR_ROPE_CACHE_SLOTS; k++)
    if (!c->slot[k].freq) v = &c->slot[k];
  if (!v) {
    v = &c->slot[0];
    for (int k = 1; k < WEIR_ROPE_CACHE_SLOTS; k++)
      if (c->slot[k].used < v->used) v = &c->slot[k];
  }
  const int keep_freq = same_params(v, p);
  v->valid = 0;
  v->used = c->clock;
  if ((size_t)n_tokens > v->cap_tokens || half > v->cap_half) {
    size_t rows = (size_t)n_tokens > v->cap_tokens ? (size_t)n_tokens : v->cap_tokens;
    int32_t pairs = half > v->cap_half ? half : v->cap_half;
    if (grow((void **)&v->pos, rows, sizeof(int32_t)) ||
        grow((void **)&v->cs, rows * (size_t)pairs, sizeof(float)) ||
        grow((void **)&v->sn, rows * (size_t)pairs, sizeof(float)) ||
        grow((void **)&v->freq, (size_t)pairs, sizeof(double)) ||
        grow((void **)&v->inv_key, (size_t)pairs, sizeof(float)))
      goto free_slot;
    v->cap_tokens = rows;
    v->cap_half = pairs;
  }
  memcpy(v->pos, positions, pos_bytes);
  v->n_tokens = n_tokens;
  if (!keep_freq) {
    v->p = *p;
    if (p->inv_freq) {
      memcpy(v->inv_key, p->inv_freq, sizeof(float) * (size_t)half);
      v->p.inv_freq = v->inv_key; /* the copy, not the caller's array */
      for (int32_t i = 0; i < half; i++) v->freq[i] = (double)p->inv_freq[i];
    } else {
      for (int32_t i = 0; i < half; i++) v->freq[i] = base_freq(p->freq_base, i, p->rot_dim);
    }
  }
  *fill = 1;
  return v;
free_slot:
  slot_free(v);
  return NULL;
}

void weir_rope_slot_fill(weir_rope_slot *s, int64_t t0, int64_t t1) {
  const int32_t half = s->p.rot_dim / 2;
  const int table = s->p.inv_freq != NULL;
  /* The direct kernels' arithmetic: position * freq_scale (base form) or the position alone
   * (x 1.0 is exact), cos and sin in double, times mscale (x 1.0 in the base form). */
  const double ps = table ? 1.0 : (double)s->p.freq_scale;
  const double m = table ? (double)s->p.mscale : 1.0;
  for (int64_t t = t0; t < t1; t++) {
    const double p = (double)s->pos[t] * ps;
    float *cs = s->cs + t * half, *sn = s->sn + t * half;
    for (int32_t i = 0; i < half; i++) {
      double theta = p * s->freq[i];
      cs[i] = (float)(cos(theta) * m);
      sn[i] = (float)(sin(theta) * m);
    }
  }
}

void weir_rope_slot_done(weir_rope_slot *s) { s->valid = 1; }

void weir_rope_apply(float *x, const weir_rope_slot *s, int64_t t0, int64_t t1, int32_t n_heads,
                     int32_t head_dim, int style) {
  const int32_t half = s->p.rot_dim / 2;
  for (int64_t t = t0; t < t1; t++)
    rotate_row(x + t * (int64_t)n_heads * head_dim, n_heads, head_dim, half, 0, half,
               s->cs + t * half, s->sn + t * half, style);
}

void weir_rope_cache_free(weir_rope_cache *c) {
  if (!c) return;
  for (int k = 0; k < WEIR_ROPE_CACHE_SLOTS; k++) slot_free(&c->slot[k]);
  c->clock = 0;
}
