/* One engine step (engine_internal.h): schedule, copy blocks, fill the batch, let the draft
 * model draft, run the target, then sample each row (or verify its drafts) and commit. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "engine/engine_internal.h"
#include "metrics/metrics.h"
#include "util/log.h"

static void fail_step(weir_engine *e, weir_sched_out *out, int rc) {
  weir_log(WEIR_LOG_ERROR, LOG_COMPONENT, "step failed: %s; ending its %d requests",
           weir_strerror(rc), out->num_items);
  weir_sched_undo_step(e->sched, out);
  for (int32_t i = 0; i < out->num_items; i++) {
    engine_req *r = out->items[i].seq->user;
    weir__engine_req_finish(e, r, WEIR_FINISH_ERROR, rc, "the model step failed", NULL, 0);
  }
}

/* Samples rows [0, nrows) of e->rows from `logits` (consecutive rows), records each token and
 * emits its event. */
static void sample_segment(weir_engine *e, float *logits, int32_t nrows) {
  if (nrows == 0) return;
  /* Constrained rows sample under their matcher's mask: the masks of all of them at once,
   * then each row's params copied with `allowed` pointing at its mask. */
  int32_t nc = 0;
  for (int32_t k = 0; k < nrows; k++)
    if (e->row_req[k]->matcher) e->cms[nc++] = e->row_req[k]->matcher;
  int rc = WEIR_OK;
  if (nc > 0) {
    if (nc > 1 && !e->mask_pool && e->mask_threads != 1 &&
        weir_threadpool_create(e->mask_threads, &e->mask_pool) != WEIR_OK)
      e->mask_threads = 1; /* no pool: the masks are computed here, one after another */
    rc = weir_matchers_fill_masks(e->cms, nc, e->masks, e->mask_words, e->mask_pool);
    for (int32_t k = 0, c = 0; rc == WEIR_OK && k < nrows; k++) {
      if (!e->row_req[k]->matcher) continue;
      e->row_params[c] = e->row_req[k]->sampling;
      e->row_params[c].allowed = e->masks + (size_t)c * e->mask_words;
      e->rows[k].params = &e->row_params[c++];
    }
  }
  if (rc == WEIR_OK)
    rc = weir_sampler_call_sample(&e->scall, e->rows, nrows, logits, e->vocab, e->results);
  for (int32_t k = 0; k < nrows; k++) {
    engine_req *r = e->row_req[k];
    const int32_t tok = e->results[k].token;
    if (rc == WEIR_OK && r->matcher && weir_matcher_accept_token(r->matcher, tok) != WEIR_OK) {
      /* Only a sampler that ignores `allowed` gets here. */
      weir__engine_req_finish(
          e, r, WEIR_FINISH_ERROR, WEIR_E_INTERNAL,
          "the sampler produced a token the output constraint does not allow", NULL, 0);
      continue;
    }
    if (rc == WEIR_OK) rc = weir_sched_commit(e->sched, r->seq, 0, &e->results[k].token, 1);
    if (rc != WEIR_OK) {
      weir__engine_req_finish(e, r, WEIR_FINISH_ERROR, rc, "sampling failed", NULL, 0);
      continue;
    }
    /* A constrained output ends when its grammar is complete and nothing can extend it, or
     * when the constraint accepted an end-of-sequence token. */
    const int done = r->matcher && (weir_matcher_is_ended(r->matcher) ||
                                    (weir_matcher_is_complete(r->matcher) &&
                                     !weir_matcher_can_continue(r->matcher)));
    if (!weir__engine_req_on_token(e, r, &e->results[k]) && done)
      weir__engine_req_finish_flush(e, r, WEIR_FINISH_STOP);
  }
}

/* Prompt logprobs of one item's prompt rows (weir_sched_item.num_prompt_logits), into its
 * request's plp; the chunk that scores the last prompt token delivers them all in one event,
 * once (a chunk recomputed after a preemption scores the same positions again, with the same
 * result). Returns 1 when the request ended (scoring failed), else 0. */
static int score_prompt(weir_engine *e, const weir_sched_item *it, const float *logits) {
  engine_req *r = it->seq->user;
  if (!r->plp) return 0;
  const int32_t top = r->sampling.num_logprobs > 0 ? r->sampling.num_logprobs : 0;
  int rc = weir_sampler_call_score(&e->scall, logits, it->num_prompt_logits, e->vocab,
                                   it->seq->tokens + it->start + 1, top, r->plp + it->start);
  if (rc != WEIR_OK) {
    weir__engine_req_finish(e, r, WEIR_FINISH_ERROR, rc, "scoring the prompt failed", NULL, 0);
    return 1;
  }
  if (!r->plp_sent && it->start + it->num_prompt_logits == r->num_prompt - 1) {
    weir_gen_event ev = {0};
    weir__engine_fill_usage(r, &ev);
    ev.text = "";
    ev.prompt_logprobs = r->plp;
    ev.num_prompt_logprobs = r->num_prompt - 1;
    r->plp_sent = 1;
    r->cb(r->user, &ev);
  }
  return 0;
}

/* Runs one scheduler step. Returns 1 when work was done, 0 when idle. */
/* Samples or verifies every item's logits rows. Rows come in item order, num_logits per
 * item. Items without drafts are sampled together, a run of consecutive ones per sampler
 * call; items with drafts are verified one by one. */
static void sample_step(weir_engine *e, const weir_sched_out *out, float *logits) {
  int32_t row = 0, seg_start = 0, nrows = 0;
  for (int32_t i = 0; i < out->num_items; i++) {
    const weir_sched_item *it = &out->items[i];
    if (it->num_logits == 0) continue;
    engine_req *r = it->seq->user;
    if (it->num_prompt_logits > 0) {
      /* Prompt rows first; the final chunk's last row then starts a new segment. */
      sample_segment(e, logits + (size_t)seg_start * (size_t)e->vocab, nrows);
      nrows = 0;
      const int ended = score_prompt(e, it, logits + (size_t)row * (size_t)e->vocab);
      row += it->num_prompt_logits;
      if (ended) row += it->num_logits - it->num_prompt_logits;
      if (ended || it->num_logits == it->num_prompt_logits) continue;
    }
    if (it->num_drafts == 0) {
      if (nrows == 0) seg_start = row;
      e->rows[nrows] = weir__engine_make_row(e, r, 0, weir__engine_suppress_row(e, nrows));
      e->row_req[nrows++] = r;
      row += 1;
      continue;
    }
    sample_segment(e, logits + (size_t)seg_start * (size_t)e->vocab, nrows);
    nrows = 0;
    weir__engine_verify_item(e, it, logits + (size_t)row * (size_t)e->vocab);
    row += it->num_logits;
  }
  sample_segment(e, logits + (size_t)seg_start * (size_t)e->vocab, nrows);
}

/* Whether every item of the step decodes (one token of its own, maybe drafts, no prompt). */
static int decode_only(const weir_sched_out *out) {
  for (int32_t i = 0; i < out->num_items; i++) {
    const weir_sched_item *it = &out->items[i];
    if (it->num_new_tokens - it->num_drafts != 1 || it->num_prompt_logits != 0 ||
        it->start < it->seq->num_prompt - 1)
      return 0;
  }
  return 1;
}

/* What this speculation length achieved, on steps of decode alone (a prefill's cost would
 * count against whichever length ran beside it). */
static void observe_spec(weir_engine *e, const weir_sched_out *out, double seconds) {
  weir_metric_record(e->em.spec_step_drafts, (double)e->step_drafts);
  weir_metric_record(e->em.spec_len, (double)e->step_k);
  if (out->num_items != e->step_n) return;
  for (int32_t i = 0; i < out->num_items; i++) {
    const weir_sched_item *it = &out->items[i];
    if (it->num_new_tokens - it->num_drafts != 1 || it->num_prompt_logits != 0) return;
  }
  /* The engine's first drafting step pays one-time costs (its draft pass 4x the next one's;
   * tens of milliseconds before the KV pool was committed at creation): not what drafting
   * costs, so the policy does not see it. */
  if (e->step_k > 0 && !e->spec_warm) {
    e->spec_warm = 1;
    return;
  }
  /* A step in which no sequence drafted is a plain decode step, whatever length was chosen:
   * it rates no drafts too (spec_policy.h). Not with the draft model, whose passes may
   * still have caught a sequence's KV up in it. */
  const int plain = e->step_k == 0 || (e->step_drafts == 0 && !e->draft);
  weir_spec_observe(&e->spec, e->step_n, e->step_k, e->step_tokens, seconds, plain);
}

/* The step profile's clock: the engine thread's CPU time, which a busy machine's preemption
 * does not inflate (with device.threads = 1 it is all of a step's work). */
static double prof_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int weir__engine_run_step(weir_engine *e) {
  weir_sched_out out;
  memset(&out, 0, sizeof out);
  const double t_step = weir__engine_now();
  /* CPU time at the step's start (the policy's clock, spec_cpu_clock), then at the end of
   * each phase (the step profile). */
  const int timed = e->prof_on || e->step_trace != NULL; /* each phase timed */
  const double cpu0 = timed || e->spec_cpu_clock ? prof_now() : 0;
  double t_prof[5] = {0};
  e->step_tokens = e->step_drafts = 0;
  e->step_n = e->step_k = 0;
  e->step_draft_fwd = 0;
  e->step_draft_passes = e->step_draft_tokens = e->step_device_picks = 0;
  e->step_verify_picks = 0;
  if (e->drafter) {
    weir__engine_propose_drafts(e);
    if (!e->draft) weir_metric_add(e->em.spec_seconds, weir__engine_now() - t_step);
  }
  if (timed) t_prof[0] = prof_now();
  int rc = weir_sched_step(e->sched, &out);
  /* A preempted sequence's blocks are gone, its draft KV with them. */
  for (int32_t i = 0; i < out.num_preempted; i++)
    ((engine_req *)out.preempted[i]->user)->dkv = 0;
  /* Sequences the scheduler failed are finished there and still owe their final event,
   * whether or not the step as a whole succeeded. */
  for (int32_t i = 0; i < out.num_failed; i++) {
    engine_req *r = out.failed[i]->user;
    weir__engine_req_finish(e, r, WEIR_FINISH_ERROR, WEIR_E_NOSPACE,
                            "the request does not fit in the KV cache", NULL, 0);
  }
  if (rc != WEIR_OK) {
    weir_log(WEIR_LOG_ERROR, LOG_COMPONENT, "scheduler: %s", weir_strerror(rc));
    return 0;
  }
  if (out.num_items == 0) return out.num_failed > 0;

  rc = weir_kv_pool_copy(e->pool, out.copies, out.num_copies);
  if (rc != WEIR_OK) {
    fail_step(e, &out, rc);
    return 1;
  }

  /* The target's batch: the scheduler fills the arrays (the cache's block tables and slots). */
  weir_step_batch *tb = &e->tb;
  weir_step_batch_reset(tb, out.max_blocks_per_seq);
  weir_sched_batch_arrays a = {.input_ids = tb->tokens,
                               .positions = tb->positions,
                               .slot_mapping = tb->slots,
                               .query_start_loc = tb->query_start_loc,
                               .context_lens = tb->context_lens,
                               .block_tables = tb->block_tables,
                               .block_table_stride = out.max_blocks_per_seq,
                               .logits_rows = tb->logit_rows};
  rc = weir_sched_fill_batch(e->sched, &out, &a);
  if (rc != WEIR_OK) {
    fail_step(e, &out, rc);
    return 1;
  }
  tb->num_tokens = out.num_tokens;
  tb->num_seqs = out.num_items;
  tb->num_rows = out.num_logits;
  const double t = weir__engine_now();
  for (int32_t i = 0; i < out.num_items; i++) {
    engine_req *r = out.items[i].seq->user;
    if (r->t_sched == 0) r->t_sched = t;
  }
  if (timed) t_prof[1] = prof_now();
  if (e->draft) {
    const double t_draft = weir__engine_now();
    weir__engine_run_draft(e, &out);
    weir_metric_add(e->em.spec_seconds, weir__engine_now() - t_draft);
  }
  if (timed) t_prof[2] = prof_now();
  const weir_llama_batch b = weir_step_batch_view(tb);
  float *logits = NULL;
  rc = weir_llama_forward(e->model, &b, &logits);
  if (rc != WEIR_OK) {
    fail_step(e, &out, rc);
    return 1;
  }
  if (timed) t_prof[3] = prof_now();
  sample_step(e, &out, logits);
  weir__engine_spec_trace_step(e);
  if (e->drafter)
    observe_spec(e, &out,
                 e->spec_cpu_clock ? prof_now() - cpu0 : weir__engine_now() - t_step);
  if (timed) t_prof[4] = prof_now();
  if (e->step_trace)
    fprintf(e->step_trace, "%.6f %.1f %.1f %d %d %d %d %lld %lld %d %d %.1f %.1f %.1f %.1f\n",
            t_step, (weir__engine_now() - t_step) * 1e6, (t_prof[4] - cpu0) * 1e6,
            out.num_items, out.num_tokens, out.num_prefill_tokens, e->step_k,
            (long long)e->step_drafts, (long long)e->step_tokens, out.num_preempted,
            out.max_context_len, (t_prof[1] - cpu0) * 1e6, (t_prof[2] - t_prof[1]) * 1e6,
            (t_prof[3] - t_prof[2]) * 1e6, (t_prof[4] - t_prof[3]) * 1e6);
  if (e->prof_on && decode_only(&out)) {
    const int32_t n = out.num_tokens < WEIR_PROF_TOKENS ? out.num_tokens : WEIR_PROF_TOKENS;
    e->prof[n].steps++;
    e->prof[n].tokens_out += (uint64_t)e->step_tokens;
    e->prof[n].propose += t_prof[0] - cpu0;
    e->prof[n].sched += t_prof[1] - t_prof[0];
    e->prof[n].draft += t_prof[2] - t_prof[1];
    e->prof[n].draft_fwd += e->step_draft_fwd;
    e->prof[n].draft_passes += (uint64_t)e->step_draft_passes;
    e->prof[n].forward += t_prof[3] - t_prof[2];
    e->prof[n].sample += t_prof[4] - t_prof[3];
    e->prof[n].total += t_prof[4] - cpu0;
  } else if (e->prof_on) {
    const int drafted = e->step_drafts > 0;
    e->prof_prefill[drafted].steps++;
    e->prof_prefill[drafted].tokens_out += (uint64_t)e->step_tokens;
    e->prof_prefill[drafted].rows += (uint64_t)out.num_tokens;
    e->prof_prefill[drafted].drafts += (uint64_t)e->step_drafts;
    e->prof_prefill[drafted].total += prof_now() - cpu0;
  }
  return 1;
}

/* The step profile (WEIR_STEP_PROFILE): mean microseconds per phase for each step size of
 * the decode steps (a step with a prompt chunk is not counted), then their tokens per second
 * of engine-thread CPU time. */
void weir__engine_prof_log(const weir_engine *e) {
  if (!e->prof_on) return;
  double tokens = 0, secs = 0;
  for (int32_t n = 1; n <= WEIR_PROF_TOKENS; n++) {
    const double c = (double)e->prof[n].steps;
    if (c == 0) continue;
    tokens += (double)e->prof[n].tokens_out;
    secs += e->prof[n].total;
    /* The draft model's share, split: its forward passes (per pass) and the rest (rows,
     * greedy argmax or the sampler's q, the draws). */
    char dsplit[128] = "";
    if (e->prof[n].draft_passes > 0)
      snprintf(dsplit, sizeof dsplit, " (%.2f passes of %.1f, the rest %.1f)",
               (double)e->prof[n].draft_passes / c,
               1e6 * e->prof[n].draft_fwd / (double)e->prof[n].draft_passes,
               1e6 * (e->prof[n].draft - e->prof[n].draft_fwd) / c);
    weir_log(WEIR_LOG_INFO, LOG_COMPONENT,
             "step profile (thread CPU time), %d%s tokens: %llu steps, %.2f tokens out/step; "
             "us/step: propose %.1f, schedule+fill %.1f, draft model %.1f%s, forward %.1f, "
             "sample/verify+commit %.1f, total %.1f",
             n, n == WEIR_PROF_TOKENS ? "+" : "", (unsigned long long)e->prof[n].steps,
             (double)e->prof[n].tokens_out / c, 1e6 * e->prof[n].propose / c,
             1e6 * e->prof[n].sched / c, 1e6 * e->prof[n].draft / c, dsplit,
             1e6 * e->prof[n].forward / c, 1e6 * e->prof[n].sample / c,
             1e6 * e->prof[n].total / c);
  }
  if (secs > 0)
    weir_log(WEIR_LOG_INFO, LOG_COMPONENT,
             "step profile (thread CPU time), decode: %.0f tokens in %.1f ms, %.0f tokens per "
             "CPU second", tokens, secs * 1e3, tokens / secs);
  for (int d = 0; d < 2; d++)
    if (e->prof_prefill[d].steps)
      weir_log(WEIR_LOG_INFO, LOG_COMPONENT,
               "step profile (thread CPU time), steps with a prompt chunk, %s: %llu steps, "
               "%llu tokens run (drafts included), %llu drafts, %llu tokens out, %.1f ms",
               d ? "drafting" : "no drafts", (unsigned long long)e->prof_prefill[d].steps,
               (unsigned long long)e->prof_prefill[d].rows,
               (unsigned long long)e->prof_prefill[d].drafts,
               (unsigned long long)e->prof_prefill[d].tokens_out, e->prof_prefill[d].total * 1e3);
}
