/* The continuous-batching scheduler. See scheduler.h for the contract and docs/scheduler.md
 * for the design. */
#include "engine/scheduler.h"

#include <stdlib.h>
#include <string.h>

struct weir_sched {
  weir_sched_config cfg;
  weir_kv_cache *kv;
  int32_t block_size;
  int32_t watermark;
  /* Both queues are kept sorted best first (see seq_before). */
  weir_sched_seq **waiting;
  int32_t num_waiting, cap_waiting;
  weir_sched_seq **running;
  int32_t num_running, cap_running;
  /* Paused sequences (flow control), sorted like the queues; never scheduled. */
  weir_sched_seq **paused;
  int32_t num_paused, cap_paused;
  uint64_t next_arrival;
  /* The current plan. */
  weir_sched_item *items;
  int32_t num_items, cap_items;
  weir_kv_copy *copies;
  weir_sched_seq **copy_owner; /* which sequence's append issued copies[i] */
  int32_t num_copies, cap_copies, cap_copy_owner;
  weir_sched_seq **preempted;
  int32_t num_preempted, cap_preempted;
  weir_sched_seq **failed;
  int32_t num_failed, cap_failed;
  int32_t budget; /* tokens left in the step being planned */
  int32_t prompt_rows; /* prompt logits rows left in the step being planned */
  weir_sched_stats stats;
};

int weir_sched_policy_parse(const char *s, weir_sched_policy *out) {
  if (!s || !*s || strcmp(s, "fcfs") == 0) {
    *out = WEIR_SCHED_FCFS;
    return WEIR_OK;
  }
  if (strcmp(s, "priority") == 0) {
    *out = WEIR_SCHED_PRIORITY;
    return WEIR_OK;
  }
  return WEIR_E_INVAL;
}

/* ---- Helpers --------------------------------------------------------------------------- */

/* Grows *arr (elements of size sz) to hold at least need; changes nothing on failure. */
static int reserve(void **arr, int32_t *cap, int64_t need, size_t sz) {
  if (need <= *cap) return WEIR_OK;
  if (need > INT32_MAX / 2) return WEIR_E_NOMEM;
  int64_t c = *cap ? *cap : 8;
  while (c < need) c *= 2;
  void *p = realloc(*arr, (size_t)c * sz);
  if (!p) return WEIR_E_NOMEM;
  *arr = p;
  *cap = (int32_t)c;
  return WEIR_OK;
}

/* The order of both queues: FCFS by arrival, or priority (lower first) then arrival. */
static int seq_before(const weir_sched *s, const weir_sched_seq *a, const weir_sched_seq *b) {
  if (s->cfg.policy == WEIR_SCHED_PRIORITY && a->priority != b->priority)
    return a->priority < b->priority;
  return a->arrival < b->arrival;
}

/* Inserts into a sorted queue whose capacity the caller has reserved. */
static void queue_insert(const weir_sched *s, weir_sched_seq **q, int32_t *n,
                         weir_sched_seq *seq) {
  int32_t i = *n;
  while (i > 0 && seq_before(s, seq, q[i - 1])) i--;
  memmove(q + i + 1, q + i, (size_t)(*n - i) * sizeof(*q));
  q[i] = seq;
  (*n)++;
}

static int queue_remove(weir_sched_seq **q, int32_t *n, const weir_sched_seq *seq) {
  for (int32_t i = 0; i < *n; i++) {
    if (q[i] == seq) {
      memmove(q + i, q + i + 1, (size_t)(*n - i - 1) * sizeof(*q));
      (*n)--;
      return 1;
    }
  }
  return 0;
}

/* Blocks a sequence of `tokens` tokens holds at most (fewer with a sliding window). */
static int64_t blocks_for(const weir_sched *s, int64_t tokens) {
  return weir_kv_cache_blocks_needed(s->kv, tokens);
}

static int seq_reserve_tokens(weir_sched_seq *seq, int64_t need) {
  return reserve((void **)&seq->tokens, &seq->cap_tokens, need, sizeof(*seq->tokens));
}

/* Cuts the token list (and everything that depends on it) to n tokens. */
static void seq_cut(weir_sched *s, weir_sched_seq *seq, int32_t n) {
  if (n >= seq->num_tokens) return;
  int32_t dropped = seq->num_tokens - n;
  seq->num_drafts = seq->num_drafts > dropped ? seq->num_drafts - dropped : 0;
  seq->num_tokens = n;
  if (seq->num_computed > n) seq->num_computed = n;
  if (seq->kv) weir_kv_seq_truncate(s->kv, seq->kv, seq->num_computed);
}

/* Offers the sequence's computed full blocks to the prefix cache. Registration can only
 * fail on bad arguments, which a live sequence never has. */
static void seq_register(weir_sched *s, weir_sched_seq *seq) {
  if (seq->kv) (void)weir_kv_seq_register(s->kv, seq->kv, seq->tokens, seq->num_computed);
}

weir_sched_seq *weir_sched_find(const weir_sched *s, uint64_t id) {
  for (int32_t i = 0; i < s->num_running; i++)
    if (s->running[i]->id == id) return s->running[i];
  for (int32_t i = 0; i < s->num_waiting; i++)
    if (s->waiting[i]->id == id) return s->waiting[i];
  for (int32_t i = 0; i < s->num_paused; i++)
    if (s->paused[i]->id == id) return s->paused[i];
  return NULL;
}

/* ---- Life cycle ------------------------------------------------------------------------ */

int weir_sched_create(const weir_sched_config *cfg, weir_kv_cache *kv, weir_sched **out) {
  if (!cfg || !kv || !out || cfg->max_num_seqs <= 0 ||
      cfg->max_num_batched_tokens < cfg->max_num_seqs ||
      (cfg->policy != WEIR_SCHED_FCFS && cfg->policy != WEIR_SCHED_PRIORITY) ||
      cfg->watermark_blocks < -1)
    return WEIR_E_INVAL;
  weir_sched *s = calloc(1, sizeof(*s));
  if (!s) return WEIR_E_NOMEM;
  s->cfg = *cfg;
  s->kv = kv;
  s->block_size = weir_kv_cache_block_size(kv);
  int32_t nb = weir_kv_cache_num_blocks(kv);
  s->watermark = cfg->watermark_blocks >= 0 ? cfg->watermark_blocks : nb / 100;
  if (s->watermark >= nb) s->watermark = nb - 1;
  *out = s;
  return WEIR_OK;
}

static void seq_destroy(weir_sched_seq *seq) {
  free(seq->tokens);
  free(seq);
}

void weir_sched_destroy(weir_sched *s) {
  if (!s) return;
  for (int32_t i = 0; i < s->num_running; i++) {
    weir_kv_seq_free(s->kv, s->running[i]->kv);
    seq_destroy(s->running[i]);
  }
  for (int32_t i = 0; i < s->num_waiting; i++) {
    weir_kv_seq_free(s->kv, s->waiting[i]->kv);
    seq_destroy(s->waiting[i]);
  }
  for (int32_t i = 0; i < s->num_paused; i++) {
    weir_kv_seq_free(s->kv, s->paused[i]->kv);
    seq_destroy(s->paused[i]);
  }
  free(s->paused);
  free(s->waiting);
  free(s->running);
  free(s->items);
  free(s->copies);
  free(s->copy_owner);
  free(s->preempted);
  free(s->failed);
  free(s);
}

int weir_sched_add(weir_sched *s, const weir_sched_seq_params *p, weir_sched_seq **out) {
  int rc;
  weir_sched_seq *seq = NULL;
  if (!s || !p || !out || !p->prompt || p->num_prompt <= 0 || p->max_tokens < 0 ||
      (p->prompt_logits && s->cfg.max_prompt_logits <= 0))
    return WEIR_E_INVAL;
  *out = NULL;
  if (blocks_for(s, (int64_t)p->num_prompt + 1) > weir_kv_cache_num_blocks(s->kv))
    return WEIR_E_NOSPACE;
  if (weir_sched_find(s, p->id)) return WEIR_E_EXISTS;
  rc = reserve((void **)&s->waiting, &s->cap_waiting, (int64_t)s->num_waiting + 1,
               sizeof(*s->waiting));
  if (rc) return rc;
  seq = calloc(1, sizeof(*seq));
  if (!seq) return WEIR_E_NOMEM;
  /* Size for the expected output (bounded, the array grows anyway) and one step of drafts. */
  int64_t hint = (int64_t)p->num_prompt + (p->max_tokens < 4096 ? p->max_tokens : 4096) + 8;
  rc = seq_reserve_tokens(seq, hint);
  if (rc) goto free_seq;
  memcpy(seq->tokens, p->prompt, (size_t)p->num_prompt * sizeof(*seq->tokens));
  seq->id = p->id;
  seq->user = p->user;
  seq->num_tokens = seq->num_prompt = p->num_prompt;
  seq->priority = p->priority;
  /* A one-token prompt has nothing to score: its only row is the first output's. */
  seq->prompt_logits = p->prompt_logits && p->num_prompt > 1;
  seq->arrival = s->next_arrival++;
  seq->state = WEIR_SEQ_WAITING;
  seq->sched_index = -1;
  queue_insert(s, s->waiting, &s->num_waiting, seq);
  *out = seq;
  return WEIR_OK;
free_seq:
  seq_destroy(seq);
  return rc;
}

int32_t weir_sched_num_waiting(const weir_sched *s) { return s->num_waiting; }
int32_t weir_sched_num_running(const weir_sched *s) { return s->num_running; }

void weir_sched_stats_get(const weir_sched *s, weir_sched_stats *out) {
  *out = s->stats;
  out->num_running = s->num_running;
  out->num_waiting = s->num_waiting;
  out->num_paused = s->num_paused;
}

int weir_sched_fork(weir_sched *s, weir_sched_seq *parent, uint64_t id, void *user,
                    weir_sched_seq **out) {
  int rc;
  weir_sched_seq *c = NULL;
  if (!s || !parent || !out || parent->state != WEIR_SEQ_RUNNING || parent->num_drafts ||
      parent->num_computed != parent->num_tokens || !parent->kv)
    return WEIR_E_INVAL;
  *out = NULL;
  if (weir_sched_find(s, id)) return WEIR_E_EXISTS;
  rc = reserve((void **)&s->running, &s->cap_running, (int64_t)s->num_running + 1,
               sizeof(*s->running));
  if (rc) return rc;
  c = calloc(1, sizeof(*c));
  if (!c) return WEIR_E_NOMEM;
  rc = seq_reserve_tokens(c, parent->cap_tokens);
  if (rc) goto free_child;
  rc = weir_kv_seq_fork(s->kv, parent->kv, &c->kv);
  if (rc) goto free_child;
  memcpy(c->tokens, parent->tokens, (size_t)parent->num_tokens * sizeof(*c->tokens));
  c->id = id;
  c->user = user;
  c->num_tokens = parent->num_tokens;
  c->num_prompt = parent->num_prompt;
  c->num_computed = parent->num_computed;
  c->num_cached_prompt = parent->num_cached_prompt;
  c->priority = parent->priority;
  c->arrival = s->next_arrival++;
  c->state = WEIR_SEQ_RUNNING;
  c->sched_index = -1;
  c->ever_admitted = 1;
  queue_insert(s, s->running, &s->num_running, c);
  *out = c;
  return WEIR_OK;
free_child:
  seq_destroy(c);
  return rc;
}

int weir_sched_add_drafts(weir_sched *s, weir_sched_seq *seq, const int32_t *drafts,
                          int32_t n) {
  if (!s || !seq || !drafts || n <= 0 || seq->state != WEIR_SEQ_RUNNING || seq->num_drafts ||
      seq->num_computed != seq->num_tokens - 1)
    return WEIR_E_INVAL;
  int rc = seq_reserve_tokens(seq, (int64_t)seq->num_tokens + n);
  if (rc) return rc;
  memcpy(seq->tokens + seq->num_tokens, drafts, (size_t)n * sizeof(*drafts));
  seq->num_tokens += n;
  seq->num_drafts = n;
  return WEIR_OK;
}

/* ---- Ending sequences ------------------------------------------------------------------ */

static void seq_finish(weir_sched *s, weir_sched_seq *seq) {
  if (seq->state == WEIR_SEQ_FINISHED) return;
  if (seq->state == WEIR_SEQ_RUNNING) queue_remove(s->running, &s->num_running, seq);
  else if (seq->state == WEIR_SEQ_PAUSED) queue_remove(s->paused, &s->num_paused, seq);
  else queue_remove(s->waiting, &s->num_waiting, seq);
  if (seq->kv) {
    seq_register(s, seq);
    weir_kv_seq_free(s->kv, seq->kv);
    seq->kv = NULL;
  }
  seq->state = WEIR_SEQ_FINISHED;
}

void weir_sched_finish(weir_sched *s, weir_sched_seq *seq) {
  if (s && seq) seq_finish(s, seq);
}

int weir_sched_abort(weir_sched *s, uint64_t id, weir_sched_seq **out) {
  weir_sched_seq *seq = weir_sched_find(s, id);
  if (out) *out = seq;
  if (!seq) return WEIR_E_NOTFOUND;
  seq_finish(s, seq);
  return WEIR_OK;
}

void weir_sched_seq_free(weir_sched *s, weir_sched_seq *seq) {
  if (!seq) return;
  seq_finish(s, seq);
  seq_destroy(seq);
}

int weir_sched_commit(weir_sched *s, weir_sched_seq *seq, int32_t num_accepted,
                      const int32_t *sampled, int32_t n) {
  /* Only a sequence whose known tokens are all computed has produced logits to sample. */
  if (!s || !seq || seq->state != WEIR_SEQ_RUNNING || seq->num_computed != seq->num_tokens ||
      num_accepted < 0 || num_accepted > seq->num_drafts || n < 0 || (n > 0 && !sampled))
    return WEIR_E_INVAL;
  int32_t keep = seq->num_tokens - (seq->num_drafts - num_accepted);
  int rc = seq_reserve_tokens(seq, (int64_t)keep + n);
  if (rc) return rc;
  seq_cut(s, seq, keep);
  seq->num_drafts = 0;
  seq->prompt_logits = 0; /* the prompt is computed and was scored */
  memcpy(seq->tokens + seq->num_tokens, sampled, (size_t)n * sizeof(*sampled));
  seq->num_tokens += n;
  seq_register(s, seq);
  return WEIR_OK;
}

int weir_sched_truncate(weir_sched *s, weir_sched_seq *seq, int32_t num_tokens) {
  if (!s || !seq || seq->state == WEIR_SEQ_FINISHED || num_tokens < seq->num_prompt ||
      num_tokens > seq->num_tokens)
    return WEIR_E_INVAL;
  seq_cut(s, seq, num_tokens);
  return WEIR_OK;
}

/* ---- Flow control ---------------------------------------------------------------------- */

int weir_sched_pause(weir_sched *s, weir_sched_seq *seq) {
  if (!s || !seq || seq->state == WEIR_SEQ_FINISHED) return WEIR_E_INVAL;
  if (seq->state == WEIR_SEQ_PAUSED) {
    seq->resume_pending = 0;
    return WEIR_OK;
  }
  int rc = reserve((void **)&s->paused, &s->cap_paused, (int64_t)s->num_paused + 1,
                   sizeof(*s->paused));
  if (rc) return rc;
  if (seq->state == WEIR_SEQ_RUNNING) queue_remove(s->running, &s->num_running, seq);
  else queue_remove(s->waiting, &s->num_waiting, seq);
  /* Drafts are proposed afresh after the pause. */
  seq_cut(s, seq, seq->num_tokens - seq->num_drafts);
  seq->state = WEIR_SEQ_PAUSED;
  seq->resume_pending = 0;
  queue_insert(s, s->paused, &s->num_paused, seq);
  return WEIR_OK;
}

/* Moves resumed sequences back: those without blocks to the waiting queue, those with
 * blocks into the running batch while it has room. */
static int resume_pending(weir_sched *s) {
  for (int32_t i = 0; i < s->num_paused;) {
    weir_sched_seq *seq = s->paused[i];
    if (!seq->resume_pending) {
      i++;
      continue;
    }
    weir_sched_seq ***q = seq->kv ? &s->running : &s->waiting;
    int32_t *n = seq->kv ? &s->num_running : &s->num_waiting;
    int32_t *cap = seq->kv ? &s->cap_running : &s->cap_waiting;
    if (seq->kv && s->num_running >= s->cfg.max_num_seqs) {
      i++;
      continue;
    }
    int rc = reserve((void **)q, cap, (int64_t)*n + 1, sizeof(**q));
    if (rc) return rc;
    queue_remove(s->paused, &s->num_paused, seq);
    seq->resume_pending = 0;
    seq->state = seq->kv ? WEIR_SEQ_RUNNING : WEIR_SEQ_WAITING;
    queue_insert(s, *q, n, seq);
  }
  return WEIR_OK;
}

int weir_sched_resume(weir_sched *s, weir_sched_seq *seq) {
  if (!s || !seq || seq->state == WEIR_SEQ_FINISHED) return WEIR_E_INVAL;
  if (seq->state != WEIR_SEQ_PAUSED) return WEIR_OK;
  seq->resume_pending = 1;
  return resume_pending(s);
}

/* Frees the blocks of the worst paused sequence that holds any (it will be recomputed after
 * it resumes). Returns 1 when blocks were freed. */
static int reclaim_paused(weir_sched *s) {
  for (int32_t i = s->num_paused - 1; i >= 0; i--) {
    weir_sched_seq *seq = s->paused[i];
    if (!seq->kv) continue;
    seq_register(s, seq);
    weir_kv_seq_free(s->kv, seq->kv);
    seq->kv = NULL;
    seq->num_computed = 0;
    seq->num_preemptions++;
    s->stats.num_preemptions++;
    return 1;
  }
  return 0;
}

/* ---- Planning -------------------------------------------------------------------------- */

static void plan_add_item(weir_sched *s, weir_sched_seq *seq, int32_t n) {
  weir_sched_item *it = &s->items[s->num_items];
  it->seq = seq;
  it->start = seq->num_computed;
  it->num_new_tokens = n;
  it->num_drafts = 0;
  it->num_logits = 0;
  it->num_prompt_logits = 0;
  seq->sched_index = s->num_items++;
  seq->num_computed += n;
  s->budget -= n;
  if (seq->prompt_logits) s->prompt_rows -= n;
}

/* The most tokens a chunk of seq may take: a sequence that scores its prompt needs logits on
 * every row, and the step has prompt_rows of them. */
static int32_t chunk_cap(const weir_sched *s, const weir_sched_seq *seq, int32_t n) {
  if (n > s->budget) n = s->budget;
  if (seq->prompt_logits && n > s->prompt_rows) n = s->prompt_rows;
  return n;
}

/* Takes a scheduled sequence back out of the plan: its item, its budget and its copy. */
static void plan_remove(weir_sched *s, weir_sched_seq *seq) {
  int32_t k = seq->sched_index;
  if (k < 0) return;
  const weir_sched_item *it = &s->items[k];
  seq->num_computed = it->start;
  s->budget += it->num_new_tokens;
  if (seq->prompt_logits) s->prompt_rows += it->num_new_tokens;
  weir_kv_seq_truncate(s->kv, seq->kv, it->start);
  memmove(s->items + k, s->items + k + 1, (size_t)(s->num_items - k - 1) * sizeof(*s->items));
  s->num_items--;
  for (int32_t i = k; i < s->num_items; i++) s->items[i].seq->sched_index = i;
  seq->sched_index = -1;
  for (int32_t i = 0; i < s->num_copies;) {
    if (s->copy_owner[i] == seq) {
      memmove(s->copies + i, s->copies + i + 1,
              (size_t)(s->num_copies - i - 1) * sizeof(*s->copies));
      memmove(s->copy_owner + i, s->copy_owner + i + 1,
              (size_t)(s->num_copies - i - 1) * sizeof(*s->copy_owner));
      s->num_copies--;
    } else {
      i++;
    }
  }
}

/* Preemption by recompute: the sequence gives back every block and rejoins the waiting
 * queue at its arrival position; its tokens (output included) are kept and recomputed. */
static void preempt(weir_sched *s, weir_sched_seq *seq) {
  plan_remove(s, seq);
  queue_remove(s->running, &s->num_running, seq);
  weir_kv_seq_free(s->kv, seq->kv);
  seq->kv = NULL;
  seq->num_computed = 0;
  seq_cut(s, seq, seq->num_tokens - seq->num_drafts);
  seq->state = WEIR_SEQ_WAITING;
  seq->num_preemptions++;
  s->stats.num_preemptions++;
  queue_insert(s, s->waiting, &s->num_waiting, seq);
  s->preempted[s->num_preempted++] = seq;
}

/* A sequence that needs more blocks than the whole pool holds can never run. */
static void fail_seq(weir_sched *s, weir_sched_seq *seq) {
  plan_remove(s, seq);
  seq->status = WEIR_E_NOSPACE;
  seq_finish(s, seq);
  s->stats.num_failed++;
  s->failed[s->num_failed++] = seq;
}

/* Appends n tokens' slots for a running sequence, shrinking n to what fits (never below one
 * token) and otherwise preempting the worst running sequence until it fits. Returns 1 when
 * scheduled, 0 when seq itself was preempted or failed, or a negative status. */
static int schedule_running(weir_sched *s, weir_sched_seq *seq, int32_t n) {
  for (;;) {
    weir_kv_copy copy;
    int32_t ncopy = 0;
    int rc = weir_kv_seq_append(s->kv, seq->kv, n, NULL, &copy, &ncopy);
    if (rc == WEIR_OK) {
      if (ncopy) {
        s->copies[s->num_copies] = copy;
        s->copy_owner[s->num_copies++] = seq;
      }
      /* Drafts that did not fit the budget or the blocks are dropped: a decode item always
       * ends at the end of the sequence's tokens. The KV already ends there. */
      int32_t unscheduled = seq->num_tokens - (seq->num_computed + n);
      if (seq->num_drafts && unscheduled > 0) {
        seq->num_drafts -= unscheduled;
        seq->num_tokens -= unscheduled;
      }
      plan_add_item(s, seq, n);
      return 1;
    }
    if (rc != WEIR_E_NOSPACE) return rc;
    /* Shrinking must make n strictly smaller, and every preemption removes a running
     * sequence, so this loop always ends. */
    int64_t fit = weir_kv_seq_append_capacity(s->kv, seq->kv);
    if (fit >= 1 && fit < n) {
      n = (int32_t)fit;
      continue;
    }
    if (reclaim_paused(s)) continue;
    weir_sched_seq *victim = s->running[s->num_running - 1];
    if (victim != seq) {
      preempt(s, victim);
      continue;
    }
    if (blocks_for(s, (int64_t)seq->num_computed + 1) > weir_kv_cache_num_blocks(s->kv))
      fail_seq(s, seq);
    else
      preempt(s, seq);
    return 0;
  }
}

/* Uncomputed tokens that are not drafts. */
static int32_t real_pending(const weir_sched_seq *seq) {
  return seq->num_tokens - seq->num_drafts - seq->num_computed;
}

/* Admits waiting sequences while sequences, budget and blocks last. */
static int admit_waiting(weir_sched *s) {
  int rc;
  int32_t bs = s->block_size;
  weir_sched_seq *seq = NULL;
  while (s->num_waiting > 0 && s->num_running < s->cfg.max_num_seqs && s->budget > 0) {
    seq = s->waiting[0];
    if (blocks_for(s, (int64_t)seq->num_tokens + 1) > weir_kv_cache_num_blocks(s->kv)) {
      fail_seq(s, seq);
      continue;
    }
    /* Cheap pre-check so that a sequence that cannot start does not re-run its prefix
     * lookup (and inflate the hit counters) every step. */
    if (weir_kv_cache_num_allocatable(s->kv) - s->watermark < 1) {
      if (reclaim_paused(s)) continue;
      break;
    }
    /* A sequence that scores its prompt waits, in its place, for a step with rows left. */
    if (chunk_cap(s, seq, 1) < 1) break;
    rc = weir_kv_seq_create(s->kv, &seq->kv);
    if (rc) return rc;
    int32_t cached = 0;
    /* Scoring the prompt needs the logits of every prompt row: no prefix-cache hit. */
    if (!seq->prompt_logits)
      rc = weir_kv_seq_match_prefix(s->kv, seq->kv, seq->tokens, seq->num_tokens, &cached);
    if (rc) goto free_kv;
    int64_t room = (int64_t)weir_kv_cache_num_allocatable(s->kv) - s->watermark;
    int64_t fit = room > 0 ? room * bs : 0;
    int64_t n = chunk_cap(s, seq, seq->num_tokens - cached);
    if (n > fit) n = fit;
    if (n <= 0) {
      weir_kv_seq_free(s->kv, seq->kv);
      seq->kv = NULL;
      break;
    }
    rc = weir_kv_seq_append(s->kv, seq->kv, (int32_t)n, NULL, NULL, NULL);
    if (rc) goto free_kv;
    seq->num_computed = cached;
    if (!seq->ever_admitted) {
      seq->num_cached_prompt = cached < seq->num_prompt ? cached : seq->num_prompt;
      seq->ever_admitted = 1;
    }
    queue_remove(s->waiting, &s->num_waiting, seq);
    seq->state = WEIR_SEQ_RUNNING;
    queue_insert(s, s->running, &s->num_running, seq);
    plan_add_item(s, seq, (int32_t)n);
  }
  return WEIR_OK;
free_kv:
  weir_kv_seq_free(s->kv, seq->kv);
  seq->kv = NULL;
  return rc;
}

void weir_sched_undo_step(weir_sched *s, weir_sched_out *out) {
  for (int32_t k = 0; k < s->num_items; k++) {
    weir_sched_item *it = &s->items[k];
    weir_sched_seq *seq = it->seq;
    if (seq->state != WEIR_SEQ_RUNNING) continue;
    seq->sched_index = -1;
    seq->num_computed = it->start;
    seq_cut(s, seq, seq->num_tokens - it->num_drafts);
    weir_kv_seq_truncate(s->kv, seq->kv, it->start);
  }
  /* out keeps naming the items (the engine finishes those sequences next); the plan itself
   * is over, so nothing is scheduled any more. */
  s->num_items = 0;
  s->num_copies = 0;
  (void)out;
}

int weir_sched_step(weir_sched *s, weir_sched_out *out) {
  int rc;
  if (!s || !out) return WEIR_E_INVAL;
  memset(out, 0, sizeof(*out));
  /* The previous step's forward has run: its copies are done and its tokens are in cache. */
  weir_kv_cache_copies_done(s->kv);
  for (int32_t i = 0; i < s->num_running; i++) seq_register(s, s->running[i]);

  rc = resume_pending(s);
  if (rc) return rc;
  /* Reserve every array this plan can fill, so planning cannot fail half-way for memory
   * (only the KV manager's own table growth can). */
  int64_t live = (int64_t)s->num_running + s->num_waiting;
  rc = reserve((void **)&s->items, &s->cap_items, live, sizeof(*s->items));
  if (!rc) rc = reserve((void **)&s->copies, &s->cap_copies, live, sizeof(*s->copies));
  if (!rc)
    rc = reserve((void **)&s->copy_owner, &s->cap_copy_owner, live, sizeof(*s->copy_owner));
  if (!rc) rc = reserve((void **)&s->preempted, &s->cap_preempted, live, sizeof(void *));
  if (!rc) rc = reserve((void **)&s->failed, &s->cap_failed, live, sizeof(void *));
  if (!rc) rc = reserve((void **)&s->waiting, &s->cap_waiting, live, sizeof(void *));
  if (!rc) rc = reserve((void **)&s->running, &s->cap_running, live, sizeof(void *));
  if (rc) return rc;
  s->num_items = s->num_copies = s->num_preempted = s->num_failed = 0;
  s->budget = s->cfg.max_num_batched_tokens;
  s->prompt_rows = s->cfg.max_prompt_logits;
  for (int32_t i = 0; i < s->num_running; i++) s->running[i]->sched_index = -1;

  /* 1. Decodes: one token each is reserved up front, drafts share what is left. */
  int32_t num_decodes = 0;
  for (int32_t i = 0; i < s->num_running; i++)
    if (real_pending(s->running[i]) == 1) num_decodes++;
  int32_t draft_budget = s->budget - num_decodes;
  for (int32_t i = 0; i < s->num_running;) {
    weir_sched_seq *seq = s->running[i];
    if (real_pending(seq) != 1 || seq->sched_index >= 0 || s->budget < 1) {
      i++;
      continue;
    }
    int32_t drafts = seq->num_drafts;
    if (drafts > draft_budget) drafts = draft_budget > 0 ? draft_budget : 0;
    rc = schedule_running(s, seq, 1 + drafts);
    if (rc < 0) goto undo;
    if (rc == 1) {
      draft_budget -= s->items[seq->sched_index].num_new_tokens - 1;
      i++;
    }
  }
  /* 2. Prefills already under way continue before anything new starts. */
  for (int32_t i = 0; i < s->num_running && s->budget > 0;) {
    weir_sched_seq *seq = s->running[i];
    int32_t pending = real_pending(seq);
    if (pending <= 1 || seq->sched_index >= 0 || chunk_cap(s, seq, pending) < 1) {
      i++;
      continue;
    }
    rc = schedule_running(s, seq, chunk_cap(s, seq, pending));
    if (rc < 0) goto undo;
    if (rc == 1) i++;
  }
  /* 3. New admissions, unless this step had to preempt: the pool is under pressure. */
  if (s->num_preempted == 0) {
    rc = admit_waiting(s);
    if (rc < 0) goto undo;
  }

  for (int32_t k = 0; k < s->num_items; k++) {
    weir_sched_item *it = &s->items[k];
    weir_sched_seq *seq = it->seq;
    int32_t end = it->start + it->num_new_tokens;
    if (end == seq->num_tokens) {
      it->num_drafts = seq->num_drafts;
      it->num_logits = 1 + seq->num_drafts;
    }
    /* Scoring the prompt: every row has logits, those of positions p whose next token is a
     * prompt token score it; the last row of the final chunk still samples. */
    if (seq->prompt_logits && it->start < seq->num_prompt - 1) {
      int32_t last = end < seq->num_prompt - 1 ? end : seq->num_prompt - 1;
      it->num_prompt_logits = last - it->start;
      it->num_logits = it->num_new_tokens;
    }
    /* Prefill: a chunk short of the end, or one computing more than the last known token. */
    if (it->num_logits == 0 || it->num_new_tokens - it->num_drafts > 1)
      out->num_prefill_tokens += it->num_new_tokens;
    int32_t nb = 0;
    (void)weir_kv_seq_block_table(seq->kv, &nb);
    out->num_tokens += it->num_new_tokens;
    out->num_logits += it->num_logits;
    if (it->num_new_tokens > out->max_query_len) out->max_query_len = it->num_new_tokens;
    if (end > out->max_context_len) out->max_context_len = end;
    if (nb > out->max_blocks_per_seq) out->max_blocks_per_seq = nb;
  }
  out->items = s->items;
  out->num_items = s->num_items;
  out->copies = s->copies;
  out->num_copies = s->num_copies;
  out->preempted = s->preempted;
  out->num_preempted = s->num_preempted;
  out->failed = s->failed;
  out->num_failed = s->num_failed;
  s->stats.num_steps++;
  return WEIR_OK;
undo:
  weir_sched_undo_step(s, NULL);
  /* Preempted and failed sequences stay so: the queues are consistent, and the engine
   * still has to deliver the failures. */
  out->failed = s->failed;
  out->num_failed = s->num_failed;
  return rc;
}

int weir_sched_fill_batch(const weir_sched *s, const weir_sched_out *out,
                          const weir_sched_batch_arrays *a) {
  if (!s || !out || !a) return WEIR_E_INVAL;
  if (a->block_tables && a->block_table_stride < out->max_blocks_per_seq) return WEIR_E_INVAL;
  int32_t row = 0, lrow = 0;
  for (int32_t k = 0; k < out->num_items; k++) {
    const weir_sched_item *it = &out->items[k];
    const weir_sched_seq *seq = it->seq;
    int32_t nb = 0;
    const int32_t *table = weir_kv_seq_block_table(seq->kv, &nb);
    /* The KV cache maps positions to slots (the step appended every new token's). */
    if (a->slot_mapping) {
      int rc = weir_kv_seq_slots(s->kv, seq->kv, it->start, it->num_new_tokens,
                                 a->slot_mapping + row);
      if (rc != WEIR_OK) return rc;
    }
    if (a->query_start_loc) a->query_start_loc[k] = row;
    if (a->context_lens) a->context_lens[k] = it->start + it->num_new_tokens;
    if (a->block_tables) {
      int32_t *dst = a->block_tables + (size_t)k * a->block_table_stride;
      memcpy(dst, table, (size_t)nb * sizeof(*dst));
      memset(dst + nb, 0, (size_t)(a->block_table_stride - nb) * sizeof(*dst));
    }
    for (int32_t j = 0; j < it->num_new_tokens; j++, row++) {
      int32_t pos = it->start + j;
      if (a->input_ids) a->input_ids[row] = seq->tokens[pos];
      if (a->positions) a->positions[row] = pos;
      if (a->logits_rows && j >= it->num_new_tokens - it->num_logits)
        a->logits_rows[lrow++] = row;
    }
  }
  if (a->query_start_loc) a->query_start_loc[out->num_items] = row;
  return WEIR_OK;
}
