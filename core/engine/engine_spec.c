/* Speculative decoding (engine_internal.h): drafts from the drafter plugin or from the draft
 * model the engine runs itself, and their verification by the rejection rule; the policy that
 * picks the speculation length is spec_policy.c. */
#include <math.h>
#include <string.h>
#include <time.h>

#include "engine/engine_internal.h"
#include "util/log.h"
#include "weir/rng.h"

/* The draft model's distribution of request r's drafted position j in this step, or NULL
 * (a deterministic drafter: q is one-hot on the draft). */
static const float *draft_q(const weir_engine *e, const engine_req *r, int32_t j) {
  if (!e->draft || r->dslot < 0 || (j < 64 && (r->dgreedy >> j & 1))) return NULL;
  return e->qbuf + ((size_t)j * (size_t)e->max_seqs_step + (size_t)r->dslot) * (size_t)e->vocab;
}

/* Whether row `row` (a draft or verification row of request r) is plain greedy: temperature 0 with nothing
 * that changes the logits first (penalties, bias, suppressed tokens, a mask). Its draft is
 * then the argmax of the logits, found without the sampler's distribution, and verified as
 * a deterministic draft (q one-hot on it: the same rule as the distribution would give). */
static int plain_greedy(const engine_req *r, const weir_sampling_row *row) {
  const weir_sampling_params *p = &r->sampling;
  return p->temperature <= 0 && row->num_suppress_tokens == 0 && p->repetition_penalty == 1 &&
         p->presence_penalty == 0 && p->frequency_penalty == 0 && p->num_logit_bias == 0 &&
         !p->allowed;
}

/* Rows [0, rows) of `width` floats of a step's logits, where the host can read them: the
 * logits themselves on a CPU device, else a copy in e->hlog (a CUDA device keeps them on the
 * GPU, where its sampler reads them). NULL when the copy fails. */
static const float *host_rows(weir_engine *e, const float *logits, int32_t rows, int32_t width) {
  if (e->logits_host) return logits;
  const size_t n = (size_t)rows * (size_t)width;
  if (n > e->hlog_floats) return NULL;
  const weir_plugin *dev = e->rt.plugins.device;
  const weir_device_ops *ops = dev->ops;
  if (ops->copy_d2h(dev->self, e->hlog, logits, n * sizeof(float)) != WEIR_OK) return NULL;
  return e->hlog;
}

/* The host's greedy pick, for a device plugin without argmax_rows (ABI < 1.8; dargmax 0) and
 * for weir_engine_opts.spec_host_argmax alone: every device plugin of this tree picks with its
 * own op (the CPU device's is the reference, kernels/cpu/argmax.h). The same rule: the lowest
 * id of the largest of n logits (the sampler's greedy rule); `fallback` when none is a number
 * above -inf. */
static int32_t argmax_row(const float *x, int32_t n, int32_t fallback) {
  int32_t best = fallback;
  float bv = -INFINITY;
  for (int32_t v = 0; v < n; v++)
    if (x[v] > bv) {
      bv = x[v];
      best = v;
    }
  return best;
}

/* The softmax's largest probability of a row of n logits whose largest is at `best`: the
 * draft's confidence in its greedy draft. 0 when the row has no number above -inf. The host
 * fallback's, as argmax_row. */
static float top_prob(const float *x, int32_t n, int32_t best) {
  const float m = x[best];
  if (!(m > -INFINITY)) return 0.0f;
  float sum = 0.0f;
  for (int32_t v = 0; v < n; v++) sum += expf(x[v] - m);
  return sum > 0.0f ? 1.0f / sum : 0.0f;
}

/* The largest of n probabilities (a sampled draft's confidence). Sixteen running maxima, not
 * one: a single one is a chain of dependent max instructions, one latency per element;
 * sixteen run side by side, several times faster on a 4,096-wide row. Max is exact in any
 * order, and NaN never replaces a value either way, so the result is the single chain's. */
static float max_prob(const float *q, int32_t n) {
  float acc[16] = {0};
  int32_t v = 0;
  for (; v + 16 <= n; v += 16)
    for (int j = 0; j < 16; j++) acc[j] = q[v + j] > acc[j] ? q[v + j] : acc[j];
  float m = 0.0f;
  for (int j = 0; j < 16; j++) m = acc[j] > m ? acc[j] : m;
  for (; v < n; v++) m = q[v] > m ? q[v] : m;
  return m;
}

/* Speculative verification of one item: the target distributions p of its 1 + n rows, then
 * the rejection rule. Draft j, drawn from the drafter's distribution q (one-hot for a
 * deterministic drafter such as ngram; the draft model's for a draft model), is accepted with
 * probability min(1, p(x) / q(x)); at the first rejection the token is drawn from the
 * normalised residual max(0, p - q); when every draft is accepted a bonus token is drawn from
 * the last row. The output distribution is the target's whatever q is, and greedy output is
 * identical to decoding without drafts. */
void weir__engine_verify_item(weir_engine *e, const weir_sched_item *it, float *logits) {
  weir_sched_seq *s = it->seq;
  engine_req *r = s->user;
  const int32_t nd = it->num_drafts, nr = nd + 1;
  int32_t *toks = e->dtokens; /* scratch: accepted drafts then the drawn token */
  memcpy(toks, s->tokens + it->start + 1, sizeof(int32_t) * (size_t)nd);
  if (e->spec_on_drafts && nd > 0) e->spec_on_drafts(e->spec_user, r->id, toks, nd);
  for (int32_t j = 0; j < nr; j++)
    e->rows[j] = weir__engine_make_row(e, r, j, weir__engine_suppress_row(e, j));
  int rc = WEIR_OK;
  if (r->matcher) {
    /* Row j samples under the constraint as it stands after drafts 0..j-1 (all allowed:
     * propose_drafts kept only those); the matcher is then put back. */
    int32_t stepped = 0;
    for (int32_t j = 0; j < nr && rc == WEIR_OK; j++) {
      uint32_t *mask = e->masks + (size_t)j * e->mask_words;
      rc = weir_matcher_fill_mask(r->matcher, mask);
      e->row_params[j] = r->sampling;
      e->row_params[j].allowed = mask;
      e->rows[j].params = &e->row_params[j];
      if (rc == WEIR_OK && j < nd) {
        rc = weir_matcher_accept_token(r->matcher, toks[j]);
        if (rc == WEIR_OK) stepped++;
      }
    }
    if (stepped > 0) weir_matcher_rollback(r->matcher, stepped);
    if (rc != WEIR_OK) {
      weir__engine_req_finish(e, r, WEIR_FINISH_ERROR, rc, "the output constraint failed", NULL, 0);
      return;
    }
  }
  /* Every row plain greedy: each row's distribution is one-hot on its argmax, so the rule
   * accepts draft j exactly when it is row j's argmax, and the token after the accepted
   * drafts is the argmax of the first row that disagrees (or of the last): found without
   * the sampler, and without looking at the rows past that one. */
  int greedy = !r->matcher;
  for (int32_t j = 0; j < nr && greedy; j++) greedy = plain_greedy(r, &e->rows[j]);
  int32_t accepted = 0, token = -1;
  if (greedy && e->dargmax) {
    /* Every row's argmax picked by the device plugin, nr ints copied back (the same rule:
     * the lowest id of the largest logit): instead of nr rows where the logits are device
     * memory, instead of the host's scalar scan on the CPU device (a memcpy of the picks). */
    const weir_plugin *dev = e->rt.plugins.device;
    const weir_device_ops *ops = dev->ops;
    rc = ops->argmax_rows(dev->self, e->dev_pick, NULL, logits, nr, e->vocab, NULL, 0);
    if (rc == WEIR_OK)
      rc = ops->copy_d2h(dev->self, e->d_pick, e->dev_pick, (size_t)nr * sizeof(int32_t));
    if (rc != WEIR_OK) {
      weir__engine_req_finish(e, r, WEIR_FINISH_ERROR, WEIR_E_DEVICE,
                              "picking the verification tokens failed", NULL, 0);
      return;
    }
    e->step_verify_picks++;
    for (int32_t j = 0; j < nr && token < 0; j++) {
      if (j < nd && e->d_pick[j] == toks[j]) accepted++;
      else token = e->d_pick[j];
    }
    goto verified;
  }
  if (greedy) {
    const float *hl = host_rows(e, logits, nr, e->vocab);
    if (!hl) {
      weir__engine_req_finish(e, r, WEIR_FINISH_ERROR, WEIR_E_DEVICE,
                              "reading the verification logits failed", NULL, 0);
      return;
    }
    for (int32_t j = 0; j < nr && token < 0; j++) {
      const int32_t a = argmax_row(hl + (size_t)j * (size_t)e->vocab, e->vocab, 0);
      if (j < nd && a == toks[j]) accepted++;
      else token = a;
    }
    goto verified;
  }
  /* Row j's distribution is computed only once the drafts before it are accepted: at the
   * draft's acceptance about half of a step's rows are never looked at. */
  for (int32_t j = 0; j < nd; j++) {
    float *row = e->probs + (size_t)j * (size_t)e->vocab;
    rc = weir_sampler_call_probs(&e->scall, e->rows + j, 1, logits + (size_t)j * (size_t)e->vocab,
                                 e->vocab, row);
    if (rc != WEIR_OK) {
      weir__engine_req_finish(e, r, WEIR_FINISH_ERROR, rc, "sampling failed", NULL, 0);
      return;
    }
    const float *q = draft_q(e, r, j);
    const int32_t x = toks[j];
    const double qx = q ? (double)q[x] : 1.0;
    if (qx > 0 && weir_rng_uniform(r->rng) * qx < (double)row[x]) {
      accepted++;
      continue;
    }
    if (q && !e->spec_break_residual) {
      for (int32_t v = 0; v < e->vocab; v++) row[v] = row[v] > q[v] ? row[v] - q[v] : 0.0f;
    } else if (!q) {
      row[x] = 0;
    }
    token = weir__engine_draw_from(row, e->vocab, weir_rng_uniform(r->rng), x);
    break;
  }
  if (token < 0) {
    float *row = e->probs + (size_t)nd * (size_t)e->vocab;
    rc = weir_sampler_call_probs(&e->scall, e->rows + nd, 1,
                                 logits + (size_t)nd * (size_t)e->vocab, e->vocab, row);
    if (rc != WEIR_OK) {
      weir__engine_req_finish(e, r, WEIR_FINISH_ERROR, rc, "sampling failed", NULL, 0);
      return;
    }
    token = weir__engine_draw_from(row, e->vocab, weir_rng_uniform(r->rng), 0);
  }
verified:
  e->spec_drafted += (uint64_t)nd;
  e->spec_accepted += (uint64_t)accepted;
  e->step_drafts += nd;
  for (int32_t j = 0; j < nd && j < e->em.spec_positions; j++) {
    weir_metric_add(e->em.spec_pos_draft[j], 1);
    if (j < accepted) weir_metric_add(e->em.spec_pos_accepted[j], 1);
  }
  r->acceptance = weir_spec_acceptance_update(r->acceptance, nd, accepted);
  toks[accepted] = token;
  int done = 0;
  if (r->matcher) {
    for (int32_t j = 0; j <= accepted && rc == WEIR_OK; j++)
      rc = weir_matcher_accept_token(r->matcher, toks[j]);
    if (rc != WEIR_OK) {
      weir__engine_req_finish(e, r, WEIR_FINISH_ERROR, WEIR_E_INTERNAL,
                              "a verified token is not allowed by the output constraint", NULL, 0);
      return;
    }
    done = weir_matcher_is_ended(r->matcher) ||
           (weir_matcher_is_complete(r->matcher) && !weir_matcher_can_continue(r->matcher));
  }
  rc = weir_sched_commit(e->sched, s, accepted, &token, 1);
  if (rc != WEIR_OK) {
    weir__engine_req_finish(e, r, WEIR_FINISH_ERROR, rc, "could not record the tokens", NULL, 0);
    return;
  }
  /* The draft's KV past the rejected drafts is rolled back with the target's. */
  if (r->dkv > s->num_computed) r->dkv = s->num_computed;
  for (int32_t j = 0; j <= accepted; j++) {
    weir_sample_result res = {.token = toks[j]};
    if (weir__engine_req_on_token(e, r, &res)) return;
  }
  if (done) weir__engine_req_finish_flush(e, r, WEIR_FINISH_STOP);
}

/* The drafts a step may add to request r: within max_tokens and the context, as the step
 * yields accepted drafts + 1 tokens. */
static int32_t draft_room(const weir_engine *e, const engine_req *r, int32_t want) {
  int32_t room = r->max_tokens - r->num_output - 1;
  int32_t ctx_room = e->ctx_len - r->seq->num_tokens - 1;
  if (ctx_room < room) room = ctx_room;
  return want < room ? want : room;
}

/* Whether request r decodes this step with room for drafts (not scoring logprobs, not
 * opted out). */
static int can_draft(const engine_req *r) {
  const weir_sched_seq *s = r->seq;
  return s && s->state == WEIR_SEQ_RUNNING && s->num_drafts == 0 &&
         s->num_computed == s->num_tokens - 1 && r->sampling.num_logprobs < 0 && !r->no_spec;
}

/* The speculation length of this step (spec_policy.h), from the batch the step will run:
 * every running sequence and every waiting one it may admit, not only those in decode. A
 * step that admits a request is never rated (its prefill), so picking its length in the
 * smaller bucket of its decode sequences ran that bucket's arms, learned from few steps,
 * with the draft model catching up beside a prefill (issue 32: the 4-stream guard cells). */
static int32_t choose_k(weir_engine *e) {
  int32_t n = 0, decode = 0;
  for (engine_req *r = e->live; r; r = r->live_next) {
    const weir_sched_seq *s = r->seq;
    if (!s || (s->state != WEIR_SEQ_RUNNING && s->state != WEIR_SEQ_WAITING)) continue;
    n++;
    decode += s->state == WEIR_SEQ_RUNNING && s->num_computed >= s->num_prompt;
  }
  if (n > e->max_seqs_step) n = e->max_seqs_step; /* a step carries no more */
  e->step_n = n;
  int32_t k = -1;
  if (decode > 0 && e->spec_force_k) { /* tests only: the length held where the test wants it */
    k = e->spec_force_k(e->spec_user, e->spec_decode_steps);
    if (k > e->spec_k) k = e->spec_k;
  }
  if (decode > 0) e->spec_decode_steps++;
  if (k < 0 && decode > 0 && e->spec_trace && e->spec.adaptive) {
    /* The run that ends here, as the policy measured it, and the one that begins. */
    const int b = weir_spec_bucket(n);
    const weir_spec_bucket_state *st = &e->spec.state[b];
    const weir_spec_arm *a = e->spec.arms[b];
    const uint32_t runs = st->runs;
    const int32_t was = st->cur, steps = st->run_steps;
    const double rate = st->run_seconds > 0 ? st->run_tokens / st->run_seconds : 0;
    k = weir_spec_choose(&e->spec, n);
    static const char *const why[WEIR_SPEC_WHY_N] = {"lead", "learn", "cold", "near", "climb",
                                                     "far"};
    if (st->runs != runs)
      weir_log(WEIR_LOG_INFO, LOG_COMPONENT,
               "spec run %u, %d seqs: k=%d ran %d rated steps at %.0f tok/s (k=0 %.0f, its arm "
               "%.0f); next k=%d (%s; arm %.0f tok/s, %u steps)",
               runs, n, a[was].k, steps, rate, a[0].tps, a[was].tps, k, why[st->why],
               a[st->cur].tps, a[st->cur].trials);
  }
  if (k < 0) k = decode > 0 ? weir_spec_choose(&e->spec, n) : 0; /* none to draft for: no run */
  e->step_k = k;
  return e->step_k;
}

/* How many drafts request r makes at the step's length k: cut by its acceptance, and none
 * (but a probe of one every WEIR_SPEC_PROBE * n steps) where its drafts do not pay for their rows
 * at the step's batch size (weir_spec_seq_pays; the adaptive policy only: a fixed length is
 * what the operator asked for). */
static int32_t seq_drafts(weir_engine *e, engine_req *r, int32_t k) {
  const int32_t want = weir_spec_seq_len(k, r->acceptance);
  if (want <= 0 || !e->spec.adaptive ||
      weir_spec_seq_pays(r->acceptance, e->step_n, e->spec_row_cost)) {
    r->spec_gated = 0;
    return want;
  }
  /* A probe every WEIR_SPEC_PROBE * n steps: 1 / WEIR_SPEC_PROBE of a row per step. */
  if (++r->spec_gated < WEIR_SPEC_PROBE * (e->step_n > 1 ? e->step_n : 1)) return 0;
  r->spec_gated = 0;
  return 1;
}

/* With a draft model: every decode sequence gets spec_k placeholder drafts, so that the step
 * schedules (and the KV manager allocates) their positions; run_draft then writes the draft
 * model's tokens over them before the target runs. Constrained requests are not drafted for
 * (their drafts would need a mask per drafted position). */
static void reserve_drafts(weir_engine *e, int32_t k) {
  /* The draft's pass 0 catches each drafting sequence up from its KV's end: at most a
   * step's tokens in all (the rest catch up without drafting, run_draft). */
  int64_t budget = e->max_tokens_step;
  for (engine_req *r = e->live; r; r = r->live_next) {
    if (!can_draft(r) || r->matcher) continue;
    const int64_t catch_up = (int64_t)r->seq->num_computed - r->dkv + 1;
    if (catch_up > budget) {
      r->catch_up = 1; /* run_draft advances it with what room is left */
      continue;
    }
    int32_t nd = draft_room(e, r, seq_drafts(e, r, k));
    if (nd <= 0) continue;
    budget -= catch_up;
    if (nd <= 0) continue;
    for (int32_t j = 0; j < nd; j++) e->dtokens[j] = r->seq->tokens[r->seq->num_tokens - 1];
    weir_sched_add_drafts(e->sched, r->seq, e->dtokens, nd);
  }
}

/* Asks the drafter for up to spec_k tokens for every running sequence in decode. */
void weir__engine_propose_drafts(weir_engine *e) {
  const int32_t k = choose_k(e);
  if (e->draft) {
    /* A step that drafts nothing runs no draft pass: the draft's KV is left behind and caught
     * up by the pass 0 of the next step that drafts, over all it missed in one batch (so
     * catch_up, which asks for a pass, is cleared every step, k = 0 included). The tests'
     * eager mode catches every decode sequence up at every step instead. */
    for (engine_req *r = e->live; r; r = r->live_next)
      r->catch_up = e->spec_eager_catch_up && can_draft(r) && !r->matcher;
    if (k > 0) reserve_drafts(e, k);
    return;
  }
  if (k <= 0) return;
  int32_t n = 0;
  for (engine_req *r = e->live; r && n < e->max_seqs_step; r = r->live_next) {
    weir_sched_seq *s = r->seq;
    if (!can_draft(r)) continue;
    e->dseqs[n] =
        (weir_draft_seq){.seq_id = r->id, .tokens = s->tokens, .num_tokens = s->num_tokens};
    e->dreqs[n++] = r;
  }
  if (n == 0) return;
  int rc = e->drafter->propose(e->drafter_self, e->dseqs, n, e->spec_k, e->dtokens, e->dcounts,
                               NULL);
  if (rc != WEIR_OK) return; /* drafts are an optimisation: decode without them */
  for (int32_t i = 0; i < n; i++) {
    engine_req *r = e->dreqs[i];
    int32_t nd = draft_room(e, r, e->dcounts[i]);
    const int32_t want = seq_drafts(e, r, k);
    if (want < nd) nd = want;
    if (r->matcher && nd > 0) {
      /* Only drafts the constraint allows: the longest allowed prefix, the matcher left as
       * it was. */
      const int32_t *d = e->dtokens + (size_t)i * (size_t)e->spec_k;
      int32_t ok = 0;
      while (ok < nd && weir_matcher_accept_token(r->matcher, d[ok]) == WEIR_OK) ok++;
      if (ok > 0) weir_matcher_rollback(r->matcher, ok);
      nd = ok;
    }
    if (nd > 0)
      weir_sched_add_drafts(e->sched, r->seq, e->dtokens + (size_t)i * (size_t)e->spec_k, nd);
  }
}

/* The engine thread's CPU time (the step profile's clock). */
static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A draft pass's greedy drafts picked by the device plugin (argmax_rows, ABI 1.8): the picks
 * (head ids) land in d_pick and, when drafter.min_confidence asks for them, the top
 * probabilities in d_conf; *picked says whether it ran. Where the logits are device memory, a
 * pass with a sampled row is left to the host (its rows are copied anyway); where they are
 * host memory (the CPU device) every row is picked, the sampled ones' picks unused (a
 * microsecond a row), so no greedy row falls back to the host's scalar scan. The rule is the
 * host's (the lowest index of the largest; 0 for a row with nothing above -inf), so the
 * drafts are the host path's; the confidences are summed in the device's order, which can
 * only move where a draft stops by rounding (speed, never exactness). */
static int device_picks(weir_engine *e, const weir_sched_out *out, int32_t j,
                        const float *logits, int32_t nrows, int32_t W, int *picked) {
  *picked = 0;
  if (nrows <= 0 || nrows > e->max_seqs_step || !e->draft) return WEIR_OK;
  for (int32_t k = 0; k < nrows && !e->logits_host; k++) {
    engine_req *r = out->items[e->d_item[k]].seq->user;
    const weir_sampling_row row = weir__engine_make_row(e, r, j, weir__engine_suppress_row(e, 0));
    if (!plain_greedy(r, &row)) return WEIR_OK;
  }
  const weir_plugin *dev = e->rt.plugins.device;
  const weir_device_ops *ops = dev->ops;
  float *prob = e->spec_min_conf > 0 ? e->dev_prob : NULL;
  int rc = ops->argmax_rows(dev->self, e->dev_pick, prob, logits, nrows, W, e->dev_head, 0);
  if (rc == WEIR_OK)
    rc = ops->copy_d2h(dev->self, e->d_pick, e->dev_pick, (size_t)nrows * sizeof(int32_t));
  if (rc == WEIR_OK && prob)
    rc = ops->copy_d2h(dev->self, e->d_conf, prob, (size_t)nrows * sizeof(float));
  *picked = rc == WEIR_OK;
  e->step_device_picks += *picked;
  return rc;
}

/* The draft model's part of a step, between the batch's arrays and the target's forward.
 *
 * Pass 0 runs the draft model over each drafting item's tokens from its draft KV's end
 * through its last real token (the placeholder drafts excluded), at the target's own
 * positions and slots (KV group 1 of the same blocks): so the draft's KV then covers exactly
 * what the target's does, and prefix-cache hits, copies and preemption treat both alike. An
 * item that does not draft is left behind (no pass at all when none drafts) and caught up,
 * in one batch, by the first pass 0 it drafts in. Its logits at the last real token of each item with placeholders give q for
 * the first draft; pass j feeds draft j of those items (one token each, at the placeholder's
 * slot) for draft j + 1. The last draft is fed by the next step's pass 0, with the token the
 * target adds after it (its KV end says so), which saves a pass per step. Every draft is
 * drawn with the request's generator from q, which is the request's own sampling
 * distribution (the sampler's probs) over the draft's logits, and is written over its
 * placeholder in the batch and the sequence. Anything failing leaves the placeholders (or earlier drafts) in place, verified as
 * deterministic drafts, which is still exact: drafts only ever change speed.
 *
 * The draft's batch takes each sequence's block table and slots from the KV cache
 * (weir_step_batch_add), the same the scheduler gave the target's. */
static void draft_passes(weir_engine *e, const weir_sched_out *out) {
  const int32_t S = e->max_seqs_step, V = e->vocab;
  weir_step_batch *db = &e->db, *tb = &e->tb;
  int32_t nds = 0;
  int64_t room = e->max_tokens_step;
  weir_step_batch_reset(db, out->max_blocks_per_seq);
  /* Pass 0: the drafting items (then the rest catching up, as room allows), each from the
   * end of its draft KV through its last real token. Drafting items come first so that a
   * logits row k is draft slot k. */
  for (int pass = 0; pass < 2; pass++)
    for (int32_t i = 0; i < out->num_items; i++) {
      const weir_sched_item *it = &out->items[i];
      engine_req *r = it->seq->user;
      if (pass == 0) {
        r->dslot = -1;
        r->dkeep = it->num_drafts;
        r->dconf = 1.0;
      }
      const int drafting = it->num_drafts > 0;
      /* Only decode items that draft or wait to (a prefill chunk's draft KV, and that of a
       * sequence not drafting, is caught up once it drafts). */
      const int wanted = pass == 0 ? drafting : !drafting && r->catch_up;
      if (!wanted || it->start < it->seq->num_prompt || it->num_new_tokens - it->num_drafts != 1)
        continue;
      if (r->dkv > it->start) r->dkv = it->start;
      int32_t from = r->dkv, to = it->start + 1; /* positions [from, to) */
      if (to - from > room) {
        if (drafting) { /* reserve_drafts budgeted this: only a failure gets here */
          r->dkv = from;
          continue;
        }
        to = from + (int32_t)room;
      }
      if (to <= from ||
          weir_step_batch_add(db, e->kv, it->seq->kv, it->seq->tokens + from, from, to - from) !=
              WEIR_OK)
        continue;
      room -= to - from;
      r->dkv = to;
      if (drafting && weir_step_batch_add_rows(db, db->num_tokens - 1, 1) == WEIR_OK)
        e->d_item[nds++] = i;
    }
  if (db->num_seqs == 0) return;
  int rc = WEIR_OK;
  const int32_t W = e->dwidth;
  for (int32_t j = 0;; j++) {
    float *logits = NULL;
    const weir_llama_batch b = weir_step_batch_view(db);
    const int32_t nrows = b.num_logit_rows;
    const double t_fwd = e->prof_on ? cpu_now() : 0;
    if (rc == WEIR_OK) rc = weir_llama_forward(e->draft, &b, &logits);
    if (e->prof_on) e->step_draft_fwd += cpu_now() - t_fwd;
    /* Counted always: weir_engine_stats (which the draft-pass metrics follow), the tests'
     * step trace, the step profile. */
    e->step_draft_passes++;
    e->step_draft_tokens += b.num_tokens;
    e->spec_draft_passes++;
    e->spec_draft_model_tokens += (uint64_t)b.num_tokens;
    /* Row k's draft: the argmax of a plain greedy row (no distribution), else drawn below
     * from q, the request's own sampling distribution (the sampler's probs) over the row,
     * widened to the vocabulary with -inf when the head covers some of it (q is then 0 off
     * the head, and the draft is drawn from that q: verification stays exact). q goes
     * straight to the item's draft slot: row k of pass 0 is slot k, and later passes carry
     * the same items in the same order, each already holding its slot. */
    float *qj = e->qbuf + (size_t)j * (size_t)S * (size_t)V;
    /* The greedy rows' argmax reads them on the host (a copy off a CUDA device); a sampled row
     * goes to the sampler where the logits are (head_vocab narrows rows on a CPU device only,
     * so a widened row is host memory exactly when the logits are). */
    const float *hl = NULL;
    int picked = 0; /* the device picked every row's draft (d_pick, d_conf) */
    if (rc == WEIR_OK && e->dargmax) rc = device_picks(e, out, j, logits, nrows, W, &picked);
    if (rc == WEIR_OK && !picked && !(hl = host_rows(e, logits, nrows, W))) rc = WEIR_E_DEVICE;
    for (int32_t k = 0; k < nrows && rc == WEIR_OK; k++) {
      engine_req *r = out->items[e->d_item[k]].seq->user;
      if (j == 0) {
        r->dslot = k;
        r->dgreedy = 0;
      }
      e->rows[0] = weir__engine_make_row(e, r, j, weir__engine_suppress_row(e, 0));
      float *lrow = logits + (size_t)k * (size_t)W;
      if (plain_greedy(r, &e->rows[0])) {
        if (j < 64) r->dgreedy |= (uint64_t)1 << j;
        if (picked) { /* the head's id already, its confidence copied when wanted */
          e->d_tok[k] = e->d_pick[k];
          if (e->spec_min_conf <= 0) e->d_conf[k] = 1.0f;
          continue;
        }
        const float *hrow = hl + (size_t)k * (size_t)W;
        const int32_t c = argmax_row(hrow, W, 0);
        e->d_tok[k] = e->dhead ? e->dhead[c] : c;
        e->d_conf[k] = e->spec_min_conf > 0 ? top_prob(hrow, W, c) : 1.0f;
        continue;
      }
      if (W < V) { /* dlrow is -inf everywhere but the head's columns */
        for (int32_t c = 0; c < W; c++) e->dlrow[e->dhead[c]] = lrow[c];
        lrow = e->dlrow;
      }
      float *q = qj + (size_t)r->dslot * (size_t)V;
      rc = weir_sampler_call_probs(&e->scall, e->rows, 1, lrow, V, q);
      /* The sampler may have written over the row: the head's columns are reset (the
       * default sampler's edits, penalties, bias, temperature and masks, leave -inf as
       * -inf, so the rest is still -inf; a sampler that wrote elsewhere would only change
       * the next q, which verification then uses as it is: still exact). */
      if (W < V)
        for (int32_t c = 0; c < W; c++) e->dlrow[e->dhead[c]] = -INFINITY;
      e->d_tok[k] = -1; /* drawn from q below */
      e->d_conf[k] = rc == WEIR_OK && e->spec_min_conf > 0 ? max_prob(q, V) : 1.0f;
    }
    if (rc != WEIR_OK) {
      weir_log(WEIR_LOG_WARN, LOG_COMPONENT, "draft model: %s; this step verifies what it has",
               weir_strerror(rc));
      /* Whatever this forward wrote is unknown: those sequences catch up from scratch. */
      for (int32_t i = 0; i < out->num_items; i++) {
        engine_req *r = out->items[i].seq->user;
        r->dslot = -1;
        r->dkv = 0;
      }
      return;
    }
    if (nrows == 0) return; /* nothing left to draw */
    /* Draw draft j + 1 of every item with logits in this pass. Pass j + 1 feeds each of them
     * to the draft but the last draft, which the next step's pass 0 feeds. The next pass's
     * batch is built over this one's arrays: only d_item is read while it is, and entry
     * nl <= k is written after entry k was read. */
    weir_step_batch_reset(db, out->max_blocks_per_seq);
    int32_t nl = 0;
    for (int32_t k = 0; k < nrows && rc == WEIR_OK; k++) {
      const int32_t i = e->d_item[k];
      const weir_sched_item *it = &out->items[i];
      engine_req *r = it->seq->user;
      const int32_t at = tb->query_start_loc[i] + 1 + j, pos = tb->positions[at];
      int32_t tok = e->d_tok[k];
      if (tok < 0) /* q is 0 off the draft's head */
        tok = weir__engine_draw_from(qj + (size_t)r->dslot * (size_t)V, V,
                                     weir_rng_uniform(r->rng), tb->tokens[at]);
      tb->tokens[at] = tok;
      it->seq->tokens[it->start + 1 + j] = tok;
      /* The chance that the target gets as far as draft j + 1 and takes it is about the
       * product of the draft's confidences so far: below drafter.min_confidence, this draft
       * is the last (a pass and a verification row cost more than they would likely give),
       * and the placeholders after it are trimmed from the step (trim_drafts). */
      r->dconf *= (double)e->d_conf[k];
      if (j + 1 < it->num_drafts && r->dconf < e->spec_min_conf) r->dkeep = j + 1;
      if (j + 1 >= r->dkeep) {
        /* The last draft is not fed now: the next step's pass 0 feeds it with the token
         * after it (one GEMM of two tokens costs about one of one), which saves a pass per
         * step; until then the draft's KV ends before it. */
        r->dkv = pos;
        continue;
      }
      rc = weir_step_batch_add(db, e->kv, it->seq->kv, &tok, pos, 1);
      r->dkv = pos + 1; /* written by the next pass (or reset if it fails) */
      if (rc == WEIR_OK) {
        e->d_item[nl++] = i;
        rc = weir_step_batch_add_rows(db, db->num_tokens - 1, 1);
      }
    }
    if (rc == WEIR_OK && db->num_seqs == 0) return;
  }
}

/* Drops from the step the placeholders of every item whose draft stopped early (dkeep):
 * the sequence is cut back (its KV slots freed), the item shrinks, and the target's batch
 * is compacted (tokens, positions and slots moved down, query starts, context lengths and
 * logit rows recomputed). The forward then computes only the drafts that were made. */
static void trim_drafts(weir_engine *e, weir_sched_out *out) {
  weir_step_batch *tb = &e->tb;
  int32_t shift = 0;
  for (int32_t i = 0; i < out->num_items; i++) {
    weir_sched_item *it = &out->items[i];
    engine_req *r = it->seq->user;
    const int32_t qs = tb->query_start_loc[i], qe = tb->query_start_loc[i + 1];
    int32_t cut = it->num_drafts > 0 && r->dkeep >= 0 && r->dkeep < it->num_drafts
                      ? it->num_drafts - r->dkeep
                      : 0;
    if (cut > 0 && weir_sched_truncate(e->sched, it->seq, it->seq->num_tokens - cut) != WEIR_OK)
      cut = 0; /* kept: verified as placeholders, still exact */
    if (shift > 0) {
      const size_t n = (size_t)(qe - qs - cut);
      memmove(tb->tokens + qs - shift, tb->tokens + qs, n * sizeof(int32_t));
      memmove(tb->positions + qs - shift, tb->positions + qs, n * sizeof(int32_t));
      memmove(tb->slots + qs - shift, tb->slots + qs, n * sizeof(int32_t));
    }
    tb->query_start_loc[i] = qs - shift;
    if (cut == 0) continue;
    tb->context_lens[i] -= cut;
    it->num_new_tokens -= cut;
    it->num_drafts -= cut;
    it->num_logits -= cut;
    shift += cut;
  }
  if (shift == 0) return;
  tb->query_start_loc[out->num_items] -= shift;
  tb->num_tokens -= shift;
  out->num_tokens -= shift;
  out->num_logits -= shift;
  /* Logit rows: the last num_logits tokens of each item, in item order (the scheduler's rule). */
  int32_t rows = 0;
  for (int32_t i = 0; i < out->num_items; i++) {
    const weir_sched_item *it = &out->items[i];
    for (int32_t t = tb->query_start_loc[i + 1] - it->num_logits; t < tb->query_start_loc[i + 1];
         t++)
      tb->logit_rows[rows++] = t;
  }
  tb->num_rows = rows;
}

void weir__engine_spec_trace_step(weir_engine *e) {
  if (!e->spec_on_step) return;
  const weir_engine_spec_step st = {.k = e->step_k,
                                    .drafts = (int32_t)e->step_drafts,
                                    .draft_passes = e->step_draft_passes,
                                    .draft_tokens = e->step_draft_tokens,
                                    .device_picks = e->step_device_picks,
                                    .verify_picks = e->step_verify_picks};
  e->spec_on_step(e->spec_user, &st);
}

void weir__engine_run_draft(weir_engine *e, weir_sched_out *out) {
  draft_passes(e, out);
  if (e->spec_min_conf > 0) trim_drafts(e, out);
}

/* What the speculation policy measured, one line per batch-size bucket it saw: the
 * operator's view of where drafting pays on this machine. */
void weir__engine_spec_log(const weir_engine *e) {
  if (!e->drafter || !e->spec.adaptive) return;
  for (int b = 0; b < WEIR_SPEC_BUCKETS; b++) {
    char line[512];
    size_t off = 0;
    for (int32_t i = 0; i < e->spec.num_arms && off < sizeof line; i++) {
      const weir_spec_arm *a = &e->spec.arms[b][i];
      if (a->trials)
        off += (size_t)snprintf(line + off, sizeof line - off,
                                i == 0 ? " k=%d %.0f tok/s (%u plain steps, median);"
                                       : " k=%d %.0f tok/s (%u steps);",
                                a->k, a->tps, a->trials);
    }
    if (off)
      weir_log(WEIR_LOG_INFO, LOG_COMPONENT, "speculation, %d-%d sequences:%s", 1 << b,
               (2 << b) - 1, line);
    /* Why each drafting length ran: the steps handed to it by the reason its run began
     * (lead, learn, near, climb, far), and of its measured steps those that drafted nothing. */
    static const char *const why[WEIR_SPEC_WHY_N] = {"lead", "learn", "cold", "near", "climb",
                                                     "far"};
    off = 0;
    for (int32_t i = 1; i < e->spec.num_arms && off < sizeof line; i++) {
      const weir_spec_arm *a = &e->spec.arms[b][i];
      if (!a->trials) continue;
      off += (size_t)snprintf(line + off, sizeof line - off, " k=%d", a->k);
      for (int w = 0; w < WEIR_SPEC_WHY_N && off < sizeof line; w++)
        if (a->chosen[w])
          off += (size_t)snprintf(line + off, sizeof line - off, " %s %u", why[w], a->chosen[w]);
      if (off < sizeof line)
        off += (size_t)snprintf(line + off, sizeof line - off, " (%u plain);", a->plain_steps);
    }
    if (off)
      weir_log(WEIR_LOG_INFO, LOG_COMPONENT, "speculation, %d-%d sequences, steps by why:%s",
               1 << b, (2 << b) - 1, line);
  }
}
