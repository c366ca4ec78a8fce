/* The inference engine: owns the model, the plugins, the paged KV cache and the scheduler,
 * and runs steps on its own thread.
 *
 * Threading. weir_engine_submit, _abort, _pause, _resume, _tokenize, _detokenize,
 * _render_chat, _info and _stats may be called from any thread (the HTTP thread). Events are delivered by calling
 * the request's callback ON THE ENGINE THREAD: the callback must be quick and must not call
 * back into the engine except weir_engine_abort; it copies what it needs (event memory is
 * borrowed for the call) and hands it to its own thread (e.g. a queue + uv_async_send).
 *
 * Lifetime. For every successful submit the engine delivers exactly one final event
 * (finish != WEIR_FINISH_NONE), after which it never touches `user` again; an abort, a
 * timeout, an error and engine shutdown all end with such an event. */
#ifndef WEIR_ENGINE_H
#define WEIR_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "template/chat_template.h" /* weir_chat_message, weir_chat_request */
#include "weir/sampler.h"

struct weir_config;
typedef struct weir_engine weir_engine;

typedef enum weir_finish_reason {
  WEIR_FINISH_NONE = 0,  /* still running */
  WEIR_FINISH_STOP = 1,  /* EOS, a stop string or a stop token */
  WEIR_FINISH_LENGTH = 2, /* max_tokens or the context length */
  WEIR_FINISH_ABORT = 3, /* weir_engine_abort (client gone) or shutdown */
  WEIR_FINISH_ERROR = 4, /* see status / error */
  WEIR_FINISH_TIMEOUT = 5, /* the request's timeout passed */
} weir_finish_reason;

const char *weir_finish_reason_name(weir_finish_reason r); /* "stop", "length", "abort", ... */

/* Most stop token ids one request may give: the one limit, weir_engine_submit refuses more
 * with WEIR_E_RANGE and the HTTP API answers 400 beyond it. */
#define WEIR_MAX_STOP_TOKEN_IDS 64
/* Most logit_bias entries one request may give (sampling.num_logit_bias): the one limit, as
 * for stop token ids (WEIR_E_RANGE past it, HTTP 400). */
#define WEIR_MAX_LOGIT_BIAS 1024

/* What a request asks for. Everything is copied by submit; the caller keeps ownership. */
typedef struct weir_gen_request {
  const int32_t *prompt;        /* token ids, already tokenized (BOS included if wanted) */
  int32_t num_prompt;
  weir_sampling_params sampling;
  uint64_t seed;                /* used when has_seed; otherwise a random seed */
  int has_seed;
  int32_t max_tokens;           /* > 0; the engine also stops at the context length */
  int32_t min_tokens;           /* EOS and stop tokens are suppressed until this many */
  int ignore_eos;
  const int32_t *stop_token_ids;
  int32_t num_stop_token_ids;   /* 0..WEIR_MAX_STOP_TOKEN_IDS */
  const char *const *stop;      /* stop strings; the text never includes them */
  int32_t num_stop;
  int32_t priority;             /* lower runs first when the scheduler's policy is priority */
  int64_t timeout_ms;           /* 0: the server's default */
  /* Structured output: the constraint the output must match (weir_engine_constraint of this
   * engine), or NULL. Borrowed: submit starts the request's own matcher on it. A constrained
   * request ends with "stop" once its grammar is complete and nothing can extend it (or when
   * it accepts an end-of-sequence token). Its speculative drafts are cut to what the
   * constraint allows and each verified row samples under its own mask. */
  struct weir_constraint *constraint;
  /* Prompt logprobs (OpenAI's echo with logprobs): the logprob of every prompt token after the
   * first under the model's own distribution (no bias, penalty or temperature), with the top
   * max(0, sampling.num_logprobs) alternatives, delivered once, in an event of their own
   * before the first output token's (weir_gen_event.prompt_logprobs). The prompt skips the prefix cache and is computed at
   * most WEIR_ENGINE_PROMPT_LOGIT_ROWS tokens per step. */
  int prompt_logprobs;
  /* 1: never draft for this request (speculative decoding stays on for the others). */
  int no_speculation;
  /* 1: the text of control tokens the model writes stays in the output (vLLM's
   * skip_special_tokens: false); the end-of-generation or stop token that ends the request
   * is never part of it. */
  int keep_special;
  /* 1: a stop string that ends the request is part of the text (vLLM's
   * include_stop_str_in_output); 0: the text ends before it. */
  int include_stop_str;
} weir_gen_request;

/* Logits rows per step set aside for prompt logprobs (bounded by max_num_batched_tokens): at
 * a 32,000-token vocabulary, 16 MiB of logits. */
#define WEIR_ENGINE_PROMPT_LOGIT_ROWS 128

/* Per-request timings, seconds, filled in the final event. */
typedef struct weir_gen_timing {
  double queue_s;        /* arrival to first scheduled */
  double ttft_s;         /* arrival to first token */
  double prefill_s;      /* first scheduled to first token */
  double decode_s;       /* first token to finish */
  double e2e_s;          /* arrival to finish */
} weir_gen_timing;

typedef struct weir_gen_event {
  uint64_t request_id;
  /* New output since the last event: UTF-8-complete text (held back while it could still be
   * the start of a stop string) and the token ids it came from. Either may be empty. */
  const char *text;
  size_t text_len;
  const int32_t *tokens;
  int32_t num_tokens;
  const weir_sample_result *logprobs; /* [num_tokens] when sampling.num_logprobs >= 0 */
  /* With prompt_logprobs, in one event with no output (before the first token's): entry p
   * scores prompt token p + 1 (token, logprob, top alternatives); num_prompt_logprobs is the
   * prompt length - 1. A one-token prompt gets no such event. */
  const weir_sample_result *prompt_logprobs;
  int32_t num_prompt_logprobs;
  weir_finish_reason finish;          /* NONE unless this is the final event */
  int status;                         /* with WEIR_FINISH_ERROR: a weir_status */
  const char *error;                  /* with WEIR_FINISH_ERROR: a message */
  /* Usage, current as of this event. */
  int32_t prompt_tokens;
  int32_t cached_tokens;     /* prompt tokens served from the prefix cache */
  int32_t completion_tokens;
  int32_t num_preemptions;
  weir_gen_timing timing;    /* final event only */
  /* Final event with finish STOP: the stop string that ended the request (borrowed for the
   * call), NULL when an end-of-generation or stop token did. */
  const char *stop_string;
} weir_gen_event;

typedef void (*weir_gen_event_cb)(void *user, const weir_gen_event *ev);

typedef struct weir_engine_info {
  /* The served name: server.served_model_name, else the GGUF's general.name, else the model
   * file's name without extension. Also the model_name label on every metric. */
  const char *model_name;
  /* Every name the API accepts in a request's `model`: model_name first, then the aliases
   * server.served_model_name lists after it. Owned by the engine. */
  const char *const *model_names;
  int32_t num_model_names;
  int32_t vocab_size;
  int32_t context_length;   /* max prompt + output tokens */
  int32_t bos_id, eos_id;   /* -1 when none */
  const char *chat_template_name; /* "jinja" (the model's own), or "chatml", "llama3", ... */
} weir_engine_info;

typedef struct weir_engine_stats {
  int32_t num_running;
  int32_t num_waiting;      /* queued, not yet holding a place in the batch */
  int32_t kv_blocks_total;
  int32_t kv_blocks_used;   /* referenced by running sequences */
  int32_t kv_blocks_cached; /* unreferenced but holding a cached prefix */
  uint64_t prefix_queries_tokens; /* prompt tokens looked up in the prefix cache */
  uint64_t prefix_hits_tokens;    /* of which found */
  uint64_t num_preemptions;
  uint64_t num_steps;
  uint64_t spec_draft_tokens;     /* speculative tokens proposed and verified */
  uint64_t spec_accepted_tokens;  /* of which accepted */
  int32_t num_paused;       /* weir_engine_pause: out of the batch, not counted above */
  uint64_t graph_steps;     /* model steps replayed from a recorded step graph */
  uint64_t graph_padding;   /* padding sequences those padded decode steps computed */
  /* The draft model's forward passes, and the tokens they fed it (its catch-up over the
   * target's tokens and the drafts it fed back); 0 without a draft model. A step in which no
   * sequence drafts runs none (engine_spec.c: the draft's KV catches up when drafting
   * starts). */
  uint64_t spec_draft_passes;
  uint64_t spec_draft_model_tokens;
} weir_engine_stats;

/* Tests only (weir_engine_opts.spec_trace): what one engine step did with the drafter. */
typedef struct weir_engine_spec_step {
  int32_t k;            /* the speculation length the step ran (the policy's or spec_force_k) */
  int32_t drafts;       /* draft tokens it verified */
  int32_t draft_passes; /* draft model forward passes it ran */
  int32_t draft_tokens; /* tokens those passes fed the draft model */
  int32_t device_picks; /* of those passes, the ones whose greedy drafts the device picked */
  int32_t verify_picks; /* verified sequences whose greedy rows the device picked */
} weir_engine_spec_step;

struct weir_metrics;
struct weir_progress;

typedef struct weir_engine_opts {
  /* Where plugin metrics go (borrowed; must outlive the engine); NULL: a registry of the
   * engine's own (weir_engine_metrics). The engine also labels it model_name. */
  struct weir_metrics *metrics;
  /* Optional (borrowed until create returns): the engine reports loading the model's weights
   * in it, which any thread may read meanwhile (weir_progress_fraction: /health's "loading"
   * percentage). NULL: the engine shows its progress with one of its own. */
  struct weir_progress *load_progress;
  /* Tests only: at a rejected draft, draw from the target's distribution instead of the
   * residual max(0, p - q). Biased on purpose, so that the distribution test of speculative
   * decoding can show it detects a broken rejection rule (tests/model/test_trained.c). */
  int spec_break_residual;
  /* Tests only (tests/model/test_trained.c), all called on the engine thread with
   * spec_user; NULL: not used. spec_force_k answers the speculation length of the engine's
   * step number `step` (0-based, steps that had sequences in decode counted), -1 for the
   * policy's; spec_on_step reports each step's drafting; spec_on_drafts the drafts of one
   * sequence verified in a step (the request's id, its drafts, borrowed for the call). */
  int32_t (*spec_force_k)(void *user, uint64_t step);
  void (*spec_on_step)(void *user, const weir_engine_spec_step *st);
  void (*spec_on_drafts)(void *user, uint64_t id, const int32_t *drafts, int32_t n);
  void *spec_user;
  /* Tests only: the draft model's KV catches up at every step, drafting or not (the path
   * before lazy catch-up), so a test can compare its drafts with the lazy path's. */
  int spec_eager_catch_up;
  /* Tests only: the draft's greedy drafts and greedy verification are picked by the engine's
   * host fallback even where the device plugin has argmax_rows (ABI 1.8): the path of a
   * device without the op, so a test can compare the two. */
  int spec_host_argmax;
} weir_engine_opts;

/* Loads the model and plugins named by the config and starts the engine thread. Logs and
 * returns a status on failure, having freed everything. opts may be NULL (all defaults). */
int weir_engine_create_opts(const struct weir_config *cfg, const weir_engine_opts *opts,
                            weir_engine **out);
/* The same with opts {NULL, NULL} and {metrics, NULL}. */
int weir_engine_create(const struct weir_config *cfg, weir_engine **out);
int weir_engine_create_ex(const struct weir_config *cfg, struct weir_metrics *metrics,
                          weir_engine **out);
/* Registers the engine's metric families in m (docs/metrics.md: request outcomes and token
 * counts, queue, prefill and decode times, the batch and KV-cache gauges, preemptions, prefix
 * caching, speculation). An engine registers and records them itself in the registry it is
 * created with; a server calls this first so the families exist while the model loads.
 * Registering twice is harmless. WEIR_E_NOMEM. */
int weir_engine_register_metrics(struct weir_metrics *m);
/* The registry plugin metrics were registered in. */
struct weir_metrics *weir_engine_metrics(weir_engine *e);
/* Aborts every request (each gets its final event), stops the thread, frees everything. */
void weir_engine_destroy(weir_engine *e);

/* Queues a request. Returns WEIR_E_BUSY when the waiting queue is full (HTTP 429),
 * WEIR_E_RANGE when prompt + max_tokens cannot fit the context or there are more than
 * WEIR_MAX_STOP_TOKEN_IDS stop token ids or WEIR_MAX_LOGIT_BIAS logit bias entries (HTTP 400),
 * WEIR_E_INVAL for bad parameters (a bias token outside the vocabulary or a bias value outside
 * [-100, 100] included). sampling.logit_bias_* are copied; sampling.allowed is ignored.
 * On success *id identifies it and cb will receive its events. */
int weir_engine_submit(weir_engine *e, const weir_gen_request *req, weir_gen_event_cb cb,
                       void *user, uint64_t *id);
/* Asks the engine to end a request; it frees its KV blocks in the next step and delivers the
 * final event (WEIR_FINISH_ABORT). Unknown or finished ids are ignored. */
void weir_engine_abort(weir_engine *e, uint64_t id);

/* Flow control for a request whose output cannot be delivered (a client that stopped
 * reading): pause takes it out of the running batch without freeing its KV blocks, as a
 * preemption that keeps its cache; resume puts it back (ahead of new admissions) and it
 * continues where it stopped. A paused request still ends by abort, timeout or shutdown,
 * and when the KV pool runs short a paused request's blocks are reclaimed before any running
 * request is preempted (it is then recomputed after it resumes). Events already queued
 * before the pause may still arrive. Unknown or finished ids are ignored; the calls are
 * thread-safe and asynchronous (applied before the engine's next step), in call order. */
void weir_engine_pause(weir_engine *e, uint64_t id);
void weir_engine_resume(weir_engine *e, uint64_t id);

/* Tokenizer access (thread-safe). *ids / *text are malloc'd; the caller frees. */
int weir_engine_tokenize(weir_engine *e, const char *text, size_t len, int add_special,
                         int32_t **ids, int32_t *n);
/* Where each token's text begins in weir_engine_detokenize's text of the same ids (with
 * skip_special, in that text without special tokens such as BOS, which for a prompt the
 * tokenizer made from text is that text): offsets[i] (bytes) for i < n, caller's array. A
 * token whose bytes complete a character begun by an earlier one starts where that
 * character ends. WEIR_E_RANGE, WEIR_E_NOMEM. */
int weir_engine_detokenize_offsets(weir_engine *e, const int32_t *ids, int32_t n,
                                   int skip_special, size_t *offsets);
int weir_engine_detokenize(weir_engine *e, const int32_t *ids, int32_t n, char **text,
                           size_t *len);
/* Piece text of one token for logprobs output (malloc'd). */
int weir_engine_token_text(weir_engine *e, int32_t id, char **text, size_t *len);

/* Renders chat messages with the model's own template (or the configured built-in),
 * ending with the assistant's turn opener when add_generation_prompt. *out is malloc'd.
 * weir_chat_message and weir_chat_request are in template/chat_template.h. */
int weir_engine_render_chat(weir_engine *e, const weir_chat_message *msgs, int32_t n,
                            int add_generation_prompt, char **out);
/* The same for a full request (OpenAI-style messages, tools, template arguments), with the
 * reason in err when it fails: WEIR_E_INVAL carries the template's own message. */
int weir_engine_render_chat_ex(weir_engine *e, const weir_chat_request *req, char **out,
                               char *err, size_t errlen);

void weir_engine_info_get(weir_engine *e, weir_engine_info *out);
/* The service handle (engine/service.h): tokenizer, chat template, constraint cache and
 * limits, for callers outside the step loop. Valid until weir_engine_destroy; thread-safe. */
struct weir_service;
const struct weir_service *weir_engine_service(const weir_engine *e);
void weir_engine_stats_get(weir_engine *e, weir_engine_stats *out);

struct weir_constraint;
struct weir_constraint_spec;
/* Compiles a structured-output constraint (JSON object, JSON Schema, regex, choice, grammar:
 * core/grammar/grammar.h) for this engine's vocabulary, or finds it in the engine's cache.
 * On success *out holds a reference the caller releases (weir_constraint_release) after
 * submitting. WEIR_E_INVAL with a one-line reason in err meant for the client (an unsupported
 * keyword, an invalid regex, a schema that can produce nothing, a limit), WEIR_E_NOMEM.
 * Thread-safe. */
int weir_engine_constraint(weir_engine *e, const struct weir_constraint_spec *spec,
                           struct weir_constraint **out, char *err, size_t errlen);

#endif
