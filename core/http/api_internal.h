/* What the API layer's three files share: api.c (routing, jobs, engine events),
 * api_params.c (request bodies into engine requests: every parameter, limit and default of a
 * request is decided there) and api_render.c (engine output as OpenAI's JSON and SSE).
 * Loop thread only, except what says it is thread-safe (the prep and compile pools run it). */
#ifndef WEIR_HTTP_API_INTERNAL_H
#define WEIR_HTTP_API_INTERNAL_H

#include <cjson/cJSON.h>

#include "grammar/grammar.h"
#include "http/api.h"
#include "template/tool_calls.h"

#define MAX_N 16
#define MAX_CHOICES 256
#define MAX_STOP 16
#define MAX_PATH 160 /* longest JSON path named in an error's `param` */
#define WEIR_API_MAX_TOOLS 128 /* functions in one request's `tools` */
/* Calls in one reply forced by tool_choice "required" with parallel calls on: the grammar
 * closes the list after this many, so a model that repeats a call does not spend the whole
 * budget on it (and a list cut by max_tokens loses at most its last call). */
#define WEIR_API_MAX_FORCED_CALLS 8
/* max_tokens of a /v1/completions request that gives none (OpenAI's default); chat requests
 * take server.default_max_tokens. */
#define WEIR_API_COMPLETIONS_MAX_TOKENS 16

/* ---- api_cache.c: the response cache's host side (docs/response-cache.md) ---- */

#define WEIR__RCACHE_KEY_CAP 192
/* Cache-Control request directives (weir__http_req.cache_control). */
#define WEIR__CC_NO_STORE 1 /* the answer is not stored */
#define WEIR__CC_NO_CACHE 2 /* a stored answer is not served */

/* What the cache decided for one request: made on the prep pool, then owned by its job. */
typedef struct api_cache_ctx {
  const char *status;   /* x-weir-cache: "miss", "hit-exact"; NULL when no cache is set up */
  int may_store;        /* the answer is recorded and stored when it completes */
  int num_choices;
  int64_t ttl_ms;
  char key[WEIR__RCACHE_KEY_CAP]; /* "weir:v1:<key scope>:<user scope>:<answer hash>" */
  int looked_up;        /* the exact layer was asked (the request may be served a stored
                           or a joined answer) */
  char *hit;            /* a hit: the recorded answer (malloc'd, checked), else NULL */
  size_t hit_len;
  /* The semantic layer (a request that opted in): its bucket's key, the user turn's vector
   * (malloc'd, sem_dim floats) and the nearest candidate it was not served from ("" for
   * none) with its similarity: after the live answer, that pair is labelled (same answer or
   * not) and the answer added to the bucket. */
  char sem_key[WEIR__RCACHE_KEY_CAP];
  float *sem_vec;
  int32_t sem_dim;
  char cand_key[WEIR__RCACHE_KEY_CAP];
  float cand_sim;
} api_cache_ctx;

/* Prep pool: decides whether a prepared request may be served or stored, builds its key and,
 * when it may be served, looks it up (a hit fills c->hit). A backend failure is counted and
 * logged and leaves a miss. auth: the Authorization header or NULL; cc: WEIR__CC_* bits. */
struct api_gen;
void weir__rcache_lookup(weir__http_server *s, const struct api_gen *a, const char *auth,
                         int cc, api_cache_ctx *c);
void weir__rcache_ctx_free(api_cache_ctx *c);
/* The key prefix of a scope: "weir:v1:<key scope>:" or, with_user, also "<user scope>:".
 * 0, or -1 when cap is too small. */
int weir__rcache_scope_prefix(const char *auth, const char *user, int with_user, char *out,
                              size_t cap);
/* Loop: appends one engine event to a choice's recording. */
void weir__rcache_record(weir_buf *rec, uint32_t *num_events, const weir_gen_event *ev);
/* Loop: a completed answer (its choices' recordings) as one recorded value (appended to v;
 * -1 when memory ran out). */
int weir__rcache_build(weir_buf *v, const weir_buf *const *recs, const uint32_t *num_events,
                       int num_choices);
/* Loop: stores a recorded value (copied) on the prep pool, with what the semantic layer
 * learns from it (c->sem_vec is taken). */
void weir__rcache_store(weir__http_server *s, api_cache_ctx *c, const weir_buf *value,
                        int num_choices);
/* Loop: the front index (docs/response-cache.md). _front_lookup gives the entry for exactly
 * these bytes when it may be served now (counted as a lookup and an exact hit), or NULL, and
 * the bytes' hash in *hash either way; _front_fill adds the answer a request with those bytes
 * was served (from_store 0) or stored (from_store 1: only with a non-blocking backend, which
 * every front hit asks) under c->key. */
struct weir__front_entry;
struct weir__front_desc;
const struct weir__front_entry *weir__rcache_front_lookup(weir__http_server *s, int kind,
                                                          const char *auth, size_t auth_len,
                                                          const char *body, size_t body_len,
                                                          uint64_t *hash);
void weir__rcache_front_fill(weir__http_server *s, uint64_t hash, int kind, const char *auth,
                             size_t auth_len, const char *body, size_t body_len,
                             const api_cache_ctx *c, const struct weir__front_desc *d,
                             const char *rec, size_t rec_len, int from_store);
void weir__rcache_front_clear(weir__http_server *s);
/* weir__front_set_render on the server's front index (the arguments are taken). */
void weir__rcache_front_render(weir__http_server *s, struct weir__front_entry *e, char *render,
                               size_t len, uint32_t *id_off, uint32_t *created_off, int n,
                               size_t id_len);
/* Loop: counts a request that joined an identical one in flight. */
void weir__rcache_count_join(weir__http_server *s);
/* A recorded answer: 0 when data is one of num_choices choices, well formed; else -1. */
int weir__rcache_check(const char *data, size_t len, int num_choices);
/* Walking a checked recording: the first choice, then per choice its event count and its
 * events. */
const uint8_t *weir__rcache_choices(const char *data);
int weir__rcache_choice(const uint8_t **p, const uint8_t *end, uint32_t *num_events);
int weir__rcache_next_event(const uint8_t **p, const uint8_t *end, weir_gen_event *ev);
/* Prep pool: removes every entry under a key prefix (weir__rcache_scope_prefix; "" for all). */
int weir__rcache_clear(weir__http_server *s, const char *prefix, int64_t *removed);

/* ---- api_front.c: the front index (docs/response-cache.md, "The front index") ----
 * Loop thread only. */

#define WEIR__FRONT_MAX_BODY (16 * 1024)   /* larger bodies always take the full path */
#define WEIR__FRONT_MAX_REC (1024 * 1024)  /* larger answers are not kept in front */
#define WEIR__FRONT_MAX_BYTES (64ull << 20)
#define WEIR__FRONT_MAX_ENTRIES 65536
/* How long a front entry is served without asking a backend whose calls may block (Redis)
 * whether the entry is still there. A local backend (WEIR_CACHE_NONBLOCKING) is asked at
 * every front hit instead. */
#define WEIR__FRONT_FRESH_NS (1000ull * 1000000ull)

/* What a job needs to render a recorded answer, without the parsed request. */
typedef struct weir__front_desc {
  int chat, stream, include_usage, n, num_prompts, responses;
  int tool_mode, parallel_tool_calls;
  char *tool_named;   /* WEIR_TOOLS_NAMED: the function, or NULL */
  cJSON *resp_echo;   /* /v1/responses: the fields its Response repeats, or NULL */
} weir__front_desc;

typedef struct weir__front_entry {
  struct weir__front_entry *hnext, *older, *newer;
  uint64_t hash;
  int kind;                /* the endpoint (api.c's W_* value) */
  size_t size;             /* bytes charged to the table */
  uint64_t fresh_until_ns; /* a blocking backend: served without asking until then */
  char key[WEIR__RCACHE_KEY_CAP]; /* the full key the answer is stored under */
  weir__front_desc d;      /* owned: tool_named and resp_echo are the entry's copies */
  const char *auth, *body, *rec; /* into data[] */
  size_t auth_len, body_len, rec_len;
  /* The streamed body as the first front hit wrote it (chunked framing included), with the
   * places of its response id and its "created" time, so that later hits are one copy and
   * two patches (api.c, front_serve). NULL until then; owned. */
  char *render;
  size_t render_len;
  uint32_t *render_id_off, *render_created_off; /* owned, render_n each */
  int render_n;
  size_t render_id_len;    /* the id's length, prefix included */
  char data[];
} weir__front_entry;

typedef struct weir__front weir__front;
weir__front *weir__front_new(size_t max_bytes, int64_t max_count);
void weir__front_free(weir__front *f);
/* Drops every entry (an admin clear). */
void weir__front_clear(weir__front *f);
int64_t weir__front_count(const weir__front *f);
uint64_t weir__front_hash(int kind, const char *auth, size_t auth_len, const char *body,
                          size_t body_len);
/* The entry for exactly these bytes, or NULL. Borrowed until the table changes. */
weir__front_entry *weir__front_find(weir__front *f, uint64_t hash, int kind, const char *auth,
                                    size_t auth_len, const char *body, size_t body_len);
void weir__front_remove(weir__front *f, weir__front_entry *e);
/* Gives e a rendered body (taken: render, id_off, created_off, all malloc'd) and charges its
 * bytes to the table. */
void weir__front_set_render(weir__front *f, weir__front_entry *e, char *render, size_t len,
                            uint32_t *id_off, uint32_t *created_off, int n, size_t id_len);
/* Adds (or replaces) an entry, copying everything; the oldest entries make room. 0, or -1
 * when it is too large or memory ran out (nothing changed then, except what made room). */
int weir__front_put(weir__front *f, uint64_t hash, int kind, const char *auth, size_t auth_len,
                    const char *body, size_t body_len, const char *key,
                    const weir__front_desc *d, const char *rec, size_t rec_len,
                    uint64_t fresh_until_ns);

typedef struct api_choice {
  weir__engine_user u; /* first: the engine callback's user pointer */
  weir__api_job *job;
  int index;           /* OpenAI's choice index: prompt_index * n + j */
  int prompt_index;
  uint64_t engine_id;
  int submitted, finished;
  weir_finish_reason finish;
  int status;
  char *error;
  weir_buf text;       /* non-streaming: the whole completion */
  cJSON *lp_tokens;     /* non-streaming logprobs, built as events arrive */
  cJSON *lp_values, *lp_top, *lp_offsets;
  size_t lp_offset;     /* bytes of token text so far, for text_offset */
  int32_t prompt_tokens, cached_tokens, completion_tokens, num_preemptions;
  uint64_t first_ns, last_ns;
  double *itl_ms;
  int num_itl, cap_itl;
  int sent_first;       /* streaming: the first chunk (role / echo) is out */
  size_t content_sent;  /* streaming with tools: bytes of `text` already sent as content */
  int prompt_lp_done;   /* echo with logprobs: the prompt's entries are out / recorded */
  weir_buf rec;         /* response cache: the engine events so far, recorded */
  uint32_t rec_events;
  char *stop_word;      /* the stop string that ended it (owned), NULL for none */
} api_choice;

struct weir__api_job {
  weir__http_server *s;
  weir__http_req *r;    /* NULL once answered or once the client is gone */
  weir__api_job *prev, *next;
  int chat;
  int stream, include_usage;
  int logprobs;         /* completions: -1 or 0..20; chat: -1 or top_logprobs */
  int echo;
  char id[48];
  int64_t created;
  int num_prompts, n;
  int num_choices, num_finished;
  api_choice *choices;
  char **echo_text;     /* [num_prompts] with echo */
  size_t *echo_len;     /* their lengths (a detokenized prompt may hold NUL) */
  int32_t *first_token; /* [num_prompts] with echo and logprobs: each prompt's first token,
                           listed with a null logprob */
  size_t **prompt_offsets; /* [num_prompts][prompt length] with echo and logprobs: where each
                              prompt token's text begins in the echo */
  uint64_t arrival_ns;
  int client_gone;
  int paused;           /* its connection is backed up: generation paused */
  int responses;        /* /v1/responses: rendered by api_responses.c */
  cJSON *resp_echo;     /* responses: the request's fields a Response echoes (owned) */
  int resp_seq;         /* responses streaming: the next event's sequence_number */
  char resp_msg_id[48]; /* responses streaming: the message item, once opened */
  weir_tool_mode tool_mode; /* chat with tools: how replies are read for calls */
  char *tool_named;     /* WEIR_TOOLS_NAMED: the function (owned) */
  int parallel_tool_calls;
  api_cache_ctx cache;  /* the response cache's decision (status NULL: no cache) */
  /* The front index: a request that may fill an entry keeps its bytes (owned) until its
   * answer is known. */
  int front_ok, front_kind;
  uint64_t front_hash;
  weir_buf front_body;
  char *front_auth;
  /* Joining identical requests in flight (docs/response-cache.md): a leader is a miss whose
   * answer will be stored, listed in the server's leaders; a follower is a later miss with
   * the same key, waiting (its parsed request kept) for the leader's answer. */
  int leading;
  weir__api_job *lead_prev, *lead_next; /* leader: in s->leaders */
  weir__api_job *followers;             /* leader: jobs waiting for its answer */
  weir__api_job *follow_next;           /* follower: the next in its leader's list */
  weir__api_job *leader;                /* follower: the job it waits for */
  struct api_gen *join_a;               /* follower: its parsed request (owned) */
  cJSON *join_echo;                     /* follower: its /v1/responses echo (owned) */
  int join_chat;
  int joined;                           /* answered with a leader's answer */
  int llama;            /* llama-server's POST /completion: rendered by api_llama.c */
  cJSON *llama_settings; /* its generation_settings (owned) */
};

typedef struct api_error {
  int status;
  const char *type;
  const char *code;
  char param[MAX_PATH];
  char message[512];
} api_error;


/* Fills e (type from the status: 401 authentication, 429 rate limit, >= 500 server, else
 * invalid request) and returns -1. param and code may be NULL. */
int weir__api_fail(api_error *e, int status, const char *param, const char *code,
                   const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* ---- api_params.c ---- */

typedef struct params {
  const cJSON *prompt, *messages;
  const char *model;
  int max_tokens;          /* 0: not given */
  double temperature, top_p, min_p, presence, frequency, repetition;
  int top_k, n, best_of;
  const char *stop[MAX_STOP];
  int num_stop;
  int32_t stop_ids[WEIR_MAX_STOP_TOKEN_IDS];
  int num_stop_ids;
  int32_t bias_tokens[WEIR_MAX_LOGIT_BIAS]; /* logit_bias, in the request's key order */
  float bias_values[WEIR_MAX_LOGIT_BIAS];
  int num_bias;
  int has_seed;
  uint64_t seed;
  int logprobs;            /* -1 unless asked */
  int chat_logprobs, top_logprobs;
  int echo, ignore_eos, min_tokens, stream, include_usage, has_stream_options, priority;
  int no_speculation; /* "speculative": false */
  /* Tool calling (chat): as given; checked by weir__api_tools_check. */
  const cJSON *tools, *tool_choice;
  int parallel_tool_calls, has_parallel_tool_calls;
  /* Structured output (docs/structured-output.md): at most one of these is given. */
  const cJSON *response_format, *guided_json, *guided_regex, *guided_choice, *guided_grammar;
  /* Response cache (docs/response-cache.md): `user` scopes entries; `cache.mode` is -1 when
   * not given, else 0 off, 1 exact, 2 semantic; `cache.ttl` 0 when not given. */
  const char *user;
  int cache_mode;
  int64_t cache_ttl_s;
  /* vLLM's structured_outputs object: one of json, regex, choice, grammar, json_object. */
  const cJSON *structured_outputs;
  /* vLLM's chat rendering parameters (chat only). */
  const cJSON *chat_template_kwargs; /* an object: extra template variables */
  int add_generation_prompt;         /* default 1 */
  int continue_final_message;        /* the reply continues the last message */
  /* vLLM's output parameters. */
  int keep_special;                  /* skip_special_tokens: false */
  int include_stop_str;              /* include_stop_str_in_output: true */
} params;

typedef struct prompt_list {
  int32_t **ids;
  int32_t *lens;
  int32_t *max_tokens; /* weir__api_parse_generation: each prompt's output budget */
  int count;
} prompt_list;

/* What a chat request's tools ask for (api_tools.c). Borrows from the request document. */
typedef struct api_tools {
  weir_tool_mode mode;
  const char *named;  /* WEIR_TOOLS_NAMED: tool_choice's function */
  int parallel;       /* parallel_tool_calls (default true) */
  const cJSON *tools; /* the request's tools, NULL when it gives none */
} api_tools;

/* A generation request (completions or chat) parsed and checked against the model and the
 * server's limits. Owns the JSON document that p's pointers point into. */
typedef struct api_gen api_gen;
struct api_gen {
  cJSON *root;
  params p;
  prompt_list pl;
  /* The engine request every choice shares; prompt, num_prompt, max_tokens and seed are set
   * per choice (weir__api_gen_choice). Its pointers point into p. */
  weir_gen_request g;
  /* Structured output: what the request asks for (spec.kind 0: nothing), the text printed
   * for it (owned), the parameter that gave it; then, after weir__api_gen_compile, the
   * constraint (g.constraint borrows it) or the compile error. */
  api_tools tools;
  weir_constraint_spec spec;
  char *spec_text;
  const char *spec_param;
  weir_constraint *constraint;
  int compile_rc;
  char compile_why[512];
  /* Made from a body of WEIR__HEAVY_BYTES or more: freed on a pool thread, not the loop. */
  int heavy;
};
/* A generation request from its parsed body, which `out` takes over (freed with it, or here
 * on failure): 0, or -1 with e filled (nothing held). On success the caller frees with
 * weir__api_gen_free. Thread-safe: reads only the server's fixed state (config, model info,
 * service handle); runs on the prep pool. */
int weir__api_parse_generation_root(weir__http_server *s, cJSON *root, int chat, api_gen *out,
                                    api_error *e);
/* Compiles a's constraint for the model, or finds it in the cache. Thread-safe (runs on the
 * compile pool's threads); touches only a. */
void weir__api_gen_compile(const weir_service *svc, api_gen *a);
/* After weir__api_gen_compile: 0, or -1 with e holding the 400 (or 500) to answer. */
int weir__api_gen_compiled(const api_gen *a, api_error *e);
/* Points a->g at choice j of prompt pi. */
void weir__api_gen_choice(api_gen *a, int pi, int j);
void weir__api_gen_free(api_gen *a);

/* Type and range checks of one parameter: 0, or -1 with e naming it. */
int weir__api_want_bool(api_error *e, const cJSON *v, const char *name, int *out);
/* The 400 for a parameter weir does not know or does not implement. */
int weir__api_unsupported(api_error *e, const char *name);
void weir__api_prompts_free(prompt_list *pl);
/* A request body (taken from its request) as a JSON object: invalid UTF-8 repaired in place,
 * no duplicate key, no NUL in a string; or NULL with e filled. The caller deletes it.
 * Thread-safe. */
cJSON *weir__api_parse_body(weir_buf *body, api_error *e);
/* A JSON array of token ids checked against the vocabulary, into a malloc'd array. */
int weir__api_ids_from_array(weir__http_server *s, const cJSON *arr, const char *param,
    prompt_list *pl, api_error *e);

/* ---- api_embeddings.c ---- */

/* A /v1/embeddings body (root, deleted here) into the 200's JSON (*reply), or -1 with e
 * filled. Blocks while the engine computes the vectors: prep-pool threads only. */
int weir__api_embeddings_body(weir__http_server *s, cJSON *root, cJSON **reply, api_error *e);

/* ---- api_tools.c ---- */

/* tools, tool_choice and parallel_tool_calls of p, checked into t: 0, or -1 with e filled. */
int weir__api_tools_check(const params *p, api_tools *t, api_error *e);
/* The JSON Schema that forces a call (t->mode REQUIRED or NAMED), printed; malloc'd, NULL
 * when out of memory. */
char *weir__api_tools_schema(const api_tools *t);
/* messages[i] as the chat template receives it: role (normalized), content (the joined text,
 * "" for an assistant turn that only calls tools), name, tool_call_id and tool_calls
 * (their arguments parsed into objects). A new object, or NULL with e filled. */
cJSON *weir__api_tools_message(const cJSON *m, int i, const char *role, const char *content,
                               api_error *e);

/* ---- api_responses.c ---- */

/* A /v1/responses body as the chat body it means (a new document, NULL with e filled), and
 * in *echo (new, owned by the caller) the fields a Response object repeats back. */
cJSON *weir__api_responses_to_chat(const cJSON *body, cJSON **echo, api_error *e);
/* The whole Response of a finished job; a stream's first events, its text as it comes (with
 * the chat path's hold-back when tools may be called), and its end (items done, then
 * response.completed, .incomplete or .failed). */
void weir__api_resp_respond_full(weir__api_job *job);
void weir__api_resp_stream_start(weir__api_job *job);
void weir__api_resp_stream_event(weir__api_job *job, api_choice *ch, const weir_gen_event *ev);
void weir__api_resp_stream_finish(weir__api_job *job);

/* ---- api_llama.c ---- */

/* A llama-server /completion body as the /v1/completions body it means (a new document, NULL
 * with e filled); *settings (new, owned by the caller): the generation_settings its
 * responses report; *n_predict: the output cap, -1 for "until the context is full".
 * Thread-safe. */
cJSON *weir__api_llama_to_completions(const cJSON *body, cJSON **settings, int64_t *n_predict,
                                      api_error *e);
/* A streamed /completion: one `data: {"content": ..., "stop": false}` event per piece of
 * text; the end: the final object (whole, or as the stream's last event). */
void weir__api_llama_stream_event(weir__api_job *job, api_choice *ch, const weir_gen_event *ev);
void weir__api_llama_finish(weir__api_job *job);
/* GET /props. */
void weir__api_llama_props(weir__http_req *r);

/* ---- api_render.c ---- */

/* Whole responses: an OpenAI error object; a JSON document (deleted by the caller). */
void weir__api_respond_error(weir__http_req *r, const api_error *e);
void weir__api_respond_json(weir__http_req *r, int status, cJSON *root);
/* Streams: the last chunks (usage, [DONE]) or an error event; one choice's chunk (text,
 * logprobs, finish reason; `role` for chat's first chunk). */
void weir__api_stream_finish(weir__api_job *job);
void weir__api_stream_choice_chunk(weir__api_job *job, api_choice *ch, const char *text,
    size_t text_len, cJSON *lp, const char *finish, int role);
/* The end of a streamed reply with tools (see stream_with_tools in api.c): the held text as
 * tool_calls deltas or content, then the finish chunk (f: the engine's reason, not an
 * error). */
void weir__api_stream_tool_finish(weir__api_job *job, api_choice *ch, weir_finish_reason f);
/* A finished reply read for calls (tool_calls.h; with tools off, all content); with
 * parallel_tool_calls false only the first call is kept. 0 or WEIR_E_NOMEM. */
int weir__api_read_calls(const weir__api_job *job, const api_choice *ch, weir_tool_output *o);
/* The whole non-streaming response of a finished job. */
void weir__api_respond_full(weir__api_job *job);
/* A JSON string for text that may hold invalid UTF-8 (repaired); NULL on OOM. */
cJSON *weir__api_json_text(const char *s, size_t n);
/* OpenAI's finish_reason, NULL for none. */
const char *weir__api_finish_name(weir_finish_reason f);
/* Logprobs of tokens in the completions shape (appended to its four arrays) and in the chat
 * shape (a new array). */
/* echo with logprobs: the prompt's entries before the output's (api_render.c). */
void weir__api_completion_prompt_lp(weir__http_server *s, int k, int32_t first,
                                    const weir_sample_result *plp, int32_t n,
                                    const size_t *text_offsets, size_t text_len, cJSON *tokens,
                                    cJSON *values, cJSON *top, cJSON *offsets);
void weir__api_completion_lp_append(weir__http_server *s, int k, const weir_sample_result *res,
    cJSON *tokens, cJSON *values, cJSON *top, cJSON *offsets,
    size_t *offset);
cJSON *weir__api_chat_lp_content(weir__http_server *s, int k, const weir_sample_result *res,
    int count);

/* ---- api.c ---- */

/* A fresh response id "<prefix>-<32 hex digits>" (unique, not secret) into out[cap]. */
void weir__api_make_id(char *out, size_t cap, const char *prefix);

/* 1 when `name` is the served model name or one of its aliases. */
int weir__api_serves_model(const weir__http_server *s, const char *name);
/* A request's `model` (any JSON value): 0 when it names the served model or an alias, else
 * fills e with OpenAI's 404 model_not_found and returns -1. */
int weir__api_check_model(const weir__http_server *s, const cJSON *model, api_error *e);

#endif
