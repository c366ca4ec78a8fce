/* The response cache's host side (docs/response-cache.md): which requests it may serve and
 * store, their keys, the recorded answer's format, and the calls into the cache plugin
 * (sdk weir/cache.h). The plugin stores bytes; everything that decides what an answer is
 * lives here.
 *
 * Threads: weir__rcache_open / _close at start-up and shut-down; weir__rcache_lookup,
 * _store and _clear run on the prep pool's threads (a plugin call may block on the network,
 * so never on the loop); the recording helpers run on the loop. */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/api_internal.h"
#include "http/semantic.h"
#include "plugin/loader.h"
#include "util/log.h"
#include "util/sha256.h"
#include "weir/cache.h"
#include "weir/status.h"

struct weir__rcache {
  weir_plugin *plugin;
  const weir_cache_ops *ops;
  int64_t ttl_s;
  int nondeterministic;
  int semantic;
  double max_error, explore;
  weir_metric *lookups, *hit_exact, *hit_semantic, *misses, *bypass, *stores, *backend_errors,
      *bad_entries;
  /* Semantic layer: the pooled calibration (this replica's observations), its lock, the draw
   * for exploring, and its metrics. */
  pthread_mutex_t sem_lock;
  weir__sem_calib calib;
  uint64_t rng;
  weir_metric *sem_similarity, *sem_bound, *sem_serve, *sem_refuse, *sem_explore, *sem_none,
      *sem_right, *sem_wrong, *embed_errors;
  /* The front index (api_front.c; loop only) and whether the backend's calls never block
   * (WEIR_CACHE_NONBLOCKING: a front hit asks it whether the entry is still there). */
  weir__front *front;
  int local;
  weir_metric *front_hits, *joins;
};

static const double k_sim_buckets[] = {0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.925, 0.95, 0.96, 0.97,
                                       0.98, 0.99, 0.995, 0.999, 1.0};
static const double k_bound_buckets[] = {0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5,
                                         1.0};

#define REC_MAGIC "WRC1"

int weir__rcache_open(weir__http_server *s, char *err, size_t errlen) {
  const weir_config *cfg = s->cfg;
  const weir_plugin_sel *sel = &cfg->response_cache;
  int rc = WEIR_OK;
  if ((!sel->name || !*sel->name || !strcmp(sel->name, "off")) && !sel->path) return WEIR_OK;
  weir__rcache *c = calloc(1, sizeof *c);
  if (!c) return WEIR_E_NOMEM;
  c->ttl_s = cfg->response_cache_ttl_s;
  c->nondeterministic = cfg->response_cache_nondeterministic;
  c->semantic = cfg->response_cache_semantic;
  c->max_error = cfg->response_cache_semantic_max_error;
  c->explore = cfg->response_cache_semantic_explore;
  c->rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)c;
  pthread_mutex_init(&c->sem_lock, NULL);
  const struct {
    const char *name, *help, *labels;
    weir_metric_type type;
    weir_metric **out;
    const double *buckets;
    int num_buckets;
  } defs[] = {
      {"response_cache_hits_total", "Requests answered from the response cache, by layer.",
       "layer=\"semantic\"", WEIR_METRIC_COUNTER, &c->hit_semantic, NULL, 0},
      {"response_cache_semantic_similarity",
       "Similarity of a semantic lookup's nearest stored entry.", NULL, WEIR_METRIC_HISTOGRAM,
       &c->sem_similarity, k_sim_buckets, (int)(sizeof k_sim_buckets / sizeof *k_sim_buckets)},
      {"response_cache_semantic_error_bound",
       "The upper bound on the wrong-hit rate each semantic decision compared with the "
       "configured bound.", NULL, WEIR_METRIC_HISTOGRAM, &c->sem_bound, k_bound_buckets,
       (int)(sizeof k_bound_buckets / sizeof *k_bound_buckets)},
      {"response_cache_semantic_decisions_total", "Semantic decisions, by verdict.",
       "verdict=\"serve\"", WEIR_METRIC_COUNTER, &c->sem_serve, NULL, 0},
      {"response_cache_semantic_decisions_total", "Semantic decisions, by verdict.",
       "verdict=\"refuse\"", WEIR_METRIC_COUNTER, &c->sem_refuse, NULL, 0},
      {"response_cache_semantic_decisions_total", "Semantic decisions, by verdict.",
       "verdict=\"explore\"", WEIR_METRIC_COUNTER, &c->sem_explore, NULL, 0},
      {"response_cache_semantic_decisions_total", "Semantic decisions, by verdict.",
       "verdict=\"no_candidate\"", WEIR_METRIC_COUNTER, &c->sem_none, NULL, 0},
      {"response_cache_semantic_observations_total",
       "Labelled semantic pairs: whether the nearest entry's answer was the live answer.",
       "correct=\"true\"", WEIR_METRIC_COUNTER, &c->sem_right, NULL, 0},
      {"response_cache_semantic_observations_total",
       "Labelled semantic pairs: whether the nearest entry's answer was the live answer.",
       "correct=\"false\"", WEIR_METRIC_COUNTER, &c->sem_wrong, NULL, 0},
      {"response_cache_embed_errors_total",
       "Semantic lookups whose embedding failed (answered by the exact layer alone).", NULL,
       WEIR_METRIC_COUNTER, &c->embed_errors, NULL, 0},
      {"response_cache_lookups_total", "Requests looked up in the response cache.", NULL,
       WEIR_METRIC_COUNTER, &c->lookups, NULL, 0},
      {"response_cache_hits_total", "Requests answered from the response cache, by layer.",
       "layer=\"exact\"", WEIR_METRIC_COUNTER, &c->hit_exact, NULL, 0},
      {"response_cache_misses_total", "Lookups that found nothing servable.", NULL,
       WEIR_METRIC_COUNTER, &c->misses, NULL, 0},
      {"response_cache_bypass_total",
       "Requests the cache did not look up (cache.mode off, logprobs or echo, not "
       "deterministic, Cache-Control).", NULL, WEIR_METRIC_COUNTER, &c->bypass, NULL, 0},
      {"response_cache_stores_total", "Answers written to the response cache.", NULL,
       WEIR_METRIC_COUNTER, &c->stores, NULL, 0},
      {"response_cache_backend_errors_total",
       "Cache calls that failed (backend down, timeout): the request went on without it.",
       NULL, WEIR_METRIC_COUNTER, &c->backend_errors, NULL, 0},
      {"response_cache_front_hits_total",
       "Exact hits answered from the front index (a byte-identical repeat: no parse, template "
       "or tokenizer).", NULL, WEIR_METRIC_COUNTER, &c->front_hits, NULL, 0},
      {"response_cache_joins_total",
       "Requests that joined an identical request in flight and replayed its answer.", NULL,
       WEIR_METRIC_COUNTER, &c->joins, NULL, 0},
      {"response_cache_bad_entries_total",
       "Entries found that did not parse or did not fit the request (served as a miss).",
       NULL, WEIR_METRIC_COUNTER, &c->bad_entries, NULL, 0},
  };
  for (size_t i = 0; i < sizeof defs / sizeof defs[0] && rc == WEIR_OK; i++)
    rc = weir_metrics_register(s->metrics, defs[i].name, defs[i].help, defs[i].type,
                               defs[i].buckets, defs[i].num_buckets, defs[i].labels,
                               defs[i].out);
  if (rc != WEIR_OK) {
    snprintf(err, errlen, "cannot register the response cache's metrics");
    goto free_c;
  }
  weir_plugin_dirs dirs = {0};
  if ((rc = weir_plugin_dirs_get(cfg, &dirs)) != WEIR_OK) {
    snprintf(err, errlen, "out of memory");
    goto free_c;
  }
  weir_plugin_request req = {.kind = WEIR_PLUGIN_CACHE,
                             .name = sel->name,
                             .path = sel->path,
                             .dirs = &dirs,
                             .table = sel->table,
                             .section = "cache",
                             .device_name = "cpu",
                             .metrics = s->metrics};
  rc = weir_plugin_load(&req, &c->plugin, err, errlen);
  weir_plugin_dirs_free(&dirs);
  if (rc != WEIR_OK) goto free_c;
  c->ops = c->plugin->ops;
  c->local = c->ops->struct_size >= offsetof(weir_cache_ops, flags) + sizeof c->ops->flags &&
             (c->ops->flags & WEIR_CACHE_NONBLOCKING);
  if (!(c->front = weir__front_new(WEIR__FRONT_MAX_BYTES, WEIR__FRONT_MAX_ENTRIES))) {
    snprintf(err, errlen, "out of memory");
    rc = WEIR_E_NOMEM;
    weir_plugin_unload(c->plugin);
    goto free_c;
  }
  s->rcache = c;
  weir_log(WEIR_LOG_INFO, "http", "response cache: %s (%s), ttl %llds, %s requests, "
           "semantic layer %s", c->plugin->desc->name, c->plugin->path, (long long)c->ttl_s,
           c->nondeterministic ? "all" : "deterministic", c->semantic ? "on" : "off");
  return WEIR_OK;

free_c:
  pthread_mutex_destroy(&c->sem_lock);
  free(c);
  return rc;
}

void weir__rcache_close(weir__http_server *s) {
  if (!s->rcache) return;
  weir_plugin_unload(s->rcache->plugin);
  weir__front_free(s->rcache->front);
  pthread_mutex_destroy(&s->rcache->sem_lock);
  free(s->rcache);
  s->rcache = NULL;
}

/* A get's sink: copies the value into the weir_buf at arg. */
static void sink_copy(void *arg, const void *data, size_t len) {
  weir_buf_append(arg, data, len);
}

/* ---- keys ------------------------------------------------------------------------------- */

static void h_bytes(weir_sha256 *h, const void *p, size_t n) {
  uint64_t len = n;
  weir_sha256_update(h, &len, sizeof len); /* length-prefixed: no two inputs concatenate alike */
  if (n) weir_sha256_update(h, p, n);
}
static void h_str(weir_sha256 *h, const char *s) { h_bytes(h, s, s ? strlen(s) : 0); }
static void h_i64(weir_sha256 *h, int64_t v) { weir_sha256_update(h, &v, sizeof v); }
static void h_f64(weir_sha256 *h, double v) { weir_sha256_update(h, &v, sizeof v); }
static void h_json(weir_sha256 *h, const cJSON *j) {
  char *t = j ? cJSON_PrintUnformatted(j) : NULL;
  h_str(h, t ? t : "");
  free(t);
}

/* The first n bytes of sha256(tag, text) as hex. */
static void scope_part(const char *tag, const char *text, size_t len, char *out, int hex_len) {
  weir_sha256 h;
  uint8_t d[32];
  char hex[65];
  weir_sha256_init(&h);
  h_str(&h, tag);
  h_bytes(&h, text, len);
  weir_sha256_final(&h, d);
  weir_sha256_hex(d, hex);
  memcpy(out, hex, (size_t)hex_len);
  out[hex_len] = '\0';
}

/* The API key a request presented: the Authorization header's bearer token ("" for none).
 * Entries are scoped by it even when the server checks no key, so that clients that send
 * different keys never share answers. */
static void bearer(const char *auth, const char **tok, size_t *len) {
  *tok = "";
  *len = 0;
  if (!auth || strncasecmp(auth, "Bearer ", 7)) return;
  auth += 7;
  while (*auth == ' ') auth++;
  size_t n = strlen(auth);
  while (n && (auth[n - 1] == ' ' || auth[n - 1] == '\t')) n--;
  *tok = auth;
  *len = n;
}

int weir__rcache_scope_prefix(const char *auth, const char *user, int with_user, char *out,
                              size_t cap) {
  const char *tok;
  size_t tlen;
  char k[33], u[33];
  bearer(auth, &tok, &tlen);
  scope_part("weir-scope-key", tok, tlen, k, 32);
  if (!with_user) return snprintf(out, cap, "weir:v1:%s:", k) < (int)cap ? 0 : -1;
  scope_part("weir-scope-user", user ? user : "", user ? strlen(user) : 0, u, 32);
  return snprintf(out, cap, "weir:v1:%s:%s:", k, u) < (int)cap ? 0 : -1;
}

/* Everything that changes the answer (docs/response-cache.md, "The key"): the model, every
 * prompt's tokens after the chat template and its output budget, n, every sampling parameter,
 * the seed, logit_bias, stops, tools and the structured-output constraint. */
/* The semantic layer's variant (blanked non-NULL): the same parameters, but instead of the
 * prompt tokens the request's messages (or prompt) with the user turn it embeds blanked, so
 * that requests differing only in that turn share one bucket. */
static void content_hash(const weir__http_server *s, const api_gen *a, const cJSON *blanked,
                         char out[65]) {
  const params *p = &a->p;
  weir_sha256 h;
  uint8_t d[32];
  weir_sha256_init(&h);
  h_str(&h, blanked ? "weir-semantic-v1" : "weir-answer-v1");
  h_str(&h, s->model_name);
  h_i64(&h, s->info.vocab_size);
  h_i64(&h, s->info.context_length);
  h_str(&h, s->info.chat_template_name);
  h_i64(&h, a->pl.count);
  if (blanked) h_json(&h, blanked);
  for (int i = 0; i < a->pl.count; i++) {
    if (!blanked) h_bytes(&h, a->pl.ids[i], sizeof(int32_t) * (size_t)a->pl.lens[i]);
    h_i64(&h, a->pl.max_tokens[i]);
  }
  h_i64(&h, p->n);
  const weir_sampling_params *sp = &a->g.sampling;
  h_f64(&h, sp->temperature);
  h_i64(&h, sp->top_k);
  h_f64(&h, sp->top_p);
  h_f64(&h, sp->min_p);
  h_f64(&h, sp->repetition_penalty);
  h_f64(&h, sp->presence_penalty);
  h_f64(&h, sp->frequency_penalty);
  h_i64(&h, a->g.has_seed);
  h_i64(&h, a->g.has_seed ? (int64_t)p->seed : 0);
  h_i64(&h, a->g.min_tokens);
  h_i64(&h, a->g.ignore_eos);
  h_i64(&h, sp->num_logit_bias);
  for (int32_t i = 0; i < sp->num_logit_bias; i++) {
    h_i64(&h, sp->logit_bias_tokens[i]);
    h_f64(&h, sp->logit_bias_values[i]);
  }
  h_i64(&h, a->g.num_stop);
  for (int32_t i = 0; i < a->g.num_stop; i++) h_str(&h, a->g.stop[i]);
  h_i64(&h, a->g.num_stop_token_ids);
  for (int32_t i = 0; i < a->g.num_stop_token_ids; i++) h_i64(&h, a->g.stop_token_ids[i]);
  /* Tools: what the template saw is in the tokens already; the mode decides how the reply
   * is read into calls. */
  h_i64(&h, a->tools.mode);
  h_str(&h, a->tools.named);
  h_i64(&h, a->tools.parallel);
  h_json(&h, a->tools.tools);
  h_i64(&h, a->spec.kind);
  h_bytes(&h, a->spec_text, a->spec_text ? strlen(a->spec_text) : 0);
  /* The constraint's own text when it is borrowed from the request (a regex, a grammar),
   * its whitespace rule (structured_outputs.disable_any_whitespace), and vLLM's output
   * parameters (skip_special_tokens, include_stop_str_in_output) change the answer too. */
  h_bytes(&h, a->spec.text, a->spec.text ? a->spec.len : 0);
  h_i64(&h, a->spec.whitespace);
  h_i64(&h, a->g.keep_special);
  h_i64(&h, a->g.include_stop_str);
  h_json(&h, p->response_format);
  weir_sha256_final(&h, d);
  weir_sha256_hex(d, out);
}

/* ---- the semantic layer (semantic.h decides) ---------------------------------------------- */

/* The user turn a semantic lookup embeds (malloc'd): the last user message's text (its text
 * parts joined by newlines), or a completions request's one prompt string; and in *blanked a
 * copy of the messages (or prompt) with that turn emptied, for the bucket's key. NULL when
 * there is none. */
static char *user_turn(const params *p, cJSON **blanked) {
  *blanked = NULL;
  if (!p->messages) {
    if (!cJSON_IsString(p->prompt)) return NULL;
    *blanked = cJSON_CreateString("");
    return *blanked ? strdup(p->prompt->valuestring) : NULL;
  }
  const cJSON *last = NULL;
  int idx = -1, i = 0;
  for (const cJSON *m = p->messages->child; m; m = m->next, i++) {
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
    if (cJSON_IsString(role) && !strcmp(role->valuestring, "user")) {
      last = m;
      idx = i;
    }
  }
  const cJSON *content = last ? cJSON_GetObjectItemCaseSensitive(last, "content") : NULL;
  weir_buf t = {0};
  if (cJSON_IsString(content)) {
    weir_buf_append(&t, content->valuestring, strlen(content->valuestring));
  } else if (cJSON_IsArray(content)) {
    for (const cJSON *part = content->child; part; part = part->next) {
      const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
      if (!cJSON_IsString(text)) continue;
      if (t.len) weir_buf_append(&t, "\n", 1);
      weir_buf_append(&t, text->valuestring, strlen(text->valuestring));
    }
  }
  if (!t.p || t.oom || !t.len) goto free_t;
  if (!(*blanked = cJSON_Duplicate(p->messages, 1))) goto free_t;
  cJSON *m = cJSON_GetArrayItem(*blanked, idx);
  if (!m || !cJSON_ReplaceItemInObjectCaseSensitive(m, "content", cJSON_CreateString(""))) {
    cJSON_Delete(*blanked);
    *blanked = NULL;
    goto free_t;
  }
  return t.p;
free_t:
  weir_buf_free(&t);
  return NULL;
}

static double next_unit(weir__rcache *rc) {
  uint64_t z = (rc->rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (double)(z >> 11) / 9007199254740992.0;
}

/* After an exact miss of a request that opted in: embeds its user turn, finds the nearest
 * entry of its bucket and asks semantic.h whether it may be served. A hit fills c->hit; a
 * refusal or an exploration leaves the candidate in c for the store to label. Anything that
 * fails (the embedding, the backend) leaves the exact layer's miss. */
static void semantic_lookup(weir__http_server *s, const api_gen *a, api_cache_ctx *c) {
  weir__rcache *rc = s->rcache;
  cJSON *blanked = NULL;
  char *text = user_turn(&a->p, &blanked);
  weir__sem_bucket b = {0};
  weir_buf v = {0};
  const int32_t dim = s->svc->embed.dim;
  if (!text || dim > WEIR__SEM_MAX_DIM) goto free_all;
  float *vec = malloc(sizeof(float) * (size_t)dim);
  size_t got = 0;
  char err[256] = "";
  if (!vec || weir_service_embed(s->svc, text, strlen(text), vec, (size_t)dim, &got, err,
                                 sizeof err) != WEIR_OK || got != (size_t)dim) {
    weir_metric_record(rc->embed_errors, 1);
    weir_log(WEIR_LOG_DEBUG, "http", "response cache: embedding failed: %s", err);
    free(vec);
    goto free_all;
  }
  c->sem_vec = vec;
  c->sem_dim = dim;
  /* The bucket: this scope (key and user), "sem:", the parameters' hash. */
  char hash[65];
  const char *colon = strrchr(c->key, ':');
  size_t plen = colon ? (size_t)(colon - c->key) + 1 : 0;
  content_hash(s, a, blanked, hash);
  snprintf(c->sem_key, sizeof c->sem_key, "%.*ssem:%s", (int)plen, c->key, hash);
  int r = rc->ops->get(rc->plugin->self, c->sem_key, strlen(c->sem_key), sink_copy, &v);
  if (r != WEIR_OK && r != WEIR_E_NOTFOUND) {
    weir_metric_record(rc->backend_errors, 1);
    goto free_all;
  }
  if (r == WEIR_OK && (v.oom || weir__sem_bucket_parse(v.p, v.len, dim, &b))) {
    weir_metric_record(rc->bad_entries, 1);
    goto free_all;
  }
  float sim = 0;
  int idx = weir__sem_nearest(&b, vec, &sim);
  if (idx < 0) {
    weir_metric_record(rc->sem_none, 1);
    goto free_all;
  }
  weir_metric_record(rc->sem_similarity, sim);
  double ub = 1;
  pthread_mutex_lock(&rc->sem_lock);
  weir__sem_verdict verdict = weir__sem_decide(&rc->calib, &b.e[idx], sim, rc->max_error,
                                               rc->explore, next_unit(rc), &ub);
  pthread_mutex_unlock(&rc->sem_lock);
  weir_metric_record(rc->sem_bound, ub);
  if (verdict == WEIR__SEM_SERVE) {
    weir_buf ans = {0};
    r = rc->ops->get(rc->plugin->self, b.e[idx].key, strlen(b.e[idx].key), sink_copy, &ans);
    if (r == WEIR_OK && !ans.oom && weir__rcache_check(ans.p, ans.len, c->num_choices) == 0) {
      weir_metric_record(rc->sem_serve, 1);
      weir_metric_record(rc->hit_semantic, 1);
      c->hit = ans.p;
      c->hit_len = ans.len;
      c->status = "hit-semantic";
      c->may_store = 0;
      goto free_all;
    }
    weir_buf_free(&ans); /* its answer is gone (expired, evicted): answered live */
    verdict = WEIR__SEM_REFUSE;
  }
  weir_metric_record(verdict == WEIR__SEM_EXPLORE ? rc->sem_explore : rc->sem_refuse, 1);
  snprintf(c->cand_key, sizeof c->cand_key, "%s", b.e[idx].key);
  c->cand_sim = sim;
free_all:
  weir__sem_bucket_free(&b);
  weir_buf_free(&v);
  cJSON_Delete(blanked);
  free(text);
}

void weir__rcache_lookup(weir__http_server *s, const api_gen *a, const char *auth, int cc,
                         api_cache_ctx *c) {
  weir__rcache *rc = s->rcache;
  memset(c, 0, sizeof *c);
  if (!rc) return;
  const params *p = &a->p;
  c->status = "miss";
  const int deterministic = a->g.sampling.temperature == 0 || a->g.has_seed;
  if (p->cache_mode == 0 || p->logprobs >= 0 || p->echo || a->g.prompt_logprobs ||
      (!deterministic && !rc->nondeterministic)) {
    weir_metric_record(rc->bypass, 1);
    return;
  }
  const int may_serve = !(cc & WEIR__CC_NO_CACHE);
  c->may_store = !(cc & WEIR__CC_NO_STORE);
  c->ttl_ms = (p->cache_ttl_s > 0 ? p->cache_ttl_s : rc->ttl_s) * 1000;
  c->num_choices = a->pl.count * p->n;
  char hash[65];
  if (weir__rcache_scope_prefix(auth, p->user, 1, c->key, sizeof c->key)) {
    c->may_store = 0;
    return;
  }
  content_hash(s, a, NULL, hash);
  strncat(c->key, hash, sizeof c->key - strlen(c->key) - 1);
  if (!may_serve) {
    weir_metric_record(rc->bypass, 1);
    return;
  }
  weir_metric_record(rc->lookups, 1);
  c->looked_up = 1;
  weir_buf v = {0};
  int r = rc->ops->get(rc->plugin->self, c->key, strlen(c->key), sink_copy, &v);
  if (r == WEIR_OK && !v.oom && weir__rcache_check(v.p, v.len, c->num_choices) == 0) {
    c->hit = v.p;
    c->hit_len = v.len;
    c->status = "hit-exact";
    c->may_store = 0;
    weir_metric_record(rc->hit_exact, 1);
    return;
  }
  if (r == WEIR_OK) {
    weir_metric_record(rc->bad_entries, 1);
    weir_log(WEIR_LOG_WARN, "http", "response cache: an entry that does not parse was found "
             "for a request; answering it live");
  } else if (r != WEIR_E_NOTFOUND) {
    weir_metric_record(rc->backend_errors, 1);
    weir_log(WEIR_LOG_DEBUG, "http", "response cache lookup failed: %s", weir_strerror(r));
  }
  weir_buf_free(&v);
  if (rc->semantic && p->cache_mode == 2 && s->svc->embed.dim > 0)
    semantic_lookup(s, a, c);
  if (!c->hit) weir_metric_record(rc->misses, 1);
}

void weir__rcache_ctx_free(api_cache_ctx *c) {
  free(c->hit);
  c->hit = NULL;
  c->hit_len = 0;
  free(c->sem_vec);
  c->sem_vec = NULL;
}

/* ---- the recorded answer ------------------------------------------------------------------
 * "WRC1", u32 choices; per choice u32 events; per event u8 finish, i32 num_tokens,
 * prompt_tokens, cached_tokens, completion_tokens, u32 text_len, the text. Little-endian.
 * Every count is checked against what is left before it is used: an entry comes from a
 * shared store and is read as untrusted input. */

static void put_u32(weir_buf *b, uint32_t v) {
  uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
  weir_buf_append(b, (const char *)x, 4);
}
static int get_u32(const uint8_t **p, const uint8_t *end, uint32_t *v) {
  if (end - *p < 4) return -1;
  *v = (uint32_t)(*p)[0] | (uint32_t)(*p)[1] << 8 | (uint32_t)(*p)[2] << 16 |
       (uint32_t)(*p)[3] << 24;
  *p += 4;
  return 0;
}

void weir__rcache_record(weir_buf *rec, uint32_t *num_events, const weir_gen_event *ev) {
  uint8_t f = (uint8_t)ev->finish;
  weir_buf_append(rec, (const char *)&f, 1);
  put_u32(rec, (uint32_t)ev->num_tokens);
  put_u32(rec, (uint32_t)ev->prompt_tokens);
  put_u32(rec, (uint32_t)ev->cached_tokens);
  put_u32(rec, (uint32_t)ev->completion_tokens);
  put_u32(rec, (uint32_t)ev->text_len);
  weir_buf_append(rec, ev->text ? ev->text : "", ev->text_len);
  (*num_events)++;
}

int weir__rcache_next_event(const uint8_t **p, const uint8_t *end, weir_gen_event *ev) {
  uint32_t v[5];
  memset(ev, 0, sizeof *ev);
  if (end - *p < 1) return -1;
  ev->finish = (weir_finish_reason) * (*p)++;
  for (int i = 0; i < 5; i++)
    if (get_u32(p, end, &v[i])) return -1;
  if (v[0] > (1u << 30) || v[4] > (size_t)(end - *p)) return -1;
  if (ev->finish != WEIR_FINISH_NONE && ev->finish != WEIR_FINISH_STOP &&
      ev->finish != WEIR_FINISH_LENGTH)
    return -1;
  ev->num_tokens = (int32_t)v[0];
  ev->prompt_tokens = (int32_t)v[1];
  ev->cached_tokens = (int32_t)v[2];
  ev->completion_tokens = (int32_t)v[3];
  ev->text_len = v[4];
  ev->text = (const char *)*p;
  *p += v[4];
  return 0;
}

int weir__rcache_choice(const uint8_t **p, const uint8_t *end, uint32_t *num_events) {
  return get_u32(p, end, num_events);
}

int weir__rcache_check(const char *data, size_t len, int num_choices) {
  const uint8_t *p = (const uint8_t *)data, *end = p + len;
  uint32_t n;
  if (len < 8 || memcmp(p, REC_MAGIC, 4)) return -1;
  p += 4;
  if (get_u32(&p, end, &n) || (int)n != num_choices) return -1;
  for (uint32_t c = 0; c < n; c++) {
    uint32_t ne;
    if (weir__rcache_choice(&p, end, &ne) || ne == 0) return -1;
    weir_gen_event ev;
    for (uint32_t e = 0; e < ne; e++) {
      if (weir__rcache_next_event(&p, end, &ev)) return -1;
      /* Exactly one final event, the last. */
      if ((ev.finish != WEIR_FINISH_NONE) != (e == ne - 1)) return -1;
    }
  }
  return p == end ? 0 : -1;
}

const uint8_t *weir__rcache_choices(const char *data) { return (const uint8_t *)data + 8; }

/* ---- storing and clearing (prep pool) ---------------------------------------------------- */

/* 1 when two checked recordings of num_choices choices say the same: per choice the same
 * text and the same finish reason (event boundaries may differ: speculation groups tokens). */
static int same_answer(const char *x, size_t xl, const char *y, size_t yl, int num_choices) {
  const uint8_t *p = weir__rcache_choices(x), *pe = (const uint8_t *)x + xl;
  const uint8_t *q = weir__rcache_choices(y), *qe = (const uint8_t *)y + yl;
  weir_buf a = {0}, b = {0};
  int same = 1;
  for (int c = 0; c < num_choices && same; c++) {
    uint32_t na = 0, nb = 0;
    weir_gen_event ev;
    weir_finish_reason fa = WEIR_FINISH_NONE, fb = WEIR_FINISH_NONE;
    a.len = b.len = 0;
    weir__rcache_choice(&p, pe, &na);
    weir__rcache_choice(&q, qe, &nb);
    for (uint32_t k = 0; k < na && !weir__rcache_next_event(&p, pe, &ev); k++) {
      weir_buf_append(&a, ev.text, ev.text_len);
      fa = ev.finish;
    }
    for (uint32_t k = 0; k < nb && !weir__rcache_next_event(&q, qe, &ev); k++) {
      weir_buf_append(&b, ev.text, ev.text_len);
      fb = ev.finish;
    }
    same = !a.oom && !b.oom && fa == fb && a.len == b.len && (!a.len || !memcmp(a.p, b.p, a.len));
  }
  weir_buf_free(&a);
  weir_buf_free(&b);
  return same;
}

typedef struct store_work {
  weir__rcache *rc;
  int64_t ttl_ms;
  int num_choices;
  size_t len;
  char key[WEIR__RCACHE_KEY_CAP];
  /* The semantic layer's part (vec NULL: none): see api_cache_ctx. */
  char sem_key[WEIR__RCACHE_KEY_CAP], cand_key[WEIR__RCACHE_KEY_CAP];
  float cand_sim;
  int32_t dim;
  float *vec;
  char value[];
} store_work;

/* What the semantic layer learns from a live answer: whether the candidate it was not served
 * from had the same answer (an observation for that entry and for the pooled calibration),
 * and, when it did not (or there was none), the new answer as a candidate of its own. A
 * read-modify-write of the bucket: two replicas updating one bucket at once may lose one
 * update (an observation or a candidate), never corrupt it. */
static void semantic_learn(store_work *w) {
  weir__rcache *rc = w->rc;
  weir_buf v = {0}, cand = {0}, out = {0};
  weir__sem_bucket b = {0};
  int r = rc->ops->get(rc->plugin->self, w->sem_key, strlen(w->sem_key), sink_copy, &v);
  if (r != WEIR_OK && r != WEIR_E_NOTFOUND) goto io_error;
  if (v.oom || weir__sem_bucket_parse(r == WEIR_OK ? v.p : NULL, r == WEIR_OK ? v.len : 0,
                                      w->dim, &b)) {
    weir_metric_record(rc->bad_entries, 1);
    b.dim = w->dim; /* start the bucket afresh */
  }
  int correct = -1;
  if (w->cand_key[0]) {
    r = rc->ops->get(rc->plugin->self, w->cand_key, strlen(w->cand_key), sink_copy, &cand);
    if (r == WEIR_OK && !cand.oom && !weir__rcache_check(cand.p, cand.len, w->num_choices))
      correct = same_answer(cand.p, cand.len, w->value, w->len, w->num_choices);
    else if (r != WEIR_OK && r != WEIR_E_NOTFOUND)
      goto io_error;
  }
  if (correct >= 0) {
    weir__sem_entry *e = NULL;
    for (int i = 0; i < b.num && !e; i++)
      if (!strcmp(b.e[i].key, w->cand_key)) e = &b.e[i];
    pthread_mutex_lock(&rc->sem_lock);
    weir__sem_observe(&rc->calib, e, w->cand_sim, correct);
    pthread_mutex_unlock(&rc->sem_lock);
    weir_metric_record(correct ? rc->sem_right : rc->sem_wrong, 1);
  }
  if (correct != 1 && weir__sem_bucket_add(&b, w->key, w->vec)) goto free_all;
  weir__sem_bucket_write(&b, &out);
  if (out.oom) goto free_all;
  r = rc->ops->put(rc->plugin->self, w->sem_key, strlen(w->sem_key), out.p, out.len,
                   w->ttl_ms);
  if (r == WEIR_E_IO) goto io_error;
  goto free_all;
io_error:
  weir_metric_record(rc->backend_errors, 1);
free_all:
  weir__sem_bucket_free(&b);
  weir_buf_free(&v);
  weir_buf_free(&cand);
  weir_buf_free(&out);
}

static void store_run(void *arg, int cancelled) {
  store_work *w = arg;
  if (!cancelled) {
    int r = w->rc->ops->put(w->rc->plugin->self, w->key, strlen(w->key), w->value, w->len,
                            w->ttl_ms);
    if (r == WEIR_OK) weir_metric_record(w->rc->stores, 1);
    else if (r == WEIR_E_IO) weir_metric_record(w->rc->backend_errors, 1);
    else weir_log(WEIR_LOG_DEBUG, "http", "response cache: not stored: %s", weir_strerror(r));
    if (r == WEIR_OK && w->vec) semantic_learn(w);
  }
  free(w->vec);
  free(w);
}

int weir__rcache_build(weir_buf *v, const weir_buf *const *recs, const uint32_t *num_events,
                       int num_choices) {
  weir_buf_append(v, REC_MAGIC, 4);
  put_u32(v, (uint32_t)num_choices);
  for (int i = 0; i < num_choices; i++) {
    put_u32(v, num_events[i]);
    weir_buf_append(v, recs[i]->p ? recs[i]->p : "", recs[i]->len);
  }
  return v->oom ? -1 : 0;
}

void weir__rcache_store(weir__http_server *s, api_cache_ctx *c, const weir_buf *value,
                        int num_choices) {
  const weir_buf v = *value;
  store_work *w = v.oom ? NULL : malloc(sizeof *w + v.len);
  if (!w) return;
  w->rc = s->rcache;
  w->ttl_ms = c->ttl_ms;
  w->num_choices = num_choices;
  w->len = v.len;
  snprintf(w->key, sizeof w->key, "%s", c->key);
  snprintf(w->sem_key, sizeof w->sem_key, "%s", c->sem_key);
  snprintf(w->cand_key, sizeof w->cand_key, "%s", c->cand_key);
  w->cand_sim = c->cand_sim;
  w->dim = c->sem_dim;
  w->vec = c->sem_vec; /* taken */
  c->sem_vec = NULL;
  memcpy(w->value, v.p, v.len);
  if (weir_workpool_submit(s->prep_pool, 0, store_run, w) != WEIR_OK) {
    free(w->vec);
    free(w);
  }
}

/* ---- the front index and joins (loop) ------------------------------------------------------ */

static void sink_none(void *arg, const void *data, size_t len) {
  (void)arg;
  (void)data;
  (void)len;
}

const weir__front_entry *weir__rcache_front_lookup(weir__http_server *s, int kind,
                                                   const char *auth, size_t auth_len,
                                                   const char *body, size_t body_len,
                                                   uint64_t *hash) {
  weir__rcache *rc = s->rcache;
  *hash = weir__front_hash(kind, auth, auth_len, body, body_len);
  weir__front_entry *e = weir__front_find(rc->front, *hash, kind, auth, auth_len, body,
                                          body_len);
  if (!e) return NULL;
  if (rc->local) {
    /* The backend is in this process and never blocks: ask it whether the answer is still
     * stored (expired, evicted, cleared: then the full path decides again). */
    if (rc->ops->get(rc->plugin->self, e->key, strlen(e->key), sink_none, NULL) != WEIR_OK) {
      weir__front_remove(rc->front, e);
      return NULL;
    }
  } else if (uv_hrtime() >= e->fresh_until_ns) {
    weir__front_remove(rc->front, e);
    return NULL;
  }
  weir_metric_record(rc->lookups, 1);
  weir_metric_record(rc->hit_exact, 1);
  weir_metric_record(rc->front_hits, 1);
  return e;
}

void weir__rcache_front_fill(weir__http_server *s, uint64_t hash, int kind, const char *auth,
                             size_t auth_len, const char *body, size_t body_len,
                             const api_cache_ctx *c, const weir__front_desc *d,
                             const char *rec, size_t rec_len, int from_store) {
  weir__rcache *rc = s->rcache;
  /* A store runs later on a worker thread and may fail (Redis down): only a backend the
   * front index asks at every hit may have its entries made before the store landed. */
  if (from_store && !rc->local) return;
  uint64_t now = uv_hrtime();
  uint64_t fresh = now + WEIR__FRONT_FRESH_NS;
  if (c->ttl_ms > 0 && now + (uint64_t)c->ttl_ms * 1000000ull < fresh)
    fresh = now + (uint64_t)c->ttl_ms * 1000000ull;
  (void)weir__front_put(rc->front, hash, kind, auth, auth_len, body, body_len, c->key, d, rec,
                        rec_len, fresh);
}

void weir__rcache_front_render(weir__http_server *s, weir__front_entry *e, char *render,
                               size_t len, uint32_t *id_off, uint32_t *created_off, int n,
                               size_t id_len) {
  weir__front_set_render(s->rcache->front, e, render, len, id_off, created_off, n, id_len);
}

void weir__rcache_front_clear(weir__http_server *s) {
  if (s->rcache) weir__front_clear(s->rcache->front);
}

void weir__rcache_count_join(weir__http_server *s) {
  weir_metric_record(s->rcache->joins, 1);
}

int weir__rcache_clear(weir__http_server *s, const char *prefix, int64_t *removed) {
  return s->rcache->ops->clear(s->rcache->plugin->self, prefix, strlen(prefix), removed);
}
