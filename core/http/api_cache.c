/* The response cache's host side (docs/response-cache.md): which requests it may serve and
 * store, their keys, the recorded answer's format, and the calls into the cache plugin
 * (sdk weir/cache.h). The plugin stores bytes; everything that decides what an answer is
 * lives here.
 *
 * Threads: weir__rcache_open / _close at start-up and shut-down; weir__rcache_lookup,
 * _store and _clear run on the prep pool's threads (a plugin call may block on the network,
 * so never on the loop); the recording helpers run on the loop. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/api_internal.h"
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
  weir_metric *lookups, *hit_exact, *misses, *bypass, *stores, *backend_errors, *bad_entries;
};

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
  const struct {
    const char *name, *help, *labels;
    weir_metric_type type;
    weir_metric **out;
  } defs[] = {
      {"response_cache_lookups_total", "Requests looked up in the response cache.", NULL,
       WEIR_METRIC_COUNTER, &c->lookups},
      {"response_cache_hits_total", "Requests answered from the response cache, by layer.",
       "layer=\"exact\"", WEIR_METRIC_COUNTER, &c->hit_exact},
      {"response_cache_misses_total", "Lookups that found nothing servable.", NULL,
       WEIR_METRIC_COUNTER, &c->misses},
      {"response_cache_bypass_total",
       "Requests the cache did not look up (cache.mode off, logprobs or echo, not "
       "deterministic, Cache-Control).", NULL, WEIR_METRIC_COUNTER, &c->bypass},
      {"response_cache_stores_total", "Answers written to the response cache.", NULL,
       WEIR_METRIC_COUNTER, &c->stores},
      {"response_cache_backend_errors_total",
       "Cache calls that failed (backend down, timeout): the request went on without it.",
       NULL, WEIR_METRIC_COUNTER, &c->backend_errors},
      {"response_cache_bad_entries_total",
       "Entries found that did not parse or did not fit the request (served as a miss).",
       NULL, WEIR_METRIC_COUNTER, &c->bad_entries},
  };
  for (size_t i = 0; i < sizeof defs / sizeof defs[0] && rc == WEIR_OK; i++)
    rc = weir_metrics_register(s->metrics, defs[i].name, defs[i].help, defs[i].type, NULL, 0,
                               defs[i].labels, defs[i].out);
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
  s->rcache = c;
  weir_log(WEIR_LOG_INFO, "http", "response cache: %s (%s), ttl %llds, %s requests",
           c->plugin->desc->name, c->plugin->path, (long long)c->ttl_s,
           c->nondeterministic ? "all" : "deterministic");
  return WEIR_OK;

free_c:
  free(c);
  return rc;
}

void weir__rcache_close(weir__http_server *s) {
  if (!s->rcache) return;
  weir_plugin_unload(s->rcache->plugin);
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
static void content_hash(const weir__http_server *s, const api_gen *a, char out[65]) {
  const params *p = &a->p;
  weir_sha256 h;
  uint8_t d[32];
  weir_sha256_init(&h);
  h_str(&h, "weir-answer-v1");
  h_str(&h, s->model_name);
  h_i64(&h, s->info.vocab_size);
  h_i64(&h, s->info.context_length);
  h_str(&h, s->info.chat_template_name);
  h_i64(&h, a->pl.count);
  for (int i = 0; i < a->pl.count; i++) {
    h_bytes(&h, a->pl.ids[i], sizeof(int32_t) * (size_t)a->pl.lens[i]);
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
  h_json(&h, p->response_format);
  weir_sha256_final(&h, d);
  weir_sha256_hex(d, out);
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
  content_hash(s, a, hash);
  strncat(c->key, hash, sizeof c->key - strlen(c->key) - 1);
  if (!may_serve) {
    weir_metric_record(rc->bypass, 1);
    return;
  }
  weir_metric_record(rc->lookups, 1);
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
  weir_metric_record(rc->misses, 1);
  weir_buf_free(&v);
}

void weir__rcache_ctx_free(api_cache_ctx *c) {
  free(c->hit);
  c->hit = NULL;
  c->hit_len = 0;
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

typedef struct store_work {
  weir__rcache *rc;
  int64_t ttl_ms;
  size_t len;
  char key[WEIR__RCACHE_KEY_CAP];
  char value[];
} store_work;

static void store_run(void *arg, int cancelled) {
  store_work *w = arg;
  if (!cancelled) {
    int r = w->rc->ops->put(w->rc->plugin->self, w->key, strlen(w->key), w->value, w->len,
                            w->ttl_ms);
    if (r == WEIR_OK) weir_metric_record(w->rc->stores, 1);
    else if (r == WEIR_E_IO) weir_metric_record(w->rc->backend_errors, 1);
    else weir_log(WEIR_LOG_DEBUG, "http", "response cache: not stored: %s", weir_strerror(r));
  }
  free(w);
}

void weir__rcache_store(weir__http_server *s, const char *key, int64_t ttl_ms,
                        const weir_buf *const *recs, const uint32_t *num_events, int num_choices) {
  weir_buf v = {0};
  weir_buf_append(&v, REC_MAGIC, 4);
  put_u32(&v, (uint32_t)num_choices);
  for (int i = 0; i < num_choices; i++) {
    put_u32(&v, num_events[i]);
    weir_buf_append(&v, recs[i]->p ? recs[i]->p : "", recs[i]->len);
  }
  store_work *w = v.oom ? NULL : malloc(sizeof *w + v.len);
  if (!w) goto free_v;
  w->rc = s->rcache;
  w->ttl_ms = ttl_ms;
  w->len = v.len;
  snprintf(w->key, sizeof w->key, "%s", key);
  memcpy(w->value, v.p, v.len);
  if (weir_workpool_submit(s->prep_pool, 0, store_run, w) != WEIR_OK) free(w);
free_v:
  weir_buf_free(&v);
}

int weir__rcache_clear(weir__http_server *s, const char *prefix, int64_t *removed) {
  return s->rcache->ops->clear(s->rcache->plugin->self, prefix, strlen(prefix), removed);
}
