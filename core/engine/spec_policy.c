/* Adaptive speculation (spec_policy.h). */
#include "engine/spec_policy.h"

#include <math.h>
#include <string.h>

/* A drafting arm's rate is the ratio of its tokens and seconds summed over its steps, each step's
 * weight fading by this factor per later step of the same arm: about the last 30 steps
 * count. A ratio of sums, not a mean of per-step rates: a step's tokens vary from 1 to k + 1
 * with the acceptance, and single steps are short enough for the OS to skew their time. No
 * drafts is rated by the median of its plain steps instead (spec_policy.h). */
#define TPS_DECAY 0.97
/* Weight of a checked draft in a request's acceptance average. */
#define ACCEPT_WEIGHT 0.1

void weir_spec_policy_init(weir_spec_policy *p, int32_t kmax, int adaptive) {
  memset(p, 0, sizeof *p);
  p->kmax = kmax < 1 ? 1 : kmax;
  p->adaptive = adaptive;
  int32_t ks[WEIR_SPEC_MAX_ARMS];
  int32_t n = 0;
  ks[n++] = 0;
  for (int32_t k = 1; k < p->kmax && n < WEIR_SPEC_MAX_ARMS - 1; k *= 2) ks[n++] = k;
  ks[n++] = p->kmax;
  p->num_arms = n;
  for (int b = 0; b < WEIR_SPEC_BUCKETS; b++)
    for (int32_t i = 0; i < n; i++) {
      p->arms[b][i].k = ks[i];
      p->arms[b][i].far_gap = WEIR_SPEC_EXPLORE * WEIR_SPEC_EXPLORE;
      p->arms[b][i].next_far = WEIR_SPEC_EXPLORE * WEIR_SPEC_EXPLORE;
    }
}

int weir_spec_bucket(int32_t n) {
  int b = 0;
  while (n > 1 && b < WEIR_SPEC_BUCKETS - 1) {
    n >>= 1;
    b++;
  }
  return b;
}

static int32_t arm_of(const weir_spec_policy *p, int32_t k) {
  for (int32_t i = 0; i < p->num_arms; i++)
    if (p->arms[0][i].k == k) return i;
  return -1;
}

/* The leading arm: no drafts unless a drafting arm, measured enough to be trusted, beats it
 * by WEIR_SPEC_MARGIN (spec_policy.h: the guard comes first). */
static int32_t best_arm(const weir_spec_policy *p, const weir_spec_arm *a) {
  int32_t best = 0;
  double bar = a[0].tps * (1.0 + WEIR_SPEC_MARGIN);
  for (int32_t i = 1; i < p->num_arms; i++)
    if (a[i].trials >= WEIR_SPEC_MIN_TRIALS && a[i].tps > bar) {
      best = i;
      bar = a[i].tps;
    }
  return best;
}

/* The median of the bucket's recorded plain-step rates (at most WEIR_SPEC_PLAIN). */
static double plain_median(const weir_spec_bucket_state *st) {
  const uint32_t n = st->plain_n < WEIR_SPEC_PLAIN ? st->plain_n : WEIR_SPEC_PLAIN;
  double v[WEIR_SPEC_PLAIN];
  for (uint32_t i = 0; i < n; i++) { /* insertion sort: at most 32 values, once a step */
    uint32_t j = i;
    while (j > 0 && v[j - 1] > st->plain[i]) {
      v[j] = v[j - 1];
      j--;
    }
    v[j] = st->plain[i];
  }
  if (n == 0) return 0;
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* How close to the best arm another must be to be explored often (spec_policy.h): within
 * WEIR_SPEC_NEAR, or WEIR_SPEC_NEAR_PLAIN where no drafts leads. There a drafting arm must
 * gain more than it loses to lead, and each exploring run of one that is 25% behind costs a
 * bucket running without drafts 1.5% of its throughput at one run in 16: the guard's whole
 * margin (a 4-stream draft-model server explored k = 1 and 2 at 0.68-0.72x of no drafts). */
static double near_bar(const weir_spec_arm *a, int32_t best) {
  return (best == 0 ? WEIR_SPEC_NEAR_PLAIN : WEIR_SPEC_NEAR) * a[best].tps;
}

static int measured(const weir_spec_arm *a) {
  return a->trials >= WEIR_SPEC_MIN_TRIALS || a->deferred;
}

/* Whether bucket b may skip learning arm i (spec_policy.h): the longest arm, measured here,
 * is far behind no drafts (the per-request cut makes it every shorter length for the
 * requests whose drafts fail, so the lengths between are not learned either); or the nearest
 * smaller bucket that has measured every arm runs best without drafts and has arm i far
 * behind. */
static int defer_arm(const weir_spec_policy *p, int b, int32_t i) {
  if (i == 0) return 0;
  const weir_spec_arm *here = p->arms[b];
  const int32_t last = p->num_arms - 1;
  /* Learned from the longest down: a length below one that lost to the next longer is not
   * learned (BEHIND), nor one below a length so deferred. */
  if (i + 1 < last && (here[i + 1].deferred == WEIR_SPEC_BEHIND ||
                       (here[i + 1].trials >= WEIR_SPEC_MIN_TRIALS && !here[i + 1].deferred &&
                        here[i + 2].trials >= WEIR_SPEC_MIN_TRIALS && !here[i + 2].deferred &&
                        here[i + 1].tps < here[i + 2].tps)))
    return WEIR_SPEC_BEHIND;
  if (i != last && here[0].trials >= WEIR_SPEC_MIN_TRIALS &&
      here[last].trials >= WEIR_SPEC_MIN_TRIALS && here[last].tps < WEIR_SPEC_NEAR * here[0].tps)
    return WEIR_SPEC_FAR;
  for (int s = b - 1; s >= 0; s--) {
    const weir_spec_arm *a = p->arms[s];
    int settled = 1;
    for (int32_t j = 0; j < p->num_arms && settled; j++) settled = measured(&a[j]);
    if (!settled) continue;
    return best_arm(p, a) == 0 && a[i].tps < WEIR_SPEC_NEAR * a[0].tps ? WEIR_SPEC_FAR : 0;
  }
  return 0;
}

int32_t weir_spec_choose(weir_spec_policy *p, int32_t n) {
  if (!p->adaptive) return p->kmax;
  if (n < 1) n = 1;
  const int b = weir_spec_bucket(n);
  weir_spec_arm *a = p->arms[b];
  weir_spec_bucket_state *st = &p->state[b];
  if (st->left > 0) {
    st->left--;
    a[st->cur].chosen[st->why]++;
    return a[st->cur].k;
  }
  int why = WEIR_SPEC_WHY_LEARN;
  /* A new run: unmeasured arms first (0, the baseline; then the longest; then the others,
   * longest first), except those a smaller bucket has shown not to pay and those below a
   * length that lost to the next longer one. */
  int32_t next = -1, run = WEIR_SPEC_RUN; /* run: the steps of no drafts' run */
  const int32_t last = p->num_arms - 1;
  /* A length deferred as BEHIND is learned once the length just above it leads: the best
   * length may then be shorter still. */
  const int32_t lead = best_arm(p, a);
  if (lead > 1 && lead < last && a[lead - 1].deferred == WEIR_SPEC_BEHIND) {
    a[lead - 1].deferred = 0;
    a[lead - 1].trials = 0;
    a[lead - 1].tokens = a[lead - 1].seconds = a[lead - 1].seqs = a[lead - 1].tps = 0;
  }
  for (int32_t o = 0; next < 0 && o < p->num_arms; o++) {
    const int32_t i = o == 0 ? 0 : last + 1 - o;
    if (measured(&a[i])) continue;
    const int deferral = defer_arm(p, b, i);
    if (deferral) {
      a[i].deferred = deferral;
      a[i].next_far = st->runs + a[i].far_gap;
      continue;
    }
    next = i;
  }
  if (next < 0) {
    const int32_t best = best_arm(p, a);
    if (best != st->best) { /* a new leader: every arm is judged against it afresh */
      st->best = best;
      for (int32_t i = 0; i < p->num_arms; i++) {
        a[i].far_gap = WEIR_SPEC_EXPLORE * WEIR_SPEC_EXPLORE;
        if (a[i].next_far > st->runs + a[i].far_gap) a[i].next_far = st->runs + a[i].far_gap;
      }
    }
    /* The lengths that stood behind the longest are learned again once it comes near. */
    if (a[last].trials >= WEIR_SPEC_MIN_TRIALS && a[last].tps >= near_bar(a, best))
      for (int32_t i = 1; i <= last; i++)
        if (a[i].deferred == WEIR_SPEC_FAR) {
          a[i].deferred = 0;
          if (i == last) continue;
          a[i].trials = 0;
          a[i].tokens = a[i].seconds = a[i].seqs = a[i].tps = 0;
        }
    /* Exploring costs: a run at a slower length, and for the draft model a catch-up of its
     * KV. Arms within WEIR_SPEC_NEAR of the best are tried one run in WEIR_SPEC_EXPLORE; one
     * far behind when its gap has passed, the gap doubling each time it stays far. */
    int32_t pick = -1;
    int why_pick = WEIR_SPEC_WHY_LEAD;
    /* No drafts is always near: it is the safe arm, it costs no switch, and its rate is
     * often first measured in a request's slow first steps; a stale low rate for it must
     * not keep drafting running where it loses. */
    /* Until it has half a window of plain steps, its median is a few steps that may all
     * be a fresh server's cold first ones: while drafting leads, it runs every
     * WEIR_SPEC_EXPLORE_COLD runs instead (a few runs, once per bucket). */
    /* Where drafting leads by WEIR_SPEC_COLD_LEAD and no drafts' rate is one a warm machine
     * could have (a plain step runs a subset of a drafting step's rows, so it is no slower:
     * no drafts delivers at least the drafting steps' sequences per second), these runs
     * cost a short request the most and a cold start is the least likely: they are cut to
     * WEIR_SPEC_CUT_STEPS steps, and the cold start ends at a quarter window. */
    const int overwhelming = best != 0 && a[best].tps > WEIR_SPEC_COLD_LEAD * a[0].tps &&
                             a[best].seconds > 0 && a[0].tps >= a[best].seqs / a[best].seconds;
    if (best != 0 && a[0].trials < WEIR_SPEC_PLAIN / (overwhelming ? 4 : 2) &&
        st->runs % WEIR_SPEC_EXPLORE_COLD == WEIR_SPEC_EXPLORE_COLD - 1) {
      pick = 0;
      why_pick = WEIR_SPEC_WHY_COLD;
      if (overwhelming) run = WEIR_SPEC_CUT_STEPS;
    }
    if (pick < 0 && st->runs % WEIR_SPEC_EXPLORE == WEIR_SPEC_EXPLORE - 1)
      for (int32_t i = 0; i < p->num_arms; i++)
        if (i != best && (i == 0 || a[i].tps >= near_bar(a, best)) &&
            (pick < 0 || a[i].trials < a[pick].trials)) {
          pick = i;
          why_pick = WEIR_SPEC_WHY_NEAR;
        }
    /* Climbing: a drafting run whose every step had every draft accepted was held back by
     * its length, not by the text (a copy, a loop: the rates of the longer lengths may date
     * from a request's first steps, before its text repeated). The next longer length runs
     * next, its old rate forgotten; at most once in WEIR_SPEC_EXPLORE runs per length. */
    const int32_t c = st->cur;
    if (pick < 0 && c > 0 && c < last && st->run_full && st->run_steps >= WEIR_SPEC_RUN &&
        a[c + 1].deferred != WEIR_SPEC_FAR && st->runs >= a[c + 1].next_climb) {
      pick = c + 1;
      why_pick = WEIR_SPEC_WHY_CLIMB;
      a[pick].next_climb = st->runs + WEIR_SPEC_EXPLORE;
      a[pick].trials = 0;
      a[pick].tokens = a[pick].seconds = a[pick].seqs = a[pick].tps = 0;
    }
    for (int32_t i = 0; i < p->num_arms; i++) {
      if (i == best || a[i].tps >= near_bar(a, best)) {
        a[i].far_gap = WEIR_SPEC_EXPLORE * WEIR_SPEC_EXPLORE; /* near: back to the short gap */
        continue;
      }
      /* A deferred length stands behind the longest: only the longest is tried far. */
      if (pick < 0 && st->runs >= a[i].next_far && (!a[i].deferred || i == last)) {
        pick = i;
        why_pick = WEIR_SPEC_WHY_FAR;
      }
    }
    if (pick >= 0 && a[pick].tps < near_bar(a, best)) {
      /* Doubled now, reset above if this run brings the arm near again. */
      if (a[pick].far_gap < WEIR_SPEC_EXPLORE * WEIR_SPEC_EXPLORE * WEIR_SPEC_FAR_BACKOFF)
        a[pick].far_gap *= 2;
      a[pick].next_far = st->runs + a[pick].far_gap;
      /* What it measured hundreds of runs ago is stale: this run's steps are its rate. No
       * drafts keeps its median: every plain step of the bucket keeps it current. */
      if (pick != 0) a[pick].tokens = a[pick].seconds = a[pick].seqs = a[pick].tps = 0;
    }
    next = pick >= 0 ? pick : best;
    why = pick < 0 ? WEIR_SPEC_WHY_LEAD : why_pick;
  }
  st->runs++;
  st->run_steps = 0;
  st->run_full = 1;
  /* The fast switch's state (spec_policy.h): a run of an arm measured before, and whether
   * its first step switches from no drafts (for the draft model, a catch-up of its KV). */
  st->run_known = next != 0 && a[next].trials >= WEIR_SPEC_MIN_TRIALS;
  /* A run cut into by admissions (their steps, a prefill beside, are not rated) may end
   * short of the evidence: if the same length runs next, its steps join this run's, once
   * (two runs of one sequence stay under WEIR_SPEC_SWITCH_SEQS: one stream is unchanged). */
  const int carry = next == st->cur && next != 0 && !st->run_replaced && !st->run_carried &&
                    st->steady_seqs < WEIR_SPEC_SWITCH_SEQS;
  st->run_carried = carry;
  st->run_switch = st->cur == 0;
  st->run_replaced = 0;
  if (!carry) {
    st->run_tokens = st->run_seconds = st->run_seqs = 0;
    st->steady_tokens = st->steady_seconds = st->steady_seqs = 0;
    st->steady_steps = 0;
  }
  if (!carry) st->run_was = a[next].tps;
  st->cur = next;
  st->why = why;
  st->left = (next == 0 ? run : WEIR_SPEC_RUN) - 1;
  a[next].chosen[why]++;
  return a[next].k;
}

void weir_spec_observe(weir_spec_policy *p, int32_t n, int32_t k, int64_t tokens,
                       double seconds, int plain) {
  if (!p->adaptive || n < 1 || tokens <= 0 || !(seconds > 0)) return;
  const int32_t i = arm_of(p, k);
  if (i < 0) return;
  const int b = weir_spec_bucket(n);
  weir_spec_bucket_state *st = &p->state[b];
  weir_spec_arm *a0 = &p->arms[b][0];
  if (i == 0 || plain) {
    /* Every plain step rates no drafts (spec_policy.h): the median of the last few. */
    st->plain[st->plain_n % WEIR_SPEC_PLAIN] = (double)tokens / seconds;
    st->plain_n++;
    a0->tokens = a0->tokens * TPS_DECAY + (double)tokens; /* kept for the log's sake */
    a0->seconds = a0->seconds * TPS_DECAY + seconds;
    a0->tps = plain_median(st);
    a0->trials++;
  }
  weir_spec_arm *a = &p->arms[b][i];
  if (i != 0) {
    a->plain_steps += plain != 0;
    a->tokens = a->tokens * TPS_DECAY + (double)tokens;
    a->seconds = a->seconds * TPS_DECAY + seconds;
    a->seqs = a->seqs * TPS_DECAY + (double)n;
    a->tps = a->tokens / a->seconds;
    a->trials++;
  }
  /* A drafting run that loses badly ends now (spec_policy.h): measured steps of the arm
   * running, no drafts measured, and this arm's rate far below theirs. */
  if (st->cur == i) {
    st->run_steps++;
    if (tokens != (int64_t)n * (k + 1)) st->run_full = 0; /* a draft was rejected or cut */
    st->run_tokens += (double)tokens;
    st->run_seconds += seconds;
    st->run_seqs += n;
    if (!(st->run_switch && st->run_steps == 1)) {
      st->steady_tokens += (double)tokens;
      st->steady_seconds += seconds;
      st->steady_seqs += n;
      st->steady_steps++;
    }
  }
  /* Switching off fast (spec_policy.h): a run of an arm measured before whose steady steps,
   * enough of them, lose to no drafts by more than noise ends, and the arm's rate becomes
   * what this run measured (the switch included): its old rate is another workload's. */
  if (i != 0 && st->cur == i && st->run_known && !st->run_replaced &&
      a0->trials >= WEIR_SPEC_MIN_TRIALS && st->steady_steps >= WEIR_SPEC_CUT_STEPS &&
      st->steady_seqs >= WEIR_SPEC_SWITCH_SEQS &&
      st->steady_tokens < WEIR_SPEC_SWITCH * a0->tps * st->steady_seconds) {
    st->run_replaced = 1;
    st->left = 0;
    a->tokens = st->run_tokens;
    a->seconds = st->run_seconds;
    a->seqs = st->run_seqs;
    a->tps = a->tokens / a->seconds;
    /* The traffic turned (the text, the machine): every other length's rate dates from the
     * traffic this one's did, or from older, and falls by the same factor (spec_policy.h).
     * Left as they were, each stale length led or was explored in turn and lost a run of
     * its own before its rate was replaced: the losing steps of a bucket where no drafts
     * leads. A length that was measured since and is lowered too is only explored less. */
    const double f = st->run_was > 0 ? a->tps / st->run_was : 1;
    for (int32_t j = 1; j < p->num_arms && f < 1; j++) {
      weir_spec_arm *d = &p->arms[b][j];
      if (j == i || !(d->seconds > 0)) continue;
      d->tokens *= f;
      d->tps = d->tokens / d->seconds;
    }
  }
  if (i != 0 && st->cur == i && st->left > 0 && a0->trials >= WEIR_SPEC_MIN_TRIALS &&
      st->run_steps >= WEIR_SPEC_CUT_STEPS && a->tps < WEIR_SPEC_CUT * a0->tps) {
    st->left = 0;
    if (a->trials < WEIR_SPEC_MIN_TRIALS) a->trials = WEIR_SPEC_MIN_TRIALS;
  }
}

int32_t weir_spec_seq_len(int32_t k, double a) {
  if (k <= 0) return 0;
  if (!(a > 0)) return 1;
  if (a >= 1) return k;
  /* The largest j with a^j >= WEIR_SPEC_MIN_REACH. */
  const int32_t j = (int32_t)floor(log(WEIR_SPEC_MIN_REACH) / log(a) + 1e-9);
  return j < 1 ? 1 : j > k ? k : j;
}

int weir_spec_seq_pays(double a, int32_t n, double row_cost) {
  double bar = row_cost * (double)(n > 1 ? n : 1);
  if (bar > WEIR_SPEC_GATE_MAX) bar = WEIR_SPEC_GATE_MAX;
  return a >= bar;
}

double weir_spec_acceptance_update(double a, int32_t drafted, int32_t accepted) {
  const int32_t checked = accepted < drafted ? accepted + 1 : drafted;
  for (int32_t j = 0; j < checked; j++) a += ACCEPT_WEIGHT * ((j < accepted ? 1.0 : 0.0) - a);
  return a;
}
