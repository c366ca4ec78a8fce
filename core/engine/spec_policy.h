/* Adaptive speculation: how many tokens to draft, per step and per sequence.
 *
 * Whether drafting pays depends on the machine, the models and the batch: verifying k + 1
 * tokens costs about one token's step where decode is memory-bound (large models, GPUs) and
 * k + 1 steps where it is compute-bound (a small model on a CPU), and batching makes any
 * target compute-bound as it grows. So the policy does not model costs; it measures them.
 * For each batch-size bucket (1, 2-3, 4-7, ... sequences in the step) it keeps the output
 * tokens per second that pure decode steps achieved with each speculation length ("arm":
 * 0, 1, 2, 4, ... up to k), runs the best arm, and keeps measuring the others, so the
 * crossover where speculation stops paying is found at run time and followed when the load
 * or the text changes. An arm runs WEIR_SPEC_RUN steps in a row, and its rate counts the
 * step that switched to it: switching costs (after steps without drafts the draft model's
 * KV must catch up every sequence's tokens since, and its weights evict the target's from
 * the caches), and a length whose run does not repay that cost is not worth switching to.
 * The cost grows with the batch and with the time since drafting stopped, which is what
 * keeps exploration from taxing a large batch that runs without drafts. One run in
 * WEIR_SPEC_EXPLORE goes to the arm measured least among those within WEIR_SPEC_NEAR of the
 * best (WEIR_SPEC_NEAR_PLAIN where no drafts is the best: a drafting arm must then gain more
 * than it loses, and each run of one far behind costs the guard's margin) and no drafts (always a candidate: the safe arm, with no switch cost, whose rate is
 * often first measured in a request's slow first steps).
 *
 * Exploring an arm far behind the best costs the most (a run at a slow length, and for the
 * draft model a catch-up of every sequence's draft KV), so such an arm is tried again only
 * after WEIR_SPEC_EXPLORE^2 runs, and each try that leaves it far behind doubles that gap, up
 * to WEIR_SPEC_FAR_BACKOFF times: enough to notice that the text or the load changed,
 * rare enough to cost nothing in steady service. Such a run forgets the arm's old rate (it
 * is hundreds of runs stale), and a change of the leading arm resets every gap.
 *
 * Learning itself is cut short where drafting loses: when the longest arm, learned right after
 * no drafts, is far behind, the lengths between are not learned (the per-request cut by
 * acceptance already shortens the longest arm's drafts wherever they fail, so it stands for
 * them); only the longest is tried far, and the others are learned again once it comes
 * within WEIR_SPEC_NEAR of the best (deferred WEIR_SPEC_FAR). The others are learned from the
 * longest down, and a length below one that lost to the next longer is not learned (a
 * length's rate rises to one peak and falls; deferred WEIR_SPEC_BEHIND) until the length just
 * above it leads: a short request whose drafts are near-certain (ngram on a copy, up to 16)
 * learns 0, 16 and 8, not six lengths.
 *
 * Climbing: a drafting run whose every step accepted every sequence's k drafts was held back
 * by its length; the next longer one runs next, its old rate forgotten (it may date from a
 * request's first steps, before its text repeated), at most once in WEIR_SPEC_EXPLORE runs
 * per length.
 *
 * Buckets inform each other in one direction. Verifying drafts costs more per sequence as
 * the batch grows, so a length that loses to no drafts at some batch size loses at every
 * larger one: a bucket whose nearest smaller bucket has settled (every arm measured) on no
 * drafts, with a length far behind, does not spend runs learning that length (the longest
 * is still tried far, as above). This is the measured crossover: the batch size past which
 * the engine stops drafting, found at the first bucket where drafting lost.
 *
 * Exploring is bounded from the first request: a drafting run (learning or exploring) that
 * after WEIR_SPEC_CUT_STEPS steps, the switch included, delivers under WEIR_SPEC_CUT of what
 * no drafts do ends there, and the arm counts as measured (its rate is that of those steps),
 * so a length that loses badly costs two steps per try, not a run of WEIR_SPEC_RUN.
 *
 * Switching off fast when the traffic changes: an arm's decayed rate remembers about its last
 * 30 steps, so when the text turns against drafting (an in-service server that ran greedy
 * requests, where ngram led, then sampled ones, where it loses) the leading arm needed about
 * a dozen losing steps to fall under no drafts, the next arm as many, and each then hovered
 * near no drafts' rate, a blend of two workloads, where exploration kept running it: a
 * 4-stream server drafted about 500 steps at 0.66-0.73x of no drafts. So a run of an arm
 * measured before (not a learning run: there the run is the rate) whose own steady steps (the
 * switch's step from no drafts left out: the draft model's catch-up is a price of switching,
 * not a sign that the text changed) deliver under WEIR_SPEC_SWITCH of no drafts' rate ends,
 * and the arm's rate is replaced, not decayed, by what that run measured, switch included.
 * It needs WEIR_SPEC_CUT_STEPS steady steps and WEIR_SPEC_SWITCH_SEQS sequence-steps of
 * evidence: a step's tokens vary with acceptance, and a few single-sequence steps of a
 * winning arm often fall under no drafts by chance (a one-stream draft model at 0.8 that runs
 * 1.33x loses two steps in a row about one run in three). So at one sequence it never fires
 * within a run and the decayed rate rules as before; at 4-7 sequences it takes 4 steps, at
 * 8 and more 2. A run whose rated steps fell short (admission steps are not rated) passes its
 * sums on to the next run if that is the same length's, once: two runs of one sequence are
 * still short, so one stream keeps the decayed rate alone. When the fast switch replaces a
 * length's rate, every other drafting length's rate falls by the same factor (the replaced
 * rate over the one the length had when its run began): the traffic turned (the text, or
 * the machine), the others' rates date from the same traffic or older, and left as they
 * were each stale length led or was explored in turn and lost a run before it was judged.
 *
 * No drafts is the reference every drafting arm is judged against, so its rate must not be
 * one that a slow stretch can spoil (other work on the machine, a preemption, a cold cache:
 * one such run of six steps once cut it to a third in a decayed mean, and drafting kept
 * running where it lost).
 * It is the median of the rates of the bucket's last WEIR_SPEC_PLAIN plain decode steps: every
 * step that ran without drafts, the steps of a drafting run in which no sequence drafted
 * included, not only the runs the policy gave to no drafts. A plain step's tokens are its
 * sequences, so the median of its rates is the typical step, and a stretch of slow steps
 * shorter than half the window does not move it. The drafting arms keep a ratio of decayed
 * sums: their tokens vary with acceptance (a median would count a lucky step as typical), and
 * every cost they pay (the switch's catch-up, a slow stretch) must count against them. That
 * asymmetry leans towards no drafts, and on top of it a drafting arm leads only when it beats
 * no drafts by WEIR_SPEC_MARGIN and has been measured WEIR_SPEC_MIN_TRIALS steps: the guard
 * that drafting never costs throughput matters more than the last few percent it might win.
 * Until no drafts has WEIR_SPEC_PLAIN / 2 plain steps, a median may still be a fresh
 * server's cold first steps, so while drafting leads it runs one run in
 * WEIR_SPEC_EXPLORE_COLD instead of one in WEIR_SPEC_EXPLORE (a few runs per bucket, once).
 * Where drafting leads by WEIR_SPEC_COLD_LEAD and no drafts' rate is plausible for a warm
 * machine (at least the drafting steps' sequences per second: a plain step runs a subset of
 * a drafting step's rows), those runs are cut to WEIR_SPEC_CUT_STEPS steps and the cold start
 * ends at WEIR_SPEC_PLAIN / 4: a short request pays for them the most.
 *
 * Per sequence the chosen length is cut by its own recent acceptance a (moving average):
 * draft j is worth making while a^j >= WEIR_SPEC_MIN_REACH, the chance that the target gets
 * as far as checking it.
 *
 * Plain data, no locks: the engine thread owns it. */
#ifndef WEIR_ENGINE_SPEC_POLICY_H
#define WEIR_ENGINE_SPEC_POLICY_H

#include <stdint.h>

#define WEIR_SPEC_BUCKETS 10  /* batch sizes 1, 2-3, 4-7, ..., 512 and more */
#define WEIR_SPEC_MAX_ARMS 8  /* 0, 1, 2, 4, 8, 16, 32, 64 */
#define WEIR_SPEC_EXPLORE 16  /* one run in this many (per bucket) tries another arm */
#define WEIR_SPEC_RUN 6       /* steps an arm runs once chosen */
#define WEIR_SPEC_NEAR 0.75   /* arms this close to the best are explored often */
#define WEIR_SPEC_NEAR_PLAIN 0.9 /* ... this close where no drafts is the best */
#define WEIR_SPEC_MIN_TRIALS 4 /* measured steps before an arm's rate is trusted */
#define WEIR_SPEC_MIN_REACH 0.25
#define WEIR_SPEC_FAR_BACKOFF 16 /* a far arm's exploration gap grows to EXPLORE^2 times this */
#define WEIR_SPEC_CUT_STEPS 2 /* a drafting run this many steps in ... */
#define WEIR_SPEC_CUT 0.5     /* ... at under this fraction of no drafts' rate ends at once */
#define WEIR_SPEC_PLAIN 32    /* plain decode steps whose median rate is no drafts' */
#define WEIR_SPEC_MARGIN 0.03 /* a drafting arm leads only this far ahead of no drafts */
#define WEIR_SPEC_EXPLORE_COLD 4 /* no drafts' runs while it has under PLAIN / 2 steps */
#define WEIR_SPEC_COLD_LEAD 1.5 /* a lead past which a cold-start run is cut short */
#define WEIR_SPEC_SWITCH 0.9 /* a measured arm's run under this fraction of no drafts ... */
#define WEIR_SPEC_SWITCH_SEQS 16 /* ... over this many sequence-steps ends, its rate replaced */
#define WEIR_SPEC_FAR 1    /* weir_spec_arm.deferred: far behind no drafts */
#define WEIR_SPEC_BEHIND 2 /* weir_spec_arm.deferred: below a length that lost to a longer */

/* Why a run was given to its arm (weir_spec_arm.chosen, the operator's log): */
enum {
  WEIR_SPEC_WHY_LEAD,  /* the leading arm */
  WEIR_SPEC_WHY_LEARN, /* measured fewer than WEIR_SPEC_MIN_TRIALS steps */
  WEIR_SPEC_WHY_COLD,  /* no drafts' cold-start re-measure */
  WEIR_SPEC_WHY_NEAR,  /* exploration of an arm near the best */
  WEIR_SPEC_WHY_CLIMB, /* the next longer length after a run that accepted every draft */
  WEIR_SPEC_WHY_FAR,   /* a far arm whose gap had passed */
  WEIR_SPEC_WHY_N
};

typedef struct weir_spec_arm {
  int32_t k;       /* drafts per sequence */
  double tps;      /* output tokens per second of pure decode steps: tokens / seconds (arm 0:
                    * the median rate of the bucket's last plain steps) */
  double tokens, seconds; /* their sums over the arm's steps, older steps fading */
  double seqs;            /* the same of its steps' sequences (drafting arms) */
  uint32_t trials; /* steps measured (arm 0: plain steps) */
  uint32_t far_gap;  /* runs between explorations while far behind the best */
  uint32_t next_far; /* the bucket's run count from which it may be explored again */
  uint32_t next_climb; /* the run count from which it may be climbed to again */
  uint32_t chosen[WEIR_SPEC_WHY_N]; /* steps handed out to it, by why its run began */
  uint32_t plain_steps; /* its measured steps in which no sequence drafted (drafting arms) */
  int deferred;      /* not learned here: WEIR_SPEC_FAR (far behind no drafts, here or in a
                      * smaller bucket), WEIR_SPEC_BEHIND (below a length that lost to the
                      * next longer one) */
} weir_spec_arm;

typedef struct weir_spec_bucket_state {
  int32_t cur;   /* the arm running */
  int32_t left;  /* steps left in its run */
  uint32_t runs; /* runs begun */
  int32_t best;  /* the arm that led when the last run began */
  int32_t why;   /* why the current run began (WEIR_SPEC_WHY_*) */
  int32_t run_steps; /* steps of the current run measured so far */
  int run_full;      /* 1 while each of them accepted every sequence's k drafts */
  int run_known;     /* the arm running was measured (WEIR_SPEC_MIN_TRIALS) before this run */
  int run_switch;    /* this run follows one without drafts: its first step is the switch */
  int run_replaced;  /* the fast switch has replaced the arm's rate in this run */
  int run_carried;   /* this run's sums began in the run before (same arm, short evidence) */
  double run_was;    /* the running arm's rate when the run began (carried runs: the first) */
  double run_tokens, run_seconds, run_seqs; /* sums of the run's steps, the switch included */
  double steady_tokens, steady_seconds, steady_seqs; /* the same without the switch */
  int32_t steady_steps;
  double plain[WEIR_SPEC_PLAIN]; /* rates (tokens / seconds) of the last plain steps, a ring */
  uint32_t plain_n;              /* plain steps recorded; the next goes to plain_n % PLAIN */
} weir_spec_bucket_state;

typedef struct weir_spec_policy {
  int32_t kmax;
  int adaptive; /* 0: always kmax */
  int32_t num_arms;
  weir_spec_arm arms[WEIR_SPEC_BUCKETS][WEIR_SPEC_MAX_ARMS];
  weir_spec_bucket_state state[WEIR_SPEC_BUCKETS];
} weir_spec_policy;

/* kmax >= 1. adaptive 0 makes weir_spec_choose answer kmax always. */
void weir_spec_policy_init(weir_spec_policy *p, int32_t kmax, int adaptive);

/* The bucket of a step with n sequences in decode (n >= 1). */
int weir_spec_bucket(int32_t n);

/* The speculation length for a step with n sequences (the engine counts every sequence the
 * step may carry: running or waiting): the arm running in n's bucket until its run ends;
 * then an arm measured fewer than WEIR_SPEC_MIN_TRIALS steps (0, then the longest, then the
 * rest from the longest down; not one deferred), one run in
 * WEIR_SPEC_EXPLORE the least measured arm near the best, a far arm whose gap has passed,
 * else the arm with the most tokens per second (a drafting arm measured at least
 * WEIR_SPEC_MIN_TRIALS steps and more than WEIR_SPEC_MARGIN ahead of no drafts). Returns the
 * arm's k (0: no drafts). */
int32_t weir_spec_choose(weir_spec_policy *p, int32_t n);

/* Records a pure decode step with n sequences run at length k (as chosen): `tokens` output
 * tokens in `seconds`. plain: no sequence drafted in it (always so at k = 0), so it also rates
 * no drafts. Steps with a prefill, or at a k that is no arm, are not recorded. */
void weir_spec_observe(weir_spec_policy *p, int32_t n, int32_t k, int64_t tokens,
                       double seconds, int plain);

/* The drafts for one sequence: k cut to where its acceptance a (0..1) gives each draft a
 * chance of at least WEIR_SPEC_MIN_REACH of being checked; at least 1 when k >= 1. */
int32_t weir_spec_seq_len(int32_t k, double a);

/* Whether a sequence whose acceptance is a drafts at all in a step of n sequences (adaptive
 * policy only), where one more row costs `row_cost` of such a step. While decode is
 * memory-bound an extra row costs about WEIR_SPEC_ROW_COST of the step on a CPU (measured on
 * the trained target on the development CPU: 4 sequences, 729 us a step, 62 us a row) and
 * its first draft brings a tokens: a sequence pays for its drafts only where
 * a >= n * row_cost (at most WEIR_SPEC_GATE_MAX). The length the policy picks is the step's;
 * a sequence whose drafts mostly fail (ngram on sampled text: a = 0.1-0.3) would still draft
 * one per step at any length, a loss of 5-8% at 4 streams (issue 32: the in-service guard
 * cells at 0.8). A gated sequence drafts one token every WEIR_SPEC_PROBE * n steps, so its
 * acceptance follows its text at a cost of 1 / WEIR_SPEC_PROBE of a row per step.
 * WEIR_SPEC_ROW_COST_GPU is a GPU's (verification rows nearly free at small batches): an
 * estimate, not measured yet (scripts/gpu-check spec). */
#define WEIR_SPEC_ROW_COST 0.08
#define WEIR_SPEC_ROW_COST_GPU 0.01
#define WEIR_SPEC_GATE_MAX 0.9
#define WEIR_SPEC_PROBE 16
int weir_spec_seq_pays(double a, int32_t n, double row_cost);

/* Moving average of a sequence's acceptance after a verified step with `drafted` drafts of
 * which `accepted` were: every checked draft counts (the accepted ones as 1, the first
 * rejected as 0; the ones after it were never checked). */
double weir_spec_acceptance_update(double a, int32_t drafted, int32_t accepted);

#endif
