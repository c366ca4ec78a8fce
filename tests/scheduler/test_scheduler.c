/* The continuous-batching scheduler, driven by a fake token producer in place of the model:
 * batch composition and ordering, budgets, chunked prefill, preemption by recompute under a
 * tiny pool (outputs identical to an unpressured run), priorities, aborts, the prefix cache,
 * speculative drafts with rollback, forks, and the arrays handed to the attention plugin. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/scheduler.h"
#include "testutil.h"

typedef struct env {
  weir_kv_cache *kv;
  weir_sched *s;
} env;

static env mk(int32_t num_blocks, int32_t block_size, int prefix, int32_t max_seqs,
              int32_t budget, weir_sched_policy policy) {
  env e = {0};
  weir_kv_cache_params kp = {.num_blocks = num_blocks, .block_size = block_size,
                             .prefix_caching = prefix};
  WT_ASSERT_INT_EQ(weir_kv_cache_create(&kp, &e.kv), WEIR_OK);
  weir_sched_config sc = {.max_num_seqs = max_seqs, .max_num_batched_tokens = budget,
                          .policy = policy, .watermark_blocks = 0};
  WT_ASSERT_INT_EQ(weir_sched_create(&sc, e.kv, &e.s), WEIR_OK);
  return e;
}

static void env_free(env *e) {
  weir_sched_destroy(e->s);
  weir_kv_cache_destroy(e->kv);
}

static void assert_kv_ok(const env *e) {
  char why[256] = "";
  int rc = weir_kv_cache_check(e->kv, why, sizeof(why));
  if (rc != WEIR_OK) fprintf(stderr, "\n  kv invariant broken: %s\n", why);
  WT_ASSERT_INT_EQ(rc, WEIR_OK);
}

static weir_kv_stats kvstats(const env *e) {
  weir_kv_stats st;
  weir_kv_cache_stats(e->kv, &st);
  return st;
}

static weir_sched_seq *add(env *e, uint64_t id, const int32_t *prompt, int32_t n,
                           int32_t priority) {
  weir_sched_seq_params p = {.id = id, .prompt = prompt, .num_prompt = n,
                             .priority = priority, .max_tokens = 16};
  weir_sched_seq *seq = NULL;
  WT_ASSERT_INT_EQ(weir_sched_add(e->s, &p, &seq), WEIR_OK);
  return seq;
}

static int32_t *mkprompt(int32_t n, int32_t base) {
  int32_t *t = malloc((size_t)n * sizeof(*t));
  for (int32_t i = 0; i < n; i++) t[i] = base + (i * 7) % 101;
  return t;
}

/* The fake model: the next token is a function of the whole sequence so far, so a
 * recomputed sequence must reproduce exactly the tokens an undisturbed run produces. */
static int32_t next_token(const weir_sched_seq *seq) {
  uint64_t h = 1469598103934665603ULL;
  for (int32_t i = 0; i < seq->num_tokens; i++)
    h = (h ^ (uint64_t)(uint32_t)seq->tokens[i]) * 1099511628211ULL;
  return (int32_t)(h % 1000) + 10;
}

static int find_item(const weir_sched_out *o, const weir_sched_seq *seq) {
  for (int32_t k = 0; k < o->num_items; k++)
    if (o->items[k].seq == seq) return k;
  return -1;
}

/* Checks the plan against the budgets and the KV manager, filling the batch arrays the way
 * the engine will. */
static void check_plan(const env *e, const weir_sched_out *o, int32_t max_seqs,
                       int32_t budget) {
  CU_ASSERT(o->num_tokens <= budget);
  CU_ASSERT(o->num_items <= max_seqs);
  CU_ASSERT(weir_sched_num_running(e->s) <= max_seqs);
  int32_t *ids = malloc(((size_t)o->num_tokens + 1) * sizeof(int32_t));
  int32_t *pos = malloc(((size_t)o->num_tokens + 1) * sizeof(int32_t));
  int32_t *slot = malloc(((size_t)o->num_tokens + 1) * sizeof(int32_t));
  int32_t *qsl = malloc(((size_t)o->num_items + 1) * sizeof(int32_t));
  int32_t *ctx = malloc(((size_t)o->num_items + 1) * sizeof(int32_t));
  int32_t stride = o->max_blocks_per_seq + 2;
  int32_t *bt = malloc(((size_t)o->num_items * stride + 1) * sizeof(int32_t));
  int32_t *lr = malloc(((size_t)o->num_logits + 1) * sizeof(int32_t));
  weir_sched_batch_arrays a = {.input_ids = ids, .positions = pos, .slot_mapping = slot,
                               .query_start_loc = qsl, .context_lens = ctx,
                               .block_tables = bt, .block_table_stride = stride,
                               .logits_rows = lr};
  WT_ASSERT_INT_EQ(weir_sched_fill_batch(e->s, o, &a), WEIR_OK);
  int32_t sum = 0, logits = 0, li = 0;
  for (int32_t k = 0; k < o->num_items; k++) {
    const weir_sched_item *it = &o->items[k];
    const weir_sched_seq *seq = it->seq;
    WT_ASSERT_INT_EQ(seq->state, WEIR_SEQ_RUNNING);
    CU_ASSERT(it->num_new_tokens >= 1);
    WT_ASSERT_INT_EQ(qsl[k], sum);
    WT_ASSERT_INT_EQ(ctx[k], it->start + it->num_new_tokens);
    WT_ASSERT_INT_EQ(seq->num_computed, it->start + it->num_new_tokens);
    WT_ASSERT_INT_EQ(weir_kv_seq_len(seq->kv), seq->num_computed);
    int32_t nb = 0;
    const int32_t *table = weir_kv_seq_block_table(seq->kv, &nb);
    for (int32_t b = 0; b < stride; b++) WT_ASSERT_INT_EQ(bt[k * stride + b], b < nb ? table[b] : 0);
    for (int32_t j = 0; j < it->num_new_tokens; j++) {
      WT_ASSERT_INT_EQ(pos[sum + j], it->start + j);
      WT_ASSERT_INT_EQ(ids[sum + j], seq->tokens[it->start + j]);
      WT_ASSERT_INT_EQ(slot[sum + j], weir_kv_seq_slot(e->kv, seq->kv, it->start + j));
    }
    int reaches_end = it->start + it->num_new_tokens == seq->num_tokens;
    if (it->num_prompt_logits > 0) /* scoring the prompt: every row, the last samples */
      WT_ASSERT_INT_EQ(it->num_logits - it->num_prompt_logits, reaches_end ? 1 : 0);
    else
      WT_ASSERT_INT_EQ(it->num_logits, reaches_end ? 1 + it->num_drafts : 0);
    for (int32_t j = it->num_new_tokens - it->num_logits; j < it->num_new_tokens; j++)
      WT_ASSERT_INT_EQ(lr[li++], sum + j);
    sum += it->num_new_tokens;
    logits += it->num_logits;
  }
  WT_ASSERT_INT_EQ(qsl[o->num_items], sum);
  WT_ASSERT_INT_EQ(sum, o->num_tokens);
  WT_ASSERT_INT_EQ(logits, o->num_logits);
  /* Slots are unique within a step: two tokens never write the same KV. */
  for (int32_t i = 0; i < sum; i++)
    for (int32_t j = i + 1; j < sum; j++)
      if (slot[i] == slot[j]) {
        CU_FAIL("two new tokens share a slot");
        i = sum;
        break;
      }
  free(ids);
  free(pos);
  free(slot);
  free(qsl);
  free(ctx);
  free(bt);
  free(lr);
  assert_kv_ok(e);
}

/* Commits one sampled token for every item with logits; finishes sequences that reached
 * max_new output tokens. Returns the number finished. */
static int commit_all(env *e, const weir_sched_out *o, int32_t max_new, int32_t **outputs,
                      int32_t nout_cap) {
  int done = 0;
  /* Commit first, finish after: finishing frees blocks the plan still names. */
  weir_sched_seq *fin[256];
  int nfin = 0;
  for (int32_t k = 0; k < o->num_items; k++) {
    weir_sched_seq *seq = o->items[k].seq;
    /* Rows that only score prompt tokens leave nothing to sample. */
    if (o->items[k].num_logits == o->items[k].num_prompt_logits) continue;
    int32_t t = next_token(seq);
    WT_ASSERT_INT_EQ(weir_sched_commit(e->s, seq, 0, &t, 1), WEIR_OK);
    if (seq->num_tokens - seq->num_prompt >= max_new) fin[nfin++] = seq;
  }
  for (int i = 0; i < nfin; i++) {
    weir_sched_seq *seq = fin[i];
    if (outputs && seq->id < (uint64_t)nout_cap) {
      memcpy(outputs[seq->id], seq->tokens + seq->num_prompt,
             (size_t)(seq->num_tokens - seq->num_prompt) * sizeof(int32_t));
    }
    weir_sched_finish(e->s, seq);
    WT_ASSERT_INT_EQ(seq->state, WEIR_SEQ_FINISHED);
    CU_ASSERT_PTR_NULL(seq->kv);
    weir_sched_seq_free(e->s, seq);
    done++;
  }
  return done;
}

/* ---- Tests ----------------------------------------------------------------------------- */

static void test_config(void) {
  weir_kv_cache_params kp = {.num_blocks = 8, .block_size = 4};
  weir_kv_cache *kv = NULL;
  WT_ASSERT_INT_EQ(weir_kv_cache_create(&kp, &kv), WEIR_OK);
  weir_sched *s = NULL;
  weir_sched_config c = {.max_num_seqs = 4, .max_num_batched_tokens = 2, .watermark_blocks = -1};
  WT_ASSERT_INT_EQ(weir_sched_create(&c, kv, &s), WEIR_E_INVAL); /* budget < max seqs */
  c.max_num_batched_tokens = 16;
  c.max_num_seqs = 0;
  WT_ASSERT_INT_EQ(weir_sched_create(&c, kv, &s), WEIR_E_INVAL);
  c.max_num_seqs = 4;
  WT_ASSERT_INT_EQ(weir_sched_create(&c, kv, &s), WEIR_OK);
  weir_sched_policy pol;
  WT_ASSERT_INT_EQ(weir_sched_policy_parse("priority", &pol), WEIR_OK);
  WT_ASSERT_INT_EQ(pol, WEIR_SCHED_PRIORITY);
  WT_ASSERT_INT_EQ(weir_sched_policy_parse("fcfs", &pol), WEIR_OK);
  WT_ASSERT_INT_EQ(pol, WEIR_SCHED_FCFS);
  WT_ASSERT_INT_EQ(weir_sched_policy_parse("lifo", &pol), WEIR_E_INVAL);
  /* Bad requests: empty prompt, duplicate id, a prompt the whole pool cannot hold. */
  int32_t t[40] = {0};
  weir_sched_seq_params p = {.id = 1, .prompt = t, .num_prompt = 0};
  weir_sched_seq *seq = NULL;
  WT_ASSERT_INT_EQ(weir_sched_add(s, &p, &seq), WEIR_E_INVAL);
  p.num_prompt = 31; /* 31 + 1 tokens = 8 blocks: fits exactly */
  WT_ASSERT_INT_EQ(weir_sched_add(s, &p, &seq), WEIR_OK);
  WT_ASSERT_INT_EQ(weir_sched_add(s, &p, &seq), WEIR_E_EXISTS);
  p.id = 2;
  p.num_prompt = 32;
  WT_ASSERT_INT_EQ(weir_sched_add(s, &p, &seq), WEIR_E_NOSPACE);
  WT_ASSERT_INT_EQ(weir_sched_num_waiting(s), 1);
  weir_sched_destroy(s); /* frees the waiting sequence */
  weir_kv_cache_destroy(kv);
}

static void test_decode_before_prefill(void) {
  env e = mk(256, 16, 0, 8, 64, WEIR_SCHED_FCFS);
  int32_t *p = mkprompt(200, 1);
  weir_sched_seq *a = add(&e, 1, p, 5, 0), *b = add(&e, 2, p + 5, 7, 0);
  weir_sched_out o;
  WT_ASSERT_INT_EQ(weir_sched_step(e.s, &o), WEIR_OK);
  WT_ASSERT_INT_EQ(o.num_items, 2);
  WT_ASSERT_INT_EQ(o.num_tokens, 12);
  WT_ASSERT_INT_EQ(o.num_logits, 2);
  WT_ASSERT_INT_EQ(o.num_prefill_tokens, 12);
  check_plan(&e, &o, 8, 64);
  commit_all(&e, &o, 100, NULL, 0);
  weir_sched_seq *c = add(&e, 3, p, 200, 0);
  WT_ASSERT_INT_EQ(weir_sched_step(e.s, &o), WEIR_OK);
  check_plan(&e, &o, 8, 64);
  WT_ASSERT_INT_EQ(o.num_items, 3);
  /* Decodes first, one token each with logits; then the prefill chunk with what is left. */
  CU_ASSERT(o.items[0].seq == a && o.items[1].seq == b && o.items[2].seq == c);
  WT_ASSERT_INT_EQ(o.items[0].num_new_tokens, 1);
  WT_ASSERT_INT_EQ(o.items[0].start, 5);
  WT_ASSERT_INT_EQ(o.items[0].num_logits, 1);
  WT_ASSERT_INT_EQ(o.items[1].num_new_tokens, 1);
  WT_ASSERT_INT_EQ(o.items[2].start, 0);
  WT_ASSERT_INT_EQ(o.items[2].num_new_tokens, 62);
  WT_ASSERT_INT_EQ(o.items[2].num_logits, 0);
  WT_ASSERT_INT_EQ(o.num_tokens, 64);
  WT_ASSERT_INT_EQ(o.num_prefill_tokens, 62);
  WT_ASSERT_INT_EQ(o.max_query_len, 62);
  WT_ASSERT_INT_EQ(o.max_context_len, 62);
  free(p);
  env_free(&e);
}

static void test_chunked_prefill_5000(void) {
  env e = mk(2048, 16, 1, 16, 512, WEIR_SCHED_FCFS);
  int32_t *p = mkprompt(5000, 3);
  weir_sched_seq *d[3];
  for (int i = 0; i < 3; i++) d[i] = add(&e, (uint64_t)i, p + 100 * i, 8, 0);
  weir_sched_out o;
  WT_ASSERT_INT_EQ(weir_sched_step(e.s, &o), WEIR_OK);
  commit_all(&e, &o, 1000, NULL, 0);
  weir_sched_seq *big = add(&e, 9, p, 5000, 0);
  int steps = 0;
  int32_t expect_start = 0;
  for (;;) {
    WT_ASSERT_INT_EQ(weir_sched_step(e.s, &o), WEIR_OK);
    check_plan(&e, &o, 16, 512);
    steps++;
    /* Every decode runs every step while the long prompt is split. */
    for (int i = 0; i < 3; i++) {
      int k = find_item(&o, d[i]);
      CU_ASSERT(k >= 0 && k < 3);
      if (k >= 0) WT_ASSERT_INT_EQ(o.items[k].num_new_tokens, 1);
    }
    int k = find_item(&o, big);
    WT_ASSERT_INT_EQ(k, 3);
    if (k < 0) break;
    WT_ASSERT_INT_EQ(o.items[k].start, expect_start);
    WT_ASSERT_INT_EQ(o.num_tokens, expect_start + o.items[k].num_new_tokens == 5000
                                       ? 3 + o.items[k].num_new_tokens : 512);
    expect_start += o.items[k].num_new_tokens;
    int last = expect_start == 5000;
    WT_ASSERT_INT_EQ(o.items[k].num_logits, last ? 1 : 0);
    commit_all(&e, &o, 1000, NULL, 0);
    if (last || steps > 20) break;
  }
  WT_ASSERT_INT_EQ(steps, 10); /* ceil(5000 / 509) */
  WT_ASSERT_INT_EQ(big->num_tokens, 5001);
  /* Next step it decodes like the others. */
  WT_ASSERT_INT_EQ(weir_sched_step(e.s, &o), WEIR_OK);
  WT_ASSERT_INT_EQ(o.num_tokens, 4);
  free(p);
  env_free(&e);
}

static void test_mid_prefill_continues_first(void) {
  env e = mk(512, 16, 0, 8, 100, WEIR_SCHED_FCFS);
  int32_t *p = mkprompt(300, 5);
  weir_sched_seq *a = add(&e, 1, p, 300, 0);
  weir_sched_out o;
  WT_ASSERT_INT_EQ(weir_sched_step(e.s, &o), WEIR_OK);
  WT_ASSERT_INT_EQ(o.items[0].num_new_tokens, 100);
  /* A chunk short of the end gave no logits: nothing can be committed to it. */
  int32_t tok = 1;
  WT_ASSERT_INT_EQ(weir_sched_commit(e.s, a, 0, &tok, 1), WEIR_E_INVAL);
  WT_ASSERT_INT_EQ(a->num_tokens, 300);
  weir_sched_seq *b = add(&e, 2, p, 50, 0);
  WT_ASSERT_INT_EQ(weir_sched_step(e.s, &o), WEIR_OK);
  check_plan(&e, &o, 8, 100);
  WT_ASSERT_INT_EQ(o.num_items, 1); /* a took the whole budget; b waits */
  CU_ASSERT(o.items[0].seq == a);
  WT_ASSERT_INT_EQ(o.items[0].start, 100);
  WT_ASSERT_INT_EQ(b->state, WEIR_SEQ_WAITING);
  WT_ASSERT_INT_EQ(weir_sched_step(e.s, &o), WEIR_OK);
  WT_ASSERT_INT_EQ(o.num_items, 1); /* a's last 100 still come before b */
  WT_ASSERT_INT_EQ(o.items[0].num_logits, 1);
  commit_all(&e, &o, 100, NULL, 0);
  WT_ASSERT_INT_EQ(weir_sched_step(e.s, &o), WEIR_OK);
  check_plan(&e, &o, 8, 100);
  WT_ASSERT_INT_EQ(o.num_items, 2); /* a decodes, then b starts with the rest */
  CU_ASSERT(o.items[0].seq == a && o.items[1].seq == b);
  WT_ASSERT_INT_EQ(o.items[1].num_new_tokens, 50);
  free(p);
  env_free(&e);
}

static void test_budget_limits(void) {
  env e = mk(4096, 16, 1, 5, 40, WEIR_SCHED_FCFS);
  int32_t *p = mkprompt(400, 9);
  for (int i = 0; i < 12; i++) add(&e, (uint64_t)i, p + i * 13, 10 + (i * 37) % 90, 0);
  int done = 0, steps = 0;
  weir_sched_out o;
  while (done < 12 && steps < 2000) {
    WT_ASSERT_INT_EQ(weir_sched_step(e.s, &o), WEIR_OK);
    check_plan(&e, &o, 5, 40);
    CU_ASSERT(o.num_items > 0);
    done += commit_all(&e, &o, 25, NULL, 0);
    steps++;
  }
  WT_ASSERT_INT_EQ(done, 12);
  WT_ASSERT_INT_EQ(kvstats(&e).used_blocks, 0);
  free(p);
  env_free(&e);
}

/* Runs n requests to completion; returns preemptions. outputs[i] receives request i's
 * output tokens. */
static uint64_t run_all(int32_t num_blocks, int32_t bs, int prefix, int32_t n, int32_t max_new,
                        int32_t **outputs, int32_t *steps_out) {
  env e = mk(num_blocks, bs, prefix, 8, 64, WEIR_SCHED_FCFS);
  int32_t *p = mkprompt(64, 11);
  for (int32_t i = 0; i < n; i++) add(&e, (uint64_t)i, p + i, 10 + i % 3, 0);
  int done = 0, steps = 0;
  weir_sched_out o;
  while (done < n && steps < 5000) {
    WT_ASSERT_INT_EQ(weir_sched_step(e.s, &o), WEIR_OK);
    WT_ASSERT_INT_EQ(o.num_failed, 0);
    check_plan(&e, &o, 8, 64);
    done += commit_all(&e, &o, max_new, outputs, n);
    steps++;
  }
  WT_ASSERT_INT_EQ(done, n);
  weir_kv_stats kst = kvstats(&e);
  WT_ASSERT_INT_EQ(kst.used_blocks, 0);
  WT_ASSERT_INT_EQ(kst.num_seqs, 0);
  weir_sched_stats st;
  weir_sched_stats_get(e.s, &st);
  WT_ASSERT_INT_EQ(st.num_running + st.num_waiting, 0);
  if (steps_out) *steps_out = steps;
  free(p);
  env_free(&e);
  return st.num_preemptions;
}

static void test_preemption_tiny_pool(void) {
  enum { N = 6, MAXNEW = 20 };
  int32_t *ref[N], *got[N], *got2[N];
  for (int i = 0; i < N; i++) {
    ref[i] = calloc(MAXNEW, sizeof(int32_t));
    got[i] = calloc(MAXNEW, sizeof(int32_t));
    got2[i] = calloc(MAXNEW, sizeof(int32_t));
  }
  /* Reference: a pool that never runs out. */
  WT_ASSERT_INT_EQ(run_all(1024, 4, 0, N, MAXNEW, ref, NULL), 0);
  /* 12 blocks of 4 = 48 tokens, each request needs ~32: constant preemption. */
  uint64_t pre = run_all(12, 4, 0, N, MAXNEW, got, NULL);
  CU_ASSERT(pre > 0);
  /* With the prefix cache recomputation finds its own blocks again. */
  uint64_t pre2 = run_all(12, 4, 1, N, MAXNEW, got2, NULL);
  CU_ASSERT(pre2 > 0);
  for (int i = 0; i < N; i++) {
    CU_ASSERT(memcmp(ref[i], got[i], MAXNEW * sizeof(int32_t)) == 0);
    CU_ASSERT(memcmp(ref[i], got2[i], MAXNEW * sizeof(int32_t)) == 0);
    free(ref[i]);
    free(got[i]);
    free(got2[i]);
  }
}

static void test_preempt_newest(void) {
  /* 8 blocks of 4. Three sequences of 9 prompt tokens take 3 blocks each once decoding
   * starts; the pool cannot hold all three: the newest goes back to waiting. */
  env e = mk(8, 4, 0, 8, 64, WEIR_SCHED_FCFS);
  int32_t *p = mkprompt(30, 2);
  weir_sched_seq *a = add(&e, 1, p, 7, 0), *b = add(&e, 2, p + 1, 7, 0),
                 *c = add(&e, 3, p + 2, 7, 0);
  weir_sched_out o;
  WT_ASSERT_INT_EQ(weir_sched_step(e.s, &o), WEIR_OK); /* 2 blocks each: 6 of 8 */
  WT_ASSERT_INT_EQ(o.num_items, 3);
  commit_all(&e, &o, 100, NULL, 0); /* 8 tokens each, position 7 still in block 1 */
  WT_ASSERT_INT_EQ(weir_sched_step(e.s, &o), WEIR_OK);
  WT_ASSERT_INT_EQ(o.num_preempted, 0);
  commit_all(&e, &o, 100, NULL, 0); /* 9 tokens each: position 8 needs a third block */
  WT_ASSERT_INT_EQ(weir_sched_step(e.s, &o), WEIR_OK);
  check_plan(&e, &o, 8, 64);
  /* a and b take the last two blocks; c needs a third: c (newest) is preempted. */
  WT_ASSERT_INT_EQ(o.num_preempted, 1);
  CU_ASSERT(o.preempted[0] == c);
  WT_ASSERT_INT_EQ(c->state, WEIR_SEQ_WAITING);
  WT_ASSERT_INT_EQ(c->num_computed, 0);
  WT_ASSERT_INT_EQ(c->num_tokens, 9); /* its output tokens are kept */
  WT_ASSERT_INT_EQ(c->num_preemptions, 1);
  WT_ASSERT_INT_EQ(o.num_items, 2);
  CU_ASSERT(find_item(&o, a) >= 0 && find_item(&o, b) >= 0);
  /* It rejoins at the front of the queue, ahead of later arrivals. */
  weir_sched_seq *d = add(&e, 4, p + 3, 3, 0);
  (void)d;
  weir_sched_stats st;
  weir_sched_stats_get(e.s, &st);
  WT_ASSERT_INT_EQ(st.num_preemptions, 1);
  WT_ASSERT_INT_EQ(st.num_waiting, 2);
  free(p);
  env_free(&e);
}

static void test_too_big_fails(void) {
  /* A sequence that outgrows the whole pool is failed, not preempted forever. */
  env e = mk(3, 4, 0, 4, 64, WEIR_SCHED_FCFS);
  int32_t *p = mkprompt(20, 2);
  weir_sched_seq *a = add(&e, 1, p, 9, 0);
  weir_sched_out o;
  int failed = 0;
  for (int step = 0; step < 20 && !failed; step++) {
    WT_ASSERT_INT_EQ(weir_sched_step(e.s, &o), WEIR_OK);
    if (o.num_failed) {
      failed = 1;
      CU_ASSERT(o.failed[0] == a);
      WT_ASSERT_INT_EQ(a->status, WEIR_E_NOSPACE);
      WT_ASSERT_INT_EQ(a->state, WEIR_SEQ_FINISHED);
      /* 12 computed tokens fill the pool; the 13th (known, sampled) cannot fit. */
      WT_ASSERT_INT_EQ(a->num_tokens, 13);
      break;
    }
    commit_all(&e, &o, 100, NULL, 0);
  }
  CU_ASSERT(failed);
  WT_ASSERT_INT_EQ(kvstats(&e).used_blocks, 0);
  WT_ASSERT_INT_EQ(weir_sched_num_running(e.s), 0);
  weir_sched_seq_free(e.s, a);
  free(p);
  env_free(&e);
}

static void test_priority(void) {
  env e = mk(64, 4, 0, 1, 64, WEIR_SCHED_PRIORITY);
  int32_t *p = mkprompt(30, 2);
  weir_sched_seq *lo = add(&e, 1, p, 4, 5), *hi = add(&e, 2, p, 4, 1),
                 *mid = add(&e, 3, p, 4, 3), *hi2 = add(&e, 4, p, 4, 1);
  weir_sched_seq *order[4] = {hi, hi2, mid, lo};
  weir_sched_out o;
  for (int i = 0; i < 4; i++) {
    WT_ASSERT_INT_EQ(weir_sched_step(e.s, &o), WEIR_OK);
    WT_ASSERT_INT_EQ(o.num_items, 1);
    CU_ASSERT(o.items[0].seq == order[i]);
    WT_ASSERT_INT_EQ(commit_all(&e, &o, 1, NULL, 0), 1);
  }
  env_free(&e);

  /* Under pressure the lowest priority is preempted even when it is the oldest. */
  e = mk(8, 4, 0, 8, 64, WEIR_SCHED_PRIORITY);
  weir_sched_seq *old_lo = add(&e, 1, p, 7, 9), *a = add(&e, 2, p + 1, 7, 0),
                 *b = add(&e, 3, p + 2, 7, 0);
  WT_ASSERT_INT_EQ(weir_sched_step(e.s, &o), WEIR_OK);
  WT_ASSERT_INT_EQ(o.num_items, 3);
  CU_ASSERT(o.items[0].seq == a && o.items[1].seq == b && o.items[2].seq == old_lo);
  commit_all(&e, &o, 100, NULL, 0);
  WT_ASSERT_INT_EQ(weir_sched_step(e.s, &o), WEIR_OK);
  commit_all(&e, &o, 100, NULL, 0);
  WT_ASSERT_INT_EQ(weir_sched_step(e.s, &o), WEIR_OK);
  WT_ASSERT_INT_EQ(o.num_preempted, 1);
  CU_ASSERT(o.preempted[0] == old_lo);
  CU_ASSERT(find_item(&o, a) >= 0 && find_item(&o, b) >= 0);
  free(p);
  env_free(&e);
}

static void test_abort_frees_now(void) {
  env e = mk(64, 4, 0, 8, 64, WEIR_SCHED_FCFS);
  int32_t *p = mkprompt(30, 2);
  weir_sched_seq *a = add(&e, 1, p, 10, 0);
  add(&e, 2, p, 10, 0);
  weir_sched_out o;
  WT_ASSERT_INT_EQ(weir_sched_step(e.s, &o), WEIR_OK);
  commit_all(&e, &o, 100, NULL, 0);
  weir_sched_seq *w = add(&e, 3, p, 10, 0);
  WT_ASSERT_INT_EQ(kvstats(&e).used_blocks, 6);
  weir_sched_seq *got = NULL;
  WT_ASSERT_INT_EQ(weir_sched_abort(e.s, 1, &got), WEIR_OK);
  CU_ASSERT(got == a);
  WT_ASSERT_INT_EQ(a->state, WEIR_SEQ_FINISHED);
  WT_ASSERT_INT_EQ(kvstats(&e).used_blocks, 3); /* in the same call */
  WT_ASSERT_INT_EQ(weir_sched_num_running(e.s), 1);
  WT_ASSERT_INT_EQ(weir_sched_abort(e.s, 3, &got), WEIR_OK);
  CU_ASSERT(got == w);
  WT_ASSERT_INT_EQ(weir_sched_num_waiting(e.s), 0);
  WT_ASSERT_INT_EQ(weir_sched_abort(e.s, 3, &got), WEIR_E_NOTFOUND);
  CU_ASSERT_PTR_NULL(got);
  CU_ASSERT_PTR_NULL(weir_sched_find(e.s, 1));
  weir_sched_seq_free(e.s, a);
  weir_sched_seq_free(e.s, w);
  assert_kv_ok(&e);
  free(p);
  env_free(&e);
}

/* Flow control: a paused sequence leaves the batch but keeps its blocks, gives its place to
 * others, comes back ahead of admissions without recomputing, and its blocks are the first
 * reclaimed when the pool runs out; aborting it frees them. */
static void test_pause_resume(void) {
  env e = mk(12, 4, 0, 2, 64, WEIR_SCHED_FCFS);
  int32_t *p = mkprompt(8, 3);
  weir_sched_seq *a = add(&e, 1, p, 8, 0);
  weir_sched_seq *b = add(&e, 2, p, 8, 0);
  weir_sched_out o;
  WT_ASSERT_INT_EQ(weir_sched_step(e.s, &o), WEIR_OK);
  commit_all(&e, &o, 100, NULL, 0);
  int32_t used = kvstats(&e).used_blocks;
  int32_t computed = a->num_computed;
  WT_ASSERT_INT_EQ(weir_sched_pause(e.s, a), WEIR_OK);
  WT_ASSERT_INT_EQ(a->state, WEIR_SEQ_PAUSED);
  WT_ASSERT_INT_EQ(weir_sched_num_running(e.s), 1);
  WT_ASSERT_INT_EQ(kvstats(&e).used_blocks, used); /* blocks kept */
  CU_ASSERT(weir_sched_find(e.s, 1) == a);
  weir_sched_stats st;
  weir_sched_stats_get(e.s, &st);
  WT_ASSERT_INT_EQ(st.num_paused, 1);
  /* Its place in the batch goes to a new sequence. */
  weir_sched_seq *c = add(&e, 3, p, 4, 0);
  WT_ASSERT_INT_EQ(weir_sched_step(e.s, &o), WEIR_OK);
  check_plan(&e, &o, 2, 64);
  WT_ASSERT_INT_EQ(find_item(&o, a), -1);
  CU_ASSERT(find_item(&o, b) >= 0 && find_item(&o, c) >= 0);
  commit_all(&e, &o, 100, NULL, 0);
  /* Resumed while the batch is full: it waits, still paused, ahead of a newer sequence. */
  WT_ASSERT_INT_EQ(weir_sched_resume(e.s, a), WEIR_OK);
  WT_ASSERT_INT_EQ(a->state, WEIR_SEQ_PAUSED);
  weir_sched_seq *d = add(&e, 4, p, 4, 0);
  weir_sched_finish(e.s, c);
  weir_sched_seq_free(e.s, c);
  WT_ASSERT_INT_EQ(weir_sched_step(e.s, &o), WEIR_OK);
  check_plan(&e, &o, 2, 64);
  WT_ASSERT_INT_EQ(a->state, WEIR_SEQ_RUNNING);
  WT_ASSERT_INT_EQ(d->state, WEIR_SEQ_WAITING);
  int k = find_item(&o, a);
  CU_ASSERT_FATAL(k >= 0);
  WT_ASSERT_INT_EQ(o.items[k].start, computed); /* no recompute */
  WT_ASSERT_INT_EQ(o.items[k].num_new_tokens, 1);
  WT_ASSERT_INT_EQ(a->num_preemptions, 0);
  commit_all(&e, &o, 100, NULL, 0);
  /* Paused again, then the pool runs short: its blocks go before anyone running is
   * preempted. */
  WT_ASSERT_INT_EQ(weir_sched_pause(e.s, a), WEIR_OK);
  weir_sched_finish(e.s, b);
  weir_sched_seq_free(e.s, b);
  int32_t *big = mkprompt(36, 50);
  weir_sched_seq *g = add(&e, 5, big, 36, 0); /* 9 of the 12 blocks, and more to decode */
  int rounds = 0;
  while (a->kv && rounds++ < 20) {
    WT_ASSERT_INT_EQ(weir_sched_step(e.s, &o), WEIR_OK);
    check_plan(&e, &o, 2, 64);
    commit_all(&e, &o, 100, NULL, 0);
  }
  CU_ASSERT_PTR_NULL(a->kv);
  WT_ASSERT_INT_EQ(a->num_computed, 0);
  WT_ASSERT_INT_EQ(a->num_preemptions, 1);
  WT_ASSERT_INT_EQ(a->state, WEIR_SEQ_PAUSED);
  WT_ASSERT_INT_EQ(g->num_preemptions, 0);
  WT_ASSERT_INT_EQ(d->num_preemptions, 0);
  /* Resumed without blocks: back to the waiting queue, recomputed from its tokens. */
  int32_t ntok = a->num_tokens;
  WT_ASSERT_INT_EQ(weir_sched_resume(e.s, a), WEIR_OK);
  WT_ASSERT_INT_EQ(a->state, WEIR_SEQ_WAITING);
  WT_ASSERT_INT_EQ(a->num_tokens, ntok);
  /* Paused once more, then aborted: its blocks (if any) are freed in the call. */
  WT_ASSERT_INT_EQ(weir_sched_pause(e.s, a), WEIR_OK);
  weir_sched_seq *got = NULL;
  WT_ASSERT_INT_EQ(weir_sched_abort(e.s, 1, &got), WEIR_OK);
  CU_ASSERT(got == a);
  WT_ASSERT_INT_EQ(a->state, WEIR_SEQ_FINISHED);
  weir_sched_stats_get(e.s, &st);
  WT_ASSERT_INT_EQ(st.num_paused, 0);
  WT_ASSERT_INT_EQ(weir_sched_pause(e.s, a), WEIR_E_INVAL);
  weir_sched_seq_free(e.s, a);
  assert_kv_ok(&e);
  free(big);
  free(p);
  env_free(&e);
}

static void test_prefix_reuse(void) {
  env e = mk(256, 16, 1, 8, 512, WEIR_SCHED_FCFS);
  int32_t *p = mkprompt(120, 4);
  weir_sched_seq *a = add(&e, 1, p, 100, 0);
  weir_sched_out o;
  WT_ASSERT_INT_EQ(weir_sched_step(e.s, &o), WEIR_OK);
  WT_ASSERT_INT_EQ(a->num_cached_prompt, 0);
  commit_all(&e, &o, 100, NULL, 0);
  /* While a is still running, b with the same 100-token prefix reuses its 6 full blocks
   * (registered when the next step begins). */
  int32_t q[110];
  memcpy(q, p, 100 * sizeof(int32_t));
  for (int i = 100; i < 110; i++) q[i] = 5000 + i;
  weir_sched_seq *b = add(&e, 2, q, 110, 0);
  WT_ASSERT_INT_EQ(weir_sched_step(e.s, &o), WEIR_OK);
  check_plan(&e, &o, 8, 512);
  int k = find_item(&o, b);
  CU_ASSERT(k >= 0);
  WT_ASSERT_INT_EQ(b->num_cached_prompt, 96);
  if (k >= 0) {
    WT_ASSERT_INT_EQ(o.items[k].start, 96);
    WT_ASSERT_INT_EQ(o.items[k].num_new_tokens, 14);
  }
  int32_t nb;
  const int32_t *ta = weir_kv_seq_block_table(a->kv, &nb);
  const int32_t *tb = weir_kv_seq_block_table(b->kv, &nb);
  for (int i = 0; i < 6; i++) WT_ASSERT_INT_EQ(tb[i], ta[i]);
  weir_kv_stats st = kvstats(&e);
  WT_ASSERT_INT_EQ(st.prefix_hits_tokens, 96);
  WT_ASSERT_INT_EQ(st.prefix_queries_tokens, 210);
  commit_all(&e, &o, 100, NULL, 0);
  /* After both finish, a third request still hits the (now cached, unreferenced) blocks. */
  weir_sched_finish(e.s, a);
  weir_sched_finish(e.s, b);
  weir_sched_seq_free(e.s, a);
  weir_sched_seq_free(e.s, b);
  WT_ASSERT_INT_EQ(kvstats(&e).used_blocks, 0);
  /* The six shared full blocks; the partial tails went to the free list. */
  WT_ASSERT_INT_EQ(kvstats(&e).cached_blocks, 6);
  weir_sched_seq *c = add(&e, 3, q, 110, 0);
  WT_ASSERT_INT_EQ(weir_sched_step(e.s, &o), WEIR_OK);
  WT_ASSERT_INT_EQ(c->num_cached_prompt, 96);
  assert_kv_ok(&e);
  free(p);
  env_free(&e);
}

/* Prompt logprobs: a sequence that scores its prompt gets logits on every prompt row, in
 * chunks cut to the step's prompt rows, never from the prefix cache; the final chunk's last
 * row samples as usual, and after it the sequence decodes like any other. */
static void test_prompt_logits(void) {
  env e = {0};
  weir_kv_cache_params kp = {.num_blocks = 256, .block_size = 16, .prefix_caching = 1};
  WT_ASSERT_INT_EQ(weir_kv_cache_create(&kp, &e.kv), WEIR_OK);
  weir_sched_config sc = {.max_num_seqs = 8, .max_num_batched_tokens = 512,
                          .watermark_blocks = 0, .max_prompt_logits = 40};
  WT_ASSERT_INT_EQ(weir_sched_create(&sc, e.kv, &e.s), WEIR_OK);
  int32_t *p = mkprompt(100, 4);
  (void)add(&e, 1, p, 100, 0);
  weir_sched_out o;
  WT_ASSERT_INT_EQ(weir_sched_step(e.s, &o), WEIR_OK);
  WT_ASSERT_INT_EQ(o.items[0].num_prompt_logits, 0);
  WT_ASSERT_INT_EQ(o.num_logits, 1);
  commit_all(&e, &o, 100, NULL, 0);
  weir_sched_seq_params sp = {.id = 2, .prompt = p, .num_prompt = 100, .max_tokens = 16,
                              .prompt_logits = 1};
  weir_sched_seq *b = NULL;
  WT_ASSERT_INT_EQ(weir_sched_add(e.s, &sp, &b), WEIR_OK);
  const int32_t starts[3] = {0, 40, 80}, news[3] = {40, 40, 20}, scored[3] = {40, 40, 19};
  for (int step = 0; step < 3; step++) {
    WT_ASSERT_INT_EQ(weir_sched_step(e.s, &o), WEIR_OK);
    check_plan(&e, &o, 8, 512);
    int k = find_item(&o, b);
    CU_ASSERT_FATAL(k >= 0);
    WT_ASSERT_INT_EQ(o.items[k].start, starts[step]);
    WT_ASSERT_INT_EQ(o.items[k].num_new_tokens, news[step]);
    WT_ASSERT_INT_EQ(o.items[k].num_logits, news[step]);
    WT_ASSERT_INT_EQ(o.items[k].num_prompt_logits, scored[step]);
    WT_ASSERT_INT_EQ(o.num_logits, news[step] + 1); /* a decodes beside it */
    int32_t rows[64];
    weir_sched_batch_arrays arr = {.logits_rows = rows};
    WT_ASSERT_INT_EQ(weir_sched_fill_batch(e.s, &o, &arr), WEIR_OK);
    commit_all(&e, &o, 100, NULL, 0);
  }
  WT_ASSERT_INT_EQ(b->num_cached_prompt, 0); /* a's blocks were there, and not used */
  WT_ASSERT_INT_EQ(b->prompt_logits, 0);
  WT_ASSERT_INT_EQ(b->num_tokens, 101);
  WT_ASSERT_INT_EQ(weir_sched_step(e.s, &o), WEIR_OK);
  int k = find_item(&o, b);
  CU_ASSERT_FATAL(k >= 0);
  WT_ASSERT_INT_EQ(o.items[k].num_logits, 1);
  WT_ASSERT_INT_EQ(o.items[k].num_prompt_logits, 0);
  commit_all(&e, &o, 100, NULL, 0);
  assert_kv_ok(&e);
  env_free(&e);
  /* A scheduler with no prompt rows refuses such a sequence. */
  e = mk(64, 16, 1, 4, 64, WEIR_SCHED_FCFS);
  sp.id = 3;
  WT_ASSERT_INT_EQ(weir_sched_add(e.s, &sp, &b), WEIR_E_INVAL);
  env_free(&e);
  free(p);
}

static void test_speculative_drafts(void) {
  env e = mk(64, 4, 0, 4, 8, WEIR_SCHED_FCFS);
  int32_t *p = mkprompt(30, 2);
  weir_sched_seq *a = add(&e, 1, p, 5, 0), *b = add(&e, 2, p + 1, 3, 0);
  weir_sched_out o;
  WT_ASSERT_INT_EQ(weir_sched_step(e.s, &o), WEIR_OK);
  commit_all(&e, &o, 100, NULL, 0); /* a: 6 tokens, 5 computed; b: 4 tokens, 3 computed */
  int32_t d[5] = {900, 901, 902, 903, 904};
  /* Drafts only for a sequence in decode. */
  WT_ASSERT_INT_EQ(weir_sched_add_drafts(e.s, a, d, 5), WEIR_OK);
  WT_ASSERT_INT_EQ(weir_sched_add_drafts(e.s, a, d, 1), WEIR_E_INVAL);
  WT_ASSERT_INT_EQ(weir_sched_add_drafts(e.s, b, d, 3), WEIR_OK);
  /* Budget 8: one token each is reserved (2), a gets its 5 drafts, b 1 of its 3. */
  WT_ASSERT_INT_EQ(weir_sched_step(e.s, &o), WEIR_OK);
  check_plan(&e, &o, 4, 8);
  WT_ASSERT_INT_EQ(o.num_tokens, 8);
  WT_ASSERT_INT_EQ(o.items[0].num_new_tokens, 6);
  WT_ASSERT_INT_EQ(o.items[0].num_drafts, 5);
  WT_ASSERT_INT_EQ(o.items[0].num_logits, 6);
  WT_ASSERT_INT_EQ(o.items[1].num_new_tokens, 2);
  WT_ASSERT_INT_EQ(o.items[1].num_drafts, 1);
  WT_ASSERT_INT_EQ(o.items[1].num_logits, 2);
  WT_ASSERT_INT_EQ(b->num_tokens, 5); /* its two unscheduled drafts were dropped */
  WT_ASSERT_INT_EQ(b->num_drafts, 1);
  WT_ASSERT_INT_EQ(o.num_logits, 8);
  /* Verification accepted 2 of a's 5 drafts, then sampled a correction. */
  int32_t corr = 777;
  WT_ASSERT_INT_EQ(weir_sched_commit(e.s, a, 6, &corr, 1), WEIR_E_INVAL);
  WT_ASSERT_INT_EQ(weir_sched_commit(e.s, a, 2, &corr, 1), WEIR_OK);
  WT_ASSERT_INT_EQ(a->num_tokens, 9); /* 6 + 2 accepted + 1 */
  WT_ASSERT_INT_EQ(a->num_computed, 8);
  WT_ASSERT_INT_EQ(weir_kv_seq_len(a->kv), 8);
  WT_ASSERT_INT_EQ(a->tokens[6], 900);
  WT_ASSERT_INT_EQ(a->tokens[7], 901);
  WT_ASSERT_INT_EQ(a->tokens[8], 777);
  WT_ASSERT_INT_EQ(a->num_drafts, 0);
  int32_t t = 5;
  WT_ASSERT_INT_EQ(weir_sched_commit(e.s, b, 0, &t, 1), WEIR_OK);
  WT_ASSERT_INT_EQ(b->num_tokens, 5); /* 4 + the sampled one; the rejected draft is gone */
  WT_ASSERT_INT_EQ(b->num_computed, 4);
  WT_ASSERT_INT_EQ(b->tokens[4], 5);
  assert_kv_ok(&e);
  /* General rollback: cut a back to its prompt plus one output. */
  WT_ASSERT_INT_EQ(weir_sched_truncate(e.s, a, 4), WEIR_E_INVAL);
  WT_ASSERT_INT_EQ(weir_sched_truncate(e.s, a, 6), WEIR_OK);
  WT_ASSERT_INT_EQ(a->num_computed, 6);
  WT_ASSERT_INT_EQ(weir_kv_seq_len(a->kv), 6);
  /* A failed forward is undone: nothing it planned counts as computed. */
  WT_ASSERT_INT_EQ(weir_sched_add_drafts(e.s, b, d, 2), WEIR_OK);
  WT_ASSERT_INT_EQ(weir_sched_step(e.s, &o), WEIR_OK);
  /* a has nothing to compute (its last token is computed; no commit followed the cut). */
  WT_ASSERT_INT_EQ(o.num_items, 1);
  WT_ASSERT_INT_EQ(b->num_computed, 7);
  weir_sched_undo_step(e.s, &o);
  /* The plan still names what to finish. */
  WT_ASSERT_INT_EQ(o.num_items, 1);
  CU_ASSERT(o.items[0].seq == b);
  WT_ASSERT_INT_EQ(b->num_computed, 4);
  WT_ASSERT_INT_EQ(b->num_tokens, 5);
  WT_ASSERT_INT_EQ(b->num_drafts, 0);
  WT_ASSERT_INT_EQ(weir_kv_seq_len(b->kv), 4);
  WT_ASSERT_INT_EQ(weir_kv_seq_len(a->kv), 6);
  assert_kv_ok(&e);
  WT_ASSERT_INT_EQ(weir_sched_step(e.s, &o), WEIR_OK);
  check_plan(&e, &o, 4, 8);
  free(p);
  env_free(&e);
}

static void test_fork_cow_copies(void) {
  env e = mk(64, 4, 0, 4, 64, WEIR_SCHED_FCFS);
  int32_t *p = mkprompt(30, 2);
  weir_sched_seq *a = add(&e, 1, p, 6, 0);
  weir_sched_out o;
  WT_ASSERT_INT_EQ(weir_sched_step(e.s, &o), WEIR_OK);
  /* Before committing its first token, fork a sibling (n = 2). */
  weir_sched_seq *c = NULL;
  WT_ASSERT_INT_EQ(weir_sched_fork(e.s, a, 1, NULL, &c), WEIR_E_EXISTS);
  WT_ASSERT_INT_EQ(weir_sched_fork(e.s, a, 2, NULL, &c), WEIR_OK);
  WT_ASSERT_INT_EQ(c->num_computed, 6);
  WT_ASSERT_INT_EQ(kvstats(&e).used_blocks, 2);
  int32_t t1 = 50, t2 = 60;
  WT_ASSERT_INT_EQ(weir_sched_commit(e.s, a, 0, &t1, 1), WEIR_OK);
  WT_ASSERT_INT_EQ(weir_sched_commit(e.s, c, 0, &t2, 1), WEIR_OK);
  WT_ASSERT_INT_EQ(weir_sched_fork(e.s, a, 3, NULL, &c), WEIR_E_INVAL); /* not all computed */
  int32_t nb;
  int32_t shared = weir_kv_seq_block_table(a->kv, &nb)[1];
  WT_ASSERT_INT_EQ(weir_sched_step(e.s, &o), WEIR_OK);
  check_plan(&e, &o, 4, 64);
  WT_ASSERT_INT_EQ(o.num_items, 2);
  /* Both write position 6 of the shared partial block: the first gets a copy, the second,
   * then its only owner, writes in place. */
  WT_ASSERT_INT_EQ(o.num_copies, 1);
  WT_ASSERT_INT_EQ(o.copies[0].src, shared);
  CU_ASSERT(weir_kv_seq_block_table(a->kv, &nb)[1] != weir_kv_seq_block_table(c->kv, &nb)[1]);
  WT_ASSERT_INT_EQ(weir_kv_seq_block_table(a->kv, &nb)[0],
                   weir_kv_seq_block_table(c->kv, &nb)[0]);
  free(p);
  env_free(&e);
}

/* Random arrivals, aborts, drafts with random acceptance, forks and failed forwards over a
 * small pool, under both policies: every plan is checked, nothing is lost, and the pool is
 * empty at the end. */
static uint64_t rs = 0x2545F4914F6CDD1DULL;
static uint32_t rnd(uint32_t n) {
  rs ^= rs << 13;
  rs ^= rs >> 7;
  rs ^= rs << 17;
  return (uint32_t)(rs % n);
}

#define S_MAX 512
static void stress(weir_sched_policy policy) {
  env e = mk(24, 4, 1, 6, 32, policy);
  int32_t *bases = mkprompt(64, 21);
  int32_t max_new[S_MAX];
  weir_sched_seq *live[S_MAX];
  memset(live, 0, sizeof(live));
  uint64_t next_id = 0;
  int finished = 0, aborted = 0, forks = 0, undos = 0, drafted = 0;
  weir_sched_out o;
  for (int it = 0; it < 4000; it++) {
    int arriving = it < 3000;
    if (arriving && next_id < S_MAX - 8 && rnd(3) == 0) {
      int32_t prompt[32];
      int32_t n = 1 + (int32_t)rnd(30);
      int32_t off = (int32_t)rnd(4) * 8; /* shared prefixes */
      memcpy(prompt, bases + off, (size_t)n * sizeof(int32_t));
      if (rnd(2)) prompt[n - 1] = (int32_t)rnd(1000);
      max_new[next_id] = 1 + (int32_t)rnd(25);
      live[next_id] = add(&e, next_id, prompt, n, (int32_t)rnd(4));
      next_id++;
    }
    if (rnd(20) == 0 && next_id) {
      uint64_t id = rnd((uint32_t)next_id);
      if (live[id]) {
        weir_sched_seq *got = NULL;
        WT_ASSERT_INT_EQ(weir_sched_abort(e.s, id, &got), WEIR_OK);
        CU_ASSERT(got == live[id]);
        weir_sched_seq_free(e.s, got);
        live[id] = NULL;
        aborted++;
      }
    }
    for (uint64_t id = 0; id < next_id; id++) {
      weir_sched_seq *q = live[id];
      if (q && q->state == WEIR_SEQ_RUNNING && q->num_computed == q->num_tokens - 1 &&
          !q->num_drafts && rnd(2)) {
        int32_t d[4] = {(int32_t)rnd(50), (int32_t)rnd(50), (int32_t)rnd(50), 7};
        WT_ASSERT_INT_EQ(weir_sched_add_drafts(e.s, q, d, 1 + (int32_t)rnd(4)), WEIR_OK);
        drafted++;
      }
    }
    WT_ASSERT_INT_EQ(weir_sched_step(e.s, &o), WEIR_OK);
    WT_ASSERT_INT_EQ(o.num_failed, 0);
    check_plan(&e, &o, 6 + forks, 32);
    for (int32_t k = 0; k < o.num_preempted; k++)
      WT_ASSERT_INT_EQ(o.preempted[k]->state, WEIR_SEQ_WAITING);
    if (o.num_items && rnd(25) == 0) { /* a failed forward, retried next step */
      weir_sched_undo_step(e.s, &o);
      assert_kv_ok(&e);
      undos++;
      continue;
    }
    weir_sched_seq *fin[64];
    int nfin = 0;
    for (int32_t k = 0; k < o.num_items; k++) {
      const weir_sched_item *item = &o.items[k];
      weir_sched_seq *q = item->seq;
      if (!item->num_logits) continue;
      if (!item->num_drafts && next_id < S_MAX - 8 && rnd(30) == 0) {
        weir_sched_seq *c = NULL;
        WT_ASSERT_INT_EQ(weir_sched_fork(e.s, q, next_id, NULL, &c), WEIR_OK);
        max_new[next_id] = max_new[q->id];
        live[next_id++] = c;
        int32_t t = next_token(c) + 1;
        WT_ASSERT_INT_EQ(weir_sched_commit(e.s, c, 0, &t, 1), WEIR_OK);
        forks++;
      }
      int32_t acc = (int32_t)rnd((uint32_t)item->num_drafts + 1);
      int32_t t = next_token(q);
      WT_ASSERT_INT_EQ(weir_sched_commit(e.s, q, acc, &t, 1), WEIR_OK);
      WT_ASSERT_INT_EQ(q->num_computed, q->num_tokens - 1);
      WT_ASSERT_INT_EQ(weir_kv_seq_len(q->kv), q->num_computed);
      if (q->num_tokens - q->num_prompt >= max_new[q->id]) fin[nfin++] = q;
    }
    for (int i = 0; i < nfin; i++) {
      live[fin[i]->id] = NULL;
      weir_sched_finish(e.s, fin[i]);
      weir_sched_seq_free(e.s, fin[i]);
      finished++;
    }
    if (!arriving && weir_sched_num_running(e.s) + weir_sched_num_waiting(e.s) == 0) break;
  }
  WT_ASSERT_INT_EQ(weir_sched_num_running(e.s) + weir_sched_num_waiting(e.s), 0);
  WT_ASSERT_INT_EQ(finished + aborted, (int)next_id);
  WT_ASSERT_INT_EQ(kvstats(&e).used_blocks, 0);
  weir_sched_stats st;
  weir_sched_stats_get(e.s, &st);
  CU_ASSERT(st.num_preemptions > 10);
  CU_ASSERT(forks > 0 && undos > 0 && drafted > 100 && aborted > 0);
  CU_ASSERT(kvstats(&e).prefix_hits_tokens > 0);
  CU_ASSERT(kvstats(&e).cow_copies > 0);
  assert_kv_ok(&e);
  free(bases);
  env_free(&e);
}

static void test_stress_fcfs(void) { stress(WEIR_SCHED_FCFS); }
static void test_stress_priority(void) { stress(WEIR_SCHED_PRIORITY); }

int main(void) {
  static const wt_test tests[] = {
      {"config", test_config},
      {"decode_before_prefill", test_decode_before_prefill},
      {"chunked_prefill_5000", test_chunked_prefill_5000},
      {"mid_prefill_continues_first", test_mid_prefill_continues_first},
      {"budget_limits", test_budget_limits},
      {"preemption_tiny_pool", test_preemption_tiny_pool},
      {"preempt_newest", test_preempt_newest},
      {"too_big_fails", test_too_big_fails},
      {"priority", test_priority},
      {"abort_frees_now", test_abort_frees_now},
      {"pause_resume", test_pause_resume},
      {"prefix_reuse", test_prefix_reuse},
      {"prompt_logits", test_prompt_logits},
      {"speculative_drafts", test_speculative_drafts},
      {"fork_cow_copies", test_fork_cow_copies},
      {"stress_fcfs", test_stress_fcfs},
      {"stress_priority", test_stress_priority},
      {NULL, NULL}};
  return wt_run_suite("scheduler", tests);
}
