/* The server's life cycle: bind, load the engine on a worker thread while /health answers
 * 503, serve, drain on a signal, shut down in an order where no engine callback can reach a
 * closed handle. */
#include <malloc.h>
#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <string.h>
#include <time.h>

#include "http/http.h"
#include "http/api.h"
#include "util/log.h"
#include "weir/status.h"

/* After the drain deadline has aborted what still ran, the aborted requests get this long to
 * send their last bytes (finish_reason "abort", 503s) before every connection still open is
 * closed at once: a client that never reads cannot hold the exit longer (issue 28). */
#define WEIR__DRAIN_GRACE_MS 1000

/* malloc: arenas (more than the process has threads: the pools' 28, libuv's 4, the engine
 * and its CPU workers), and the size from which a block is mapped on its own. */
#define WEIR__MALLOC_ARENAS 64
#define WEIR__MMAP_BYTES (128 * 1024)

/* The loop-lag probe's period: short enough to see a stall of a few milliseconds, long
 * enough to cost nothing (100 wakes a second). */
#define WEIR__LOOP_LAG_MS 10

/* Records how late this tick came (weir_event_loop_lag_seconds), then arms the next one.
 * Measured with the monotonic clock, not uv_now (the loop's cached time, which a stalled
 * iteration would not have advanced). */
static void on_lag_tick(uv_timer_t *t) {
  weir__http_server *s = t->data;
  uint64_t now = uv_hrtime();
  if (s->lag_due_ns) {
    uint64_t late = now > s->lag_due_ns ? now - s->lag_due_ns : 0;
    weir_metric_record(s->m.loop_lag, (double)late / 1e9);
  }
  s->lag_due_ns = now + (uint64_t)WEIR__LOOP_LAG_MS * 1000000u;
  /* About once a second: the housekeeping (cache expiry, malloc_trim) decides whether it
   * has anything to do. */
  if (++s->lag_ticks % (1000 / WEIR__LOOP_LAG_MS) == 0) weir__api_housekeep(s, now / 1000000000u);
  uv_timer_start(&s->lag_timer, on_lag_tick, WEIR__LOOP_LAG_MS, 0);
}

static void on_work_ready(uv_poll_t *p, int status, int events) {
  (void)status;
  (void)events;
  weir__api_on_work(p->data);
}

static void on_work_poll_closed(uv_handle_t *h) {
  weir__http_server *s = h->data;
  close(s->work_fd);
  s->work_fd = -1;
}

/* Engine events never handled (the loop ended first); their jobs are gone. */
static void free_events(weir__http_server *s) {
  weir__queued_event *qe = atomic_exchange(&s->ev_stack, NULL);
  while (qe) {
    weir__queued_event *n = qe->next;
    free(qe);
    qe = n;
  }
}

/* The engine's and the pools' ways back to the loop: closed once no job is left (so nothing
 * can post any more). */
static void close_wakeups(weir__http_server *s) {
  if (s->work_fd >= 0 && !uv_is_closing((uv_handle_t *)&s->work_poll))
    uv_close((uv_handle_t *)&s->work_poll, on_work_poll_closed);
}

/* Stops serving. Connections close after their pending writes, unless a second signal came
 * (force_close), when they close at once. The drain timer, if it runs, stays armed,
 * unreferenced so that it does not keep the loop alive: if it fires first, it closes what
 * is still open. */
static void begin_stop(weir__http_server *s) {
  if (s->state == WEIR__STOPPING) return;
  s->state = WEIR__STOPPING;
  weir__http_server_close(s, s->force_close);
  /* The signal watchers stay installed (unreferenced, so the loop can end) until the engine
   * is gone: a repeated SIGTERM during the last steps must not kill the process. */
  uv_unref((uv_handle_t *)&s->sigint);
  uv_unref((uv_handle_t *)&s->sigterm);
  if (s->force_close || !uv_is_active((uv_handle_t *)&s->drain_timer)) {
    uv_timer_stop(&s->drain_timer);
    if (!uv_is_closing((uv_handle_t *)&s->drain_timer))
      uv_close((uv_handle_t *)&s->drain_timer, NULL);
  } else {
    uv_unref((uv_handle_t *)&s->drain_timer);
  }
  /* The wake-up descriptor stays open while the engine may still call back: it is closed after
   * the last job is gone (see job_finished). */
  if (s->num_jobs == 0) close_wakeups(s);
}

/* Nothing more is waited for: requests are aborted and every connection closes now (their
 * unsent output is dropped). Requests still being prepared or compiled end when their work
 * does, each bounded by its budget. */
static void force_stop(weir__http_server *s) {
  s->force_close = 1;
  weir__api_abort_all(s);
  if (s->state == WEIR__STOPPING) {
    weir__http_server_close(s, 1);
    uv_timer_stop(&s->drain_timer);
    if (!uv_is_closing((uv_handle_t *)&s->drain_timer))
      uv_close((uv_handle_t *)&s->drain_timer, NULL);
  } else if (!s->loading) {
    begin_stop(s);
  }
}

static void job_finished(weir__http_server *s) {
  if (s->num_jobs > 0) return;
  if (s->state == WEIR__DRAINING && !s->loading) {
    weir_log(WEIR_LOG_INFO, "http", "drained: every request finished");
    begin_stop(s);
  } else if (s->state == WEIR__STOPPING) {
    close_wakeups(s);
  }
}

static void on_drain_timeout(uv_timer_t *t) {
  weir__http_server *s = t->data;
  if (!s->drain_grace) {
    weir_log(WEIR_LOG_WARN, "http", "drain timeout: aborting %d request(s) still running",
             s->num_jobs);
    s->drain_grace = 1;
    weir__api_abort_all(s);
    uv_timer_start(&s->drain_timer, on_drain_timeout, WEIR__DRAIN_GRACE_MS, 0);
    return;
  }
  weir_log(WEIR_LOG_WARN, "http", "drain grace over: closing %d connection(s) still open",
           s->num_conns);
  force_stop(s);
}

static void on_signal(uv_signal_t *h, int signum) {
  weir__http_server *s = h->data;
  if (s->state == WEIR__DRAINING || s->state == WEIR__STOPPING) {
    /* A second signal: stop waiting for anything. */
    weir_log(WEIR_LOG_WARN, "http", "second signal: aborting in-flight requests, closing "
             "connections");
    force_stop(s);
    return;
  }
  weir_log(WEIR_LOG_INFO, "http", "%s: draining (up to %lld ms)",
           signum == SIGINT ? "SIGINT" : "SIGTERM", (long long)s->cfg->drain_timeout_ms);
  s->state = WEIR__DRAINING;
  if (s->cfg->drain_timeout_ms > 0) {
    uv_timer_start(&s->drain_timer, on_drain_timeout, (uint64_t)s->cfg->drain_timeout_ms, 0);
  } else {
    s->drain_grace = 1;
    weir__api_abort_all(s);
    uv_timer_start(&s->drain_timer, on_drain_timeout, WEIR__DRAIN_GRACE_MS, 0);
  }
  job_finished(s);
}

static void load_work(uv_work_t *w) {
  weir__http_server *s = w->data;
  /* Only the work thread touches load_rc / loaded until load_done runs on the loop thread,
   * which alone publishes s->engine (the loop reads it for /metrics meanwhile). */
  weir_engine *e = NULL;
  s->load_rc = weir_engine_create_ex(s->cfg, s->metrics, &e);
  s->loaded = s->load_rc == WEIR_OK ? e : NULL;
}

int weir__serve_attach_engine(weir__http_server *s, weir_engine *engine) {
  s->engine = engine;
  s->svc = weir_engine_service(engine);
  weir_engine_info_get(s->engine, &s->info);
  /* The engine resolved the served name (server.served_model_name, general.name, file name). */
  s->model_name = strdup(s->info.model_name ? s->info.model_name : "weir");
  if (s->info.bos_id >= 0) {
    char *t = NULL;
    size_t n = 0;
    if (weir_service_token_text(s->svc, s->info.bos_id, &t, &n) == WEIR_OK && t && n > 0)
      s->bos_text = t;
    else
      free(t);
  }
  if (!s->model_name) return WEIR_E_NOMEM;
  if (s->state == WEIR__LOADING) s->state = WEIR__READY;
  return WEIR_OK;
}

static void load_done(uv_work_t *w, int status) {
  weir__http_server *s = w->data;
  s->loading = 0;
  s->engine = s->loaded;
  if (status != 0 || s->load_rc != WEIR_OK) {
    weir_log(WEIR_LOG_ERROR, "http", "could not start the engine: %s",
             weir_strerror(status != 0 ? WEIR_E_CANCELED : s->load_rc));
    s->exit_code = 1;
    begin_stop(s);
    return;
  }
  int was_loading = s->state == WEIR__LOADING;
  if (weir__serve_attach_engine(s, s->engine) != WEIR_OK) {
    s->exit_code = 1;
    begin_stop(s);
    return;
  }
  if (was_loading) {
    weir_log(WEIR_LOG_INFO, "http", "ready: serving model \"%s\" (context %d tokens)",
             s->model_name, s->info.context_length);
  } else {
    job_finished(s); /* a signal came while loading */
  }
}

/* Threads for each heavy pool: half the CPUs this process may run on (its affinity mask, so
 * a container pinned to two CPUs counts two), at least 1; capped by the pools' maxima. On a
 * 2-CPU machine that is one heavy thread per pool (http_internal.h says why). */
static int heavy_threads(void) {
  long n = 0;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
  if (n <= 0) n = sysconf(_SC_NPROCESSORS_ONLN);
  n /= 2;
  return n < 1 ? 1 : n > 64 ? 64 : (int)n;
}

int weir__serve_setup(weir__http_server *s, uv_loop_t *loop, const weir_config *cfg,
                      weir_metrics *metrics) {
  weir__http_server_init(s, loop, cfg, metrics, &weir__api_handlers);
  s->work_fd = -1;
  s->job_finished = job_finished;
  s->started_unix = (int64_t)time(NULL);
  /* The config already applied WEIR_API_KEY (file < environment < flags). */
  s->api_key = cfg->api_key && *cfg->api_key ? cfg->api_key : NULL;
  if (weir__api_metrics_register(s) != WEIR_OK) return WEIR_E_NOMEM;
  s->work_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (s->work_fd < 0 || uv_poll_init(loop, &s->work_poll, s->work_fd) != 0) {
    if (s->work_fd >= 0) close(s->work_fd);
    s->work_fd = -1;
    return WEIR_E_NOMEM;
  }
  s->work_poll.data = s;
  uv_poll_start(&s->work_poll, UV_READABLE, on_work_ready);
  /* Request preparation and constraint compiles, off the loop (issue 28): up to
   * WEIR__PREP_THREADS bodies parsed, templated and tokenized at once, at most
   * WEIR__PREP_PER_CLIENT of them for one client; compiles likewise; heavy work (from
   * WEIR__HEAVY_BYTES) on pools of its own at SCHED_IDLE (http_internal.h). Light
   * preparation runs at the loop's priority: every request needs it, and at a lower one a
   * saturated engine starves admission (the soak's client timeouts); light compiles a
   * little below, since a short regular expression can still compile for seconds. */
  const int heavy = heavy_threads();
  if (weir_workpool_create("weir-prep", WEIR__PREP_THREADS, WEIR__PREP_PER_CLIENT,
                           WEIR__PREP_QUEUE, &s->prep_pool) != WEIR_OK ||
      weir_workpool_create("weir-prep-big", heavy < WEIR__PREP_HEAVY_THREADS ? heavy : WEIR__PREP_HEAVY_THREADS,
                           WEIR__PREP_HEAVY_PER_CLIENT, WEIR__PREP_HEAVY_QUEUE,
                           &s->prep_heavy_pool) != WEIR_OK ||
      weir_workpool_create("weir-compile", WEIR__COMPILE_THREADS, WEIR__COMPILE_PER_CLIENT,
                           WEIR__COMPILE_QUEUE, &s->compile_pool) != WEIR_OK ||
      weir_workpool_create("weir-compile-big",
                           heavy < WEIR__COMPILE_HEAVY_THREADS ? heavy : WEIR__COMPILE_HEAVY_THREADS,
                           WEIR__COMPILE_HEAVY_PER_CLIENT, WEIR__COMPILE_HEAVY_QUEUE,
                           &s->compile_heavy_pool) != WEIR_OK ||
      weir_workpool_create("weir-embed", WEIR__EMBED_THREADS, WEIR__EMBED_PER_CLIENT,
                           WEIR__EMBED_QUEUE, &s->embed_pool) != WEIR_OK)
    return WEIR_E_NOMEM;
  weir_workpool_set_priority(s->prep_pool, WEIR_WORKPOOL_NORMAL);
  weir_workpool_set_priority(s->compile_pool, WEIR_WORKPOOL_BELOW);
  weir_workpool_set_priority(s->prep_heavy_pool, WEIR_WORKPOOL_IDLE);
  weir_workpool_set_priority(s->compile_heavy_pool, WEIR_WORKPOOL_IDLE);
  return WEIR_OK;
}

void weir__serve_detach(weir__http_server *s) {
  close_wakeups(s);
  uv_run(s->loop, UV_RUN_DEFAULT);
  /* Every job is gone (so no work is queued or running): the pools end before the engine
   * whose tokenizer they use. */
  weir_workpool_destroy(s->embed_pool);
  weir_workpool_destroy(s->compile_heavy_pool);
  weir_workpool_destroy(s->compile_pool);
  weir_workpool_destroy(s->prep_heavy_pool);
  weir_workpool_destroy(s->prep_pool);
  s->embed_pool = s->compile_pool = s->prep_pool = NULL;
  s->compile_heavy_pool = s->prep_heavy_pool = NULL;
  if (s->engine) weir_engine_destroy(s->engine);
  s->engine = NULL;
  free_events(s);
  free(s->model_name);
  free(s->bos_text);
  s->model_name = s->bos_text = NULL;
}

/* Every connection is a file descriptor: the soft limit (often 1024) is raised to the hard
 * one so that server.max_connections is what turns clients away, not EMFILE. */
static void raise_fd_limit(const weir_config *cfg) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  if (rl.rlim_cur < rl.rlim_max) {
    struct rlimit nl = {rl.rlim_max, rl.rlim_max};
    if (setrlimit(RLIMIT_NOFILE, &nl) == 0) rl.rlim_cur = rl.rlim_max;
  }
  /* Plugins, the model file, the loop's own descriptors: keep a margin of 64. */
  if (rl.rlim_cur != RLIM_INFINITY && (rlim_t)cfg->max_connections + 64 > rl.rlim_cur)
    weir_log(WEIR_LOG_WARN, "http",
             "server.max_connections is %d but this process may open only %llu files; "
             "raise the limit (ulimit -n) or lower max_connections",
             cfg->max_connections, (unsigned long long)rl.rlim_cur);
}

int weir_http_serve(const weir_config *cfg) {
  int code = 1;
  uv_loop_t loop;
  weir_metrics *metrics = weir_metrics_process();
  if (!metrics) {
    weir_log(WEIR_LOG_ERROR, "http", "out of memory");
    return 1;
  }
  if (uv_loop_init(&loop) != 0) {
    weir_log(WEIR_LOG_ERROR, "http", "cannot create the event loop");
    return 1;
  }
  weir__http_server *s = calloc(1, sizeof *s);
  if (!s) goto close_loop;
  raise_fd_limit(cfg);
  /* Memory and priorities (issue 28). The work pools' threads run below the loop and the
   * engine; a lock they may hold when preempted is a lock the loop must never need, or the
   * loop waits for as long as the low-priority thread waits for a CPU (measured: loop stalls
   * of 0.5 s under 6 clients compiling 1 MB grammars, the loop asleep in malloc's arena
   * lock). So every thread gets a malloc arena of its own (the main thread, which runs the
   * loop, keeps the main arena to itself: arenas of threads that ended are reused before a
   * thread would share one), and blocks from WEIR__MMAP_BYTES up are mapped on their own:
   * a large body or string never enters an arena, and freeing it (on whichever thread) takes
   * no arena lock and gives the memory straight back to the system. Setting the threshold
   * also stops glibc from raising it after each large free, which made 1 MB bodies come from
   * the arenas again and stay there. */
  mallopt(M_ARENA_MAX, WEIR__MALLOC_ARENAS);
  mallopt(M_MMAP_THRESHOLD, WEIR__MMAP_BYTES);
  if (weir__serve_setup(s, &loop, cfg, metrics) != WEIR_OK) {
    weir_log(WEIR_LOG_ERROR, "http", "cannot register metrics");
    goto free_server;
  }
  uv_signal_init(&loop, &s->sigint);
  uv_signal_init(&loop, &s->sigterm);
  uv_timer_init(&loop, &s->drain_timer);
  uv_timer_init(&loop, &s->lag_timer);
  s->sigint.data = s->sigterm.data = s->drain_timer.data = s->lag_timer.data = s;
  /* Unreferenced: the probe never keeps the loop alive; it is closed with the signals. */
  on_lag_tick(&s->lag_timer);
  uv_unref((uv_handle_t *)&s->lag_timer);
  /* A client that disconnects while we write must not kill the process. */
  signal(SIGPIPE, SIG_IGN);

  char cerr[512] = "";
  if (weir__rcache_open(s, cerr, sizeof cerr) != WEIR_OK) {
    weir_log(WEIR_LOG_ERROR, "http", "response cache: %s", cerr);
    s->exit_code = 1;
    begin_stop(s);
  } else if (weir__http_server_listen(s) != WEIR_OK) {
    s->exit_code = 1;
    begin_stop(s);
  } else {
    uv_signal_start(&s->sigint, on_signal, SIGINT);
    uv_signal_start(&s->sigterm, on_signal, SIGTERM);
    s->loading = 1;
    s->load_work.data = s;
    if (uv_queue_work(&loop, &s->load_work, load_work, load_done) != 0) {
      s->loading = 0;
      s->exit_code = 1;
      begin_stop(s);
    }
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  code = s->exit_code;
  /* No job is left, so no work is queued or running and the engine holds none of our
   * requests: the pools end first (they use the engine's tokenizer), then the engine. */
  weir_workpool_destroy(s->embed_pool);
  weir_workpool_destroy(s->compile_heavy_pool);
  weir_workpool_destroy(s->compile_pool);
  weir_workpool_destroy(s->prep_heavy_pool);
  weir_workpool_destroy(s->prep_pool);
  s->embed_pool = s->compile_pool = s->prep_pool = NULL;
  s->compile_heavy_pool = s->prep_heavy_pool = NULL;
  if (s->engine) weir_engine_destroy(s->engine);
  weir__rcache_close(s); /* after the pools: no store is running */
  free_events(s);
  uv_close((uv_handle_t *)&s->sigint, NULL);
  uv_close((uv_handle_t *)&s->sigterm, NULL);
  uv_close((uv_handle_t *)&s->lag_timer, NULL);
  if (!uv_is_closing((uv_handle_t *)&s->drain_timer)) uv_close((uv_handle_t *)&s->drain_timer, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  weir_log(WEIR_LOG_INFO, "http", "stopped");
free_server:
  weir_workpool_destroy(s->embed_pool); /* NULL unless set-up failed */
  weir_workpool_destroy(s->compile_pool);
  weir_workpool_destroy(s->compile_heavy_pool);
  weir_workpool_destroy(s->prep_pool);
  weir_workpool_destroy(s->prep_heavy_pool);
  weir__rcache_close(s);
  free(s->model_name);
  free(s->bos_text);
  free(s);
close_loop:
  uv_run(&loop, UV_RUN_NOWAIT);
  if (uv_loop_close(&loop) != 0) weir_log(WEIR_LOG_DEBUG, "http", "loop closed with handles");
  return code;
}
