/* The semantic layer's decision and its bucket format (semantic.h). */
#include "http/semantic.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BUCKET_MAGIC "WSB1"
#define Z_95 1.6448536269514722 /* one-sided 95% */

static int bin_of(float sim) {
  if (!(sim > 0)) return 0;
  int b = (int)(sim * WEIR__SEM_BINS);
  return b >= WEIR__SEM_BINS ? WEIR__SEM_BINS - 1 : b;
}

double weir__sem_upper_bound(double bad, double n, double z) {
  if (n <= 0) return 1.0;
  double p = bad / n, z2 = z * z;
  double centre = p + z2 / (2 * n);
  double half = z * sqrt(p * (1 - p) / n + z2 / (4 * n * n));
  double ub = (centre + half) / (1 + z2 / n);
  return ub > 1 ? 1 : ub;
}

weir__sem_verdict weir__sem_decide(const weir__sem_calib *g, const weir__sem_entry *e,
                                   float sim, double delta, double explore, double u,
                                   double *upper) {
  double n = 0, bad = 0;
  if (upper) *upper = 1.0;
  /* The evidence is what was observed at similarities a little below sim, in
   * [sim - WEIR__SEM_WINDOW, sim]: a nearer request is at least as likely to want the same
   * answer, so that rate bounds the one at sim; evidence from higher similarities says
   * nothing about sim, and none is taken from there. The entry's own threshold: never at or
   * below a similarity where it was wrong. */
  const float lo = sim - (float)WEIR__SEM_WINDOW;
  for (uint32_t i = 0; i < e->num_obs && i < WEIR__SEM_MAX_OBS; i++) {
    if (!e->obs_ok[i]) {
      if (e->obs_sim[i] >= sim) return WEIR__SEM_REFUSE;
      if (e->obs_sim[i] >= lo) bad += WEIR__SEM_OWN_WEIGHT;
    }
    if (e->obs_sim[i] >= lo && e->obs_sim[i] <= sim) n += WEIR__SEM_OWN_WEIGHT;
  }
  /* Pooled evidence in the same window, by bins of 1/WEIR__SEM_BINS (sim's own bin holds a
   * little above sim too). */
  for (int b = bin_of(lo); b <= bin_of(sim); b++) {
    n += g->n[b];
    bad += g->wrong[b];
  }
  double ub = weir__sem_upper_bound(bad, n, Z_95);
  if (upper) *upper = ub;
  if (ub > delta) return WEIR__SEM_REFUSE;
  return u < explore ? WEIR__SEM_EXPLORE : WEIR__SEM_SERVE;
}

void weir__sem_observe(weir__sem_calib *g, weir__sem_entry *e, float sim, int correct) {
  if (g) {
    int b = bin_of(sim);
    g->n[b]++;
    if (!correct) g->wrong[b]++;
  }
  if (e) {
    uint32_t i = e->num_obs < WEIR__SEM_MAX_OBS ? e->num_obs : 0;
    if (e->num_obs >= WEIR__SEM_MAX_OBS) {
      /* Keep the latest: shift the oldest out. */
      memmove(e->obs_sim, e->obs_sim + 1, sizeof(float) * (WEIR__SEM_MAX_OBS - 1));
      memmove(e->obs_ok, e->obs_ok + 1, WEIR__SEM_MAX_OBS - 1);
      i = WEIR__SEM_MAX_OBS - 1;
    } else {
      e->num_obs++;
    }
    e->obs_sim[i] = sim;
    e->obs_ok[i] = correct ? 1 : 0;
  }
}

int weir__sem_nearest(const weir__sem_bucket *b, const float *v, float *sim) {
  int best = -1;
  float bs = -2;
  for (int i = 0; i < b->num; i++) {
    const float *x = b->e[i].vec;
    double d = 0;
    for (int32_t k = 0; k < b->dim; k++) d += (double)x[k] * v[k];
    if (d > bs) {
      bs = (float)d;
      best = i;
    }
  }
  if (sim) *sim = bs;
  return best;
}

void weir__sem_bucket_free(weir__sem_bucket *b) {
  for (int i = 0; i < b->num; i++) free(b->e[i].vec);
  free(b->e);
  b->e = NULL;
  b->num = 0;
}

int weir__sem_bucket_add(weir__sem_bucket *b, const char *key, const float *vec) {
  float *v = malloc(sizeof(float) * (size_t)b->dim);
  if (!v) return -1;
  memcpy(v, vec, sizeof(float) * (size_t)b->dim);
  if (b->num >= WEIR__SEM_MAX_ENTRIES) {
    free(b->e[0].vec);
    memmove(b->e, b->e + 1, sizeof *b->e * (size_t)(b->num - 1));
    b->num--;
  } else {
    weir__sem_entry *n = realloc(b->e, sizeof *n * (size_t)(b->num + 1));
    if (!n) {
      free(v);
      return -1;
    }
    b->e = n;
  }
  weir__sem_entry *e = &b->e[b->num++];
  memset(e, 0, sizeof *e);
  snprintf(e->key, sizeof e->key, "%s", key);
  e->vec = v;
  return 0;
}

/* Little-endian scalars, as the exact layer's recordings. */
static void put_u32(weir_buf *o, uint32_t v) {
  char x[4] = {(char)v, (char)(v >> 8), (char)(v >> 16), (char)(v >> 24)};
  weir_buf_append(o, x, 4);
}
static void put_f32(weir_buf *o, float f) {
  uint32_t v;
  memcpy(&v, &f, 4);
  put_u32(o, v);
}
static int get_u32(const uint8_t **p, const uint8_t *end, uint32_t *v) {
  if (end - *p < 4) return -1;
  *v = (uint32_t)(*p)[0] | (uint32_t)(*p)[1] << 8 | (uint32_t)(*p)[2] << 16 |
       (uint32_t)(*p)[3] << 24;
  *p += 4;
  return 0;
}
static int get_f32(const uint8_t **p, const uint8_t *end, float *f) {
  uint32_t v;
  if (get_u32(p, end, &v)) return -1;
  memcpy(f, &v, 4);
  return isfinite(*f) ? 0 : -1;
}

void weir__sem_bucket_write(const weir__sem_bucket *b, weir_buf *out) {
  weir_buf_append(out, BUCKET_MAGIC, 4);
  put_u32(out, (uint32_t)b->dim);
  put_u32(out, (uint32_t)b->num);
  for (int i = 0; i < b->num; i++) {
    const weir__sem_entry *e = &b->e[i];
    size_t kl = strlen(e->key);
    put_u32(out, (uint32_t)kl);
    weir_buf_append(out, e->key, kl);
    for (int32_t k = 0; k < b->dim; k++) put_f32(out, e->vec[k]);
    put_u32(out, e->num_obs);
    for (uint32_t j = 0; j < e->num_obs; j++) {
      put_f32(out, e->obs_sim[j]);
      weir_buf_append(out, (const char *)&e->obs_ok[j], 1);
    }
  }
}

int weir__sem_bucket_parse(const char *data, size_t len, int32_t dim, weir__sem_bucket *out) {
  memset(out, 0, sizeof *out);
  out->dim = dim;
  if (dim <= 0 || dim > WEIR__SEM_MAX_DIM) return -1;
  if (len == 0) return 0;
  const uint8_t *p = (const uint8_t *)data, *end = p + len;
  uint32_t d, n;
  if (len < 12 || memcmp(p, BUCKET_MAGIC, 4)) return -1;
  p += 4;
  if (get_u32(&p, end, &d) || get_u32(&p, end, &n) || (int32_t)d != dim ||
      n > WEIR__SEM_MAX_ENTRIES)
    return -1;
  if (n && !(out->e = calloc(n, sizeof *out->e))) return -1;
  for (uint32_t i = 0; i < n; i++) {
    weir__sem_entry *e = &out->e[i];
    uint32_t kl, no;
    out->num = (int)i + 1; /* counted as made, so that a failure frees it */
    if (get_u32(&p, end, &kl) || kl >= WEIR__SEM_KEY_CAP || kl > (size_t)(end - p)) goto bad;
    memcpy(e->key, p, kl);
    e->key[kl] = '\0';
    p += kl;
    if ((size_t)(end - p) / 4 < (size_t)dim || !(e->vec = malloc(sizeof(float) * (size_t)dim)))
      goto bad;
    for (int32_t k = 0; k < dim; k++)
      if (get_f32(&p, end, &e->vec[k])) goto bad;
    if (get_u32(&p, end, &no) || no > WEIR__SEM_MAX_OBS) goto bad;
    e->num_obs = no;
    for (uint32_t j = 0; j < no; j++) {
      if (get_f32(&p, end, &e->obs_sim[j]) || end - p < 1) goto bad;
      e->obs_ok[j] = *p++ ? 1 : 0;
    }
  }
  if (p != end) goto bad;
  return 0;
bad:
  weir__sem_bucket_free(out);
  return -1;
}
