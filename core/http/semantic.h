/* The response cache's semantic layer: the decision whether a stored answer may be served for
 * a request that is not the same but near it (docs/response-cache.md, "Semantic layer"), and
 * the bucket of candidates it decides among. Pure logic, no I/O: api_cache.c does the
 * embedding and the cache calls around it.
 *
 * The decision, in the spirit of vCache (Schroeder et al., 2025): never one global similarity
 * cut-off. Each stored entry carries its own observations (similarity of a later request to
 * it, and whether its answer was the right answer for that request: the live answer was the
 * same). Serving entry e at similarity s is allowed only when a one-sided 95% upper bound on
 * the wrong-hit rate near s stays at or under the configured bound delta, where the evidence
 * is what was observed at similarities in [s - WEIR__SEM_WINDOW, s] (a nearer request is at
 * least as likely to want the same answer, so that rate bounds the one at s): e's own
 * observations there (each counted WEIR__SEM_OWN_WEIGHT times) plus the server's pooled
 * observations of every entry there; and never at or below a similarity where e itself was
 * once wrong. With no evidence the bound is 1:
 * the layer refuses until it has learned, and with an embedding that does not separate right
 * from wrong (random weights) the observed errors keep the bound above delta, so it goes on
 * refusing.
 *
 * Thread-safety: none inside; the caller locks the pooled calibration it shares. */
#ifndef WEIR_HTTP_SEMANTIC_H
#define WEIR_HTTP_SEMANTIC_H

#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"

#define WEIR__SEM_BINS 200         /* similarity bins over [0, 1]; a negative cosine is bin 0 */
#define WEIR__SEM_MAX_OBS 32       /* observations kept per entry (the latest) */
#define WEIR__SEM_MAX_ENTRIES 64   /* candidates kept per bucket (the latest) */
#define WEIR__SEM_MAX_DIM 8192
#define WEIR__SEM_KEY_CAP 192
#define WEIR__SEM_OWN_WEIGHT 4
#define WEIR__SEM_WINDOW 0.05      /* evidence is taken from [sim - window, sim] */

/* Pooled observations: per similarity bin, how many were seen and how many were wrong. */
typedef struct weir__sem_calib {
  uint32_t n[WEIR__SEM_BINS], wrong[WEIR__SEM_BINS];
} weir__sem_calib;

typedef struct weir__sem_entry {
  char key[WEIR__SEM_KEY_CAP]; /* the exact-layer key of its stored answer */
  float *vec;                  /* [dim], L2-normalised; owned by the bucket */
  uint32_t num_obs;
  float obs_sim[WEIR__SEM_MAX_OBS];
  uint8_t obs_ok[WEIR__SEM_MAX_OBS];
} weir__sem_entry;

/* The candidates of one scope and one set of parameters (everything in the exact key but the
 * user turn). */
typedef struct weir__sem_bucket {
  int32_t dim;
  int num;
  weir__sem_entry *e; /* [num], owned */
} weir__sem_bucket;

typedef enum weir__sem_verdict {
  WEIR__SEM_REFUSE = 0,  /* answer live (and learn from the live answer) */
  WEIR__SEM_SERVE = 1,   /* serve the entry's answer */
  WEIR__SEM_EXPLORE = 2, /* it could be served, but is answered live to keep checking */
} weir__sem_verdict;

/* A bucket from its stored bytes ("WSB1" ...; every count checked against what is left):
 * 0, or -1 when data is not a bucket of vectors of `dim` (then *out is empty). len 0 is an
 * empty bucket. */
int weir__sem_bucket_parse(const char *data, size_t len, int32_t dim, weir__sem_bucket *out);
/* Appends the bucket's bytes to out (out->oom on failure). */
void weir__sem_bucket_write(const weir__sem_bucket *b, weir_buf *out);
void weir__sem_bucket_free(weir__sem_bucket *b);
/* Adds an entry (vec copied), dropping the oldest beyond WEIR__SEM_MAX_ENTRIES; 0 or -1
 * (out of memory). */
int weir__sem_bucket_add(weir__sem_bucket *b, const char *key, const float *vec);
/* The index of the entry nearest v (cosine: both normalised), *sim its similarity; -1 when
 * the bucket is empty. */
int weir__sem_nearest(const weir__sem_bucket *b, const float *v, float *sim);

/* The decision for entry e at similarity sim (see above); *upper (may be NULL) receives the
 * bound on the wrong-hit rate it compared with delta. `u` is a uniform draw in [0, 1) that
 * turns a would-be SERVE into EXPLORE with probability explore. */
weir__sem_verdict weir__sem_decide(const weir__sem_calib *g, const weir__sem_entry *e,
                                   float sim, double delta, double explore, double u,
                                   double *upper);
/* Records one observation: that serving e at sim would have been right (correct 1) or not. */
void weir__sem_observe(weir__sem_calib *g, weir__sem_entry *e, float sim, int correct);
/* The one-sided upper confidence bound (z) on a rate of `bad` in `n` (Wilson score); 1 when n
 * is 0. */
double weir__sem_upper_bound(double bad, double n, double z);

#endif
