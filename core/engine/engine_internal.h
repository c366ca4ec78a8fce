/* What the engine's files share (internal to core/engine): the engine and request structs
 * and the functions one file calls in another. The files, each calling only those below it:
 *
 *   engine_req.c    a request on the engine thread: its events, its end (blocks freed in the
 *                   same step), its sampling row; the published stats
 *   engine_spec.c   speculation: proposing drafts (a drafter plugin, or the draft model run
 *                   here: engine_spec.c's run_draft), verifying them by the rejection rule,
 *                   the speculation policy's log
 *   engine_step.c   one step: schedule, copy blocks, fill the batch, draft, forward, sample
 *                   or verify, commit
 *   engine.c        life cycle (create, destroy), the thread's loop over its queues
 *                   (submissions, aborts, pause/resume), and the public API
 *
 * Everything here is for the engine thread unless a field says "under lock". */
#ifndef WEIR_ENGINE_INTERNAL_H
#define WEIR_ENGINE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/engine.h"
#include "engine/engine_metrics.h"
#include "engine/scheduler.h"
#include "engine/service.h"
#include "engine/spec_policy.h"
#include "engine/stop.h"
#include "grammar/grammar.h"
#include "model/tokenizer.h"
#include "plugin/sampling.h"
#include "runtime/runtime.h"
#include "weir/drafter.h"
#include "weir/sampler.h"

#define LOG_COMPONENT "engine"

typedef struct engine_req {
  uint64_t id;
  weir_gen_event_cb cb;
  void *user;
  weir_sampling_params sampling;
  uint64_t rng[4]; /* weir/rng.h: the sampler's and verification's draws */
  int32_t max_tokens, min_tokens;
  int ignore_eos;
  int32_t *stop_ids;
  int32_t num_stop_ids;
  int32_t *bias_tokens; /* the request's logit bias, owned copies (sampling points at them) */
  float *bias_values;
  int32_t priority;
  int32_t *prompt;
  int32_t num_prompt;
  weir_stop_matcher stop;
  weir_detok detok;
  weir_matcher *matcher; /* structured output: the constraint's state, or NULL */
  /* Prompt logprobs: entry p scores prompt token p + 1, filled as the prefill chunks run and
   * delivered with the first output token; NULL when not asked. */
  weir_sample_result *plp;
  int plp_sent;
  weir_sched_seq *seq;
  int32_t dslot; /* this step's draft-model slot (engine_spec.c), or -1 */
  /* Bit j: this step's draft j was the argmax of a plain greedy row, drawn without a
   * distribution (verified as a deterministic draft: q one-hot on it). */
  uint64_t dgreedy;
  int32_t dkv;   /* leading positions whose draft-model KV is written (run_draft) */
  int catch_up;  /* this step: would draft but its catch-up did not fit (reserve_drafts) */
  /* This step's drafts to verify (run_draft): the item's placeholders, or fewer once the
   * draft's confidence ran out (the rest are trimmed from the batch), and the product of
   * the confidences of the drafts so far. */
  int32_t dkeep;
  double dconf;
  double acceptance; /* moving average of this request's checked drafts (spec_policy.h) */
  int32_t spec_gated; /* steps its drafts were gated since its last probe (weir_spec_seq_pays) */
  int no_spec;   /* weir_gen_request.no_speculation */
  int32_t num_output;
  double t_arrival, t_sched, t_first, deadline;
  struct engine_req *next; /* incoming queue / live list link */
  struct engine_req *live_prev, *live_next;
} engine_req;

#define WEIR_PROF_TOKENS 16

struct weir_engine {
  /* Immutable after create. */
  weir_runtime rt;    /* plugins, target (model 0) and draft (model 1), the KV pool */
  weir_tokenizer *tok; /* rt's: the target's tokenizer */
  weir_llama *model;  /* rt.model[0] */
  weir_kv_pool *pool; /* rt.pool */
  weir_kv_cache *kv;  /* the pool's bookkeeping */
  weir_sched *sched;
  weir_metrics *metrics;
  int own_metrics;
  weir__engine_metrics em; /* engine thread records; registered at create */
  weir_chat_renderer *chat;
  char *model_name;   /* == model_names[0] */
  char **model_names; /* the served name, then the configured aliases */
  int32_t num_model_names;
  int32_t vocab, ctx_len, max_waiting;
  int64_t default_timeout_ms;
  int32_t *eog_ids; /* tokens that end generation: EOS and end-of-turn markers */
  int32_t num_eog;
  const weir_sampler_ops *sampler;
  void *sampler_self;
  /* Every sampler call goes through here: the host applies the 1.1 parameters (masks, logit
   * bias) a sampler does not declare in its caps (plugin/sampling.h). Engine thread. */
  weir_sampler_call scall;
  const weir_drafter_ops *drafter; /* NULL: no speculative decoding */
  void *drafter_self;
  /* Structured output: the vocabulary as byte strings and the compiled constraints by text
   * (thread-safe; weir_engine_constraint), and per step the masks of constrained rows. */
  weir_grammar_vocab *gvocab;
  weir_constraint_cache *gcache;
  weir_service service; /* HTTP's handle on the above (service.h); filled at load */
  uint32_t *masks;                 /* [mask rows][mask_words], mask rows = max(max_seqs_step,
                                    * spec_k + 1): a step's constrained rows, or the rows of
                                    * one verified item */
  size_t mask_words;
  weir_sampling_params *row_params; /* [mask rows]: a constrained row's params + its mask */
  weir_matcher **cms;              /* [max_seqs_step] scratch */
  /* The masks of a step's constrained rows are computed in parallel on this pool (made at
   * the first step with two or more; device.threads threads, the engine thread included),
   * while the device plugin's own threads are idle between forward passes. */
  weir_threadpool *mask_pool;
  int mask_threads;
  int32_t spec_k;                  /* drafts per sequence and step */
  int spec_break_residual;         /* weir_engine_opts: tests only */
  weir_spec_policy spec;           /* which speculation length pays (spec_policy.h) */
  int32_t step_n, step_k;          /* this step's decode sequences and chosen length */
  double spec_row_cost; /* a verification row's share of a step's time (weir_spec_seq_pays) */
  int64_t step_tokens;             /* output tokens this step delivered */
  int64_t step_drafts;             /* drafts this step verified */
  /* WEIR_STEP_PROFILE=1 in the environment (read at create): the time of each phase of a
   * step, summed per step size (tokens the target ran, 1..WEIR_PROF_TOKENS, larger steps in
   * the last), logged when the engine stops. Off: one branch per phase. Engine thread. */
  int prof_on;
  int spec_trace; /* WEIR_SPEC_TRACE: log each policy run (docs/engine.md) */
  /* WEIR_STEP_TRACE=path (read at create): one line per step written there, wall and CPU
   * time with what the step carried (docs/engine.md); NULL: off. Engine thread only. */
  FILE *step_trace;
  int spec_cpu_clock; /* the policy times steps by this thread's CPU time (engine.c) */
  int spec_warm;      /* the first drafting step ran (not shown to the policy) */
  struct {
    uint64_t steps, tokens_out;
    double propose, sched, draft, forward, sample, total;
    double draft_fwd;     /* of draft: the draft model's forward passes */
    uint64_t draft_passes; /* and how many there were */
  } prof[WEIR_PROF_TOKENS + 1];
  /* The steps the profile above leaves out (a prompt chunk in them: a request's admission),
   * summed apart, split by whether a sequence drafted in them: the policy does not rate
   * them either, yet they draft beside the prefill. */
  struct {
    uint64_t steps, tokens_out, rows, drafts; /* rows: tokens the target ran */
    double total;
  } prof_prefill[2];
  double step_draft_fwd;   /* this step's draft forward time (profile on) */
  int32_t step_draft_passes; /* this step's draft model forward passes (always counted) */
  int32_t step_draft_tokens; /* the tokens they fed the draft model */
  int32_t step_device_picks; /* the passes whose greedy drafts the device picked */
  int32_t step_verify_picks; /* the verified items whose greedy rows the device picked */
  uint64_t spec_draft_passes, spec_draft_model_tokens; /* their sums (weir_engine_stats) */
  /* weir_engine_opts' test hooks (NULL / 0: not used) and the count of steps with
   * sequences in decode that spec_force_k is asked about. */
  int32_t (*spec_force_k)(void *user, uint64_t step);
  void (*spec_on_step)(void *user, const weir_engine_spec_step *st);
  void (*spec_on_drafts)(void *user, uint64_t id, const int32_t *drafts, int32_t n);
  void *spec_user;
  int spec_eager_catch_up;
  int spec_host_argmax;
  uint64_t spec_decode_steps;

  /* Step scratch (engine thread only). */
  int32_t max_tokens_step, max_seqs_step, max_rows, bt_stride;
  int32_t max_prompt_rows;         /* of max_rows: for prompt logprobs */
  weir_step_batch tb;              /* the target's batch: the scheduler fills its arrays */
  weir_sampling_row *rows;
  weir_sample_result *results;
  engine_req **row_req;
  int32_t *suppress;
  weir_draft_seq *dseqs;           /* [max_seqs_step] */
  engine_req **dreqs;
  int32_t *dtokens, *dcounts;      /* [max_seqs_step][spec_k], [max_seqs_step] */
  float *probs;                    /* [spec_k + 1][vocab]: verification distributions */
  /* The greedy shortcuts (argmax without the sampler) read logits on the host. Where the
   * device's memory is not the host's (CUDA), they read a copy of the rows they need. */
  int logits_host;                 /* weir_llama_forward's logits are host memory (CPU) */
  float *hlog;                     /* copies of device logit rows, hlog_rows x row width */
  size_t hlog_floats;
  uint64_t spec_drafted, spec_accepted;
  /* Draft model (a drafter with model_path, ABI 1.3): run here over KV group 1 of the pool,
   * through the same plugins as the target (rt.model[1]). NULL without one. */
  weir_llama *draft;
  /* A step's draft distributions: q of drafted position j for draft slot ds at
   * qbuf[(j * max_seqs_step + ds) * vocab]. */
  float *qbuf;
  int32_t dwidth;                  /* a row of the draft's logits (drafter.head_vocab) */
  int32_t *dhead;                  /* [dwidth]: the token id of each column, or NULL: all */
  float *dlrow;                    /* [vocab]: a draft row widened to the vocabulary (-inf off
                                      the head), or NULL */
  weir_step_batch db;              /* the draft model's batch of one pass */
  int32_t *d_item;                 /* [max_seqs_step]: the step item of each draft logit row */
  int32_t *d_tok;                  /* [max_seqs_step]: a pass's greedy drafts, -1: from q */
  float *d_conf;                   /* [max_seqs_step]: a pass's drafts' confidence (top prob.) */
  /* Greedy picks by the device plugin (weir_device_ops.argmax_rows, ABI 1.8) on every device
   * that has the op (the CPU device's is vectorised; a CUDA device's saves the copy of the
   * rows): a draft pass of greedy rows, or a greedy verified item, copies one pick per row
   * (and the draft's top probabilities) to the host instead of its rows. dargmax 0 (a device
   * without the op, or weir_engine_opts.spec_host_argmax): the host picks. Device buffers of
   * max(max_seqs_step, spec_k + 1) entries, freed before the plugins. */
  int dargmax;
  int32_t *dev_pick;               /* device: a pass's or an item's picks (token ids) */
  float *dev_prob;                 /* device: their top probabilities */
  int32_t *dev_head;               /* device [dwidth]: dhead's ids, or NULL (no head) */
  int32_t *d_pick;                 /* the picks, copied back (any drafter) */
  double spec_min_conf;            /* drafter.min_confidence */

  /* Embeddings (engine_embed.c): the pooling, the batch of an embedding's chunk and the host
   * rows of its hidden states. Engine thread. */
  int embed_pooling;               /* WEIR__EMBED_* */
  weir_step_batch eb;
  float *embed_rows;               /* [max_rows][n_embd] */
  struct weir_bert *embed_model;   /* [embedding] model, or NULL: the served model embeds */

  /* Shared with other threads, under lock. */
  pthread_mutex_t lock;
  pthread_cond_t wake;
  engine_req *incoming_head, *incoming_tail;
  int32_t num_incoming;
  uint64_t *aborts;
  int32_t num_aborts, cap_aborts;
  struct weir__engine_flow_op {
    uint64_t id;
    int resume;
  } *flow;                         /* weir_engine_pause / _resume, in call order */
  int32_t num_flow, cap_flow;
  int stopping;
  struct weir__engine_embed_job *embed_head, *embed_tail; /* queued embeddings */
  pthread_cond_t embed_done;       /* broadcast when queued embeddings finished */
  weir_engine_stats stats;

  engine_req *live; /* engine thread only: every admitted request */
  atomic_uint_fast64_t next_id;
  pthread_t thread;
  int thread_started;
};

/* ---- engine_req.c ------------------------------------------------------------------------ */

double weir__engine_now(void);
/* Frees a request that never reached the scheduler, or whose sequence is gone. */
void weir__engine_req_free(engine_req *r);
void weir__engine_live_add(weir_engine *e, engine_req *r);
void weir__engine_fill_usage(const engine_req *r, weir_gen_event *ev);
/* Delivers the final event and releases everything the request holds, its KV blocks
 * included, in this same step; the stats are published first. */
void weir__engine_req_finish(weir_engine *e, engine_req *r, weir_finish_reason why, int status,
                             const char *error, const char *tail, size_t tail_len);
/* The same for a request whose text may still hold a stop-string prefix: released first. */
void weir__engine_req_finish_flush(weir_engine *e, engine_req *r, weir_finish_reason why);
/* One sampled token: its text, and whether the request ends. 1 when it ended (and is freed). */
int weir__engine_req_on_token(weir_engine *e, engine_req *r, const weir_sample_result *res);
int weir__engine_is_in(const int32_t *ids, int32_t n, int32_t tok);
void weir__engine_publish_stats(weir_engine *e);
/* An index drawn from non-negative weights; `fallback` when they sum to zero. */
int32_t weir__engine_draw_from(const float *w, int32_t n, double u, int32_t fallback);
/* Row k of the suppression scratch. */
int32_t *weir__engine_suppress_row(weir_engine *e, int32_t k);
/* Request r's sampling row as if `extra` accepted drafts had been appended. */
weir_sampling_row weir__engine_make_row(weir_engine *e, engine_req *r, int32_t extra,
                                        int32_t *sup);

/* ---- engine_spec.c ----------------------------------------------------------------------- */

/* Before a step: drafts for the running sequences in decode (the drafter's, or placeholders
 * the draft model fills in run_draft). */
void weir__engine_propose_drafts(weir_engine *e);
/* The draft model's passes of a step, after its batch is filled and before the target runs. */
void weir__engine_run_draft(weir_engine *e, weir_sched_out *out);
/* Tests only: reports the step's drafting to weir_engine_opts.spec_on_step (when set). */
void weir__engine_spec_trace_step(weir_engine *e);
/* Verifies one item's drafts against the target's logits rows [1 + num_drafts][vocab]. */
void weir__engine_verify_item(weir_engine *e, const weir_sched_item *it, float *logits);
/* Logs what the speculation policy measured (at shutdown). */
void weir__engine_spec_log(const weir_engine *e);
void weir__engine_prof_log(const weir_engine *e);

/* ---- engine_embed.c ---------------------------------------------------------------------- */

enum { WEIR__EMBED_MEAN = 0, WEIR__EMBED_LAST = 1, WEIR__EMBED_CLS = 2 };
struct weir_config;
/* Fills e->service.embed and what the jobs need; after the models and the step limits. */
int weir__engine_embed_setup(weir_engine *e, const struct weir_config *cfg, char *err,
                             size_t errlen);
void weir__engine_embed_free(weir_engine *e);
/* Runs (or, stopping, cancels) every queued embedding and wakes their callers. */
void weir__engine_embed_run(weir_engine *e, int stopping);

/* ---- engine_step.c ----------------------------------------------------------------------- */

/* Runs one scheduler step. Returns 1 when work was done, 0 when idle. */
int weir__engine_run_step(weir_engine *e);

#endif
