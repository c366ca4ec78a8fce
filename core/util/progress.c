#include "util/progress.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util/log.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int quiet(void) { return weir_log_min_level() > WEIR_LOG_INFO; }

/* The terminal line: rewritten in place, padded over a longer previous one. */
static void show_tty(weir_progress *p, uint64_t done, double t) {
  char line[200];
  int n = snprintf(line, sizeof line, "%s: %3.0f%% (%llu/%llu %s, %.1f s)", p->what,
                   100.0 * (double)done / (double)p->total, (unsigned long long)done,
                   (unsigned long long)p->total, p->unit, t - p->t_begin);
  if (n < 0) return;
  int pad = p->shown_len > n ? p->shown_len - n : 0;
  fprintf(stderr, "\r%s%*s", line, pad, "");
  fflush(stderr);
  p->shown_len = n;
}

void weir_progress_begin(weir_progress *p, const char *what, uint64_t total, const char *unit,
                         double log_interval_s) {
  snprintf(p->what, sizeof p->what, "%s", what ? what : "working");
  snprintf(p->unit, sizeof p->unit, "%s", unit ? unit : "steps");
  p->total = total ? total : 1;
  atomic_store(&p->done, 0);
  p->t_begin = now_s();
  p->t_last_show = p->t_begin;
  p->log_interval_s = log_interval_s > 0 ? log_interval_s : 5.0;
  p->tty = isatty(STDERR_FILENO);
  p->shown_len = 0;
  atomic_store(&p->active, 1);
  if (quiet()) return;
  if (p->tty) show_tty(p, 0, p->t_begin);
  else weir_log(WEIR_LOG_INFO, "progress", "%s: started (%llu %s)", p->what,
                (unsigned long long)p->total, p->unit);
}

void weir_progress_update(weir_progress *p, uint64_t done) {
  if (!atomic_load(&p->active)) return;
  if (done > p->total) done = p->total;
  atomic_store(&p->done, done);
  if (quiet()) return;
  double t = now_s();
  if (t - p->t_last_show < (p->tty ? 0.1 : p->log_interval_s)) return;
  p->t_last_show = t;
  if (p->tty) show_tty(p, done, t);
  else weir_log(WEIR_LOG_INFO, "progress", "%s: %.0f%% (%llu/%llu %s, %.1f s)", p->what,
                100.0 * (double)done / (double)p->total, (unsigned long long)done,
                (unsigned long long)p->total, p->unit, t - p->t_begin);
}

void weir_progress_end(weir_progress *p, int ok) {
  if (!atomic_load(&p->active)) return;
  if (ok) atomic_store(&p->done, p->total);
  double t = now_s();
  if (!quiet()) {
    if (p->tty) {
      if (ok) show_tty(p, p->total, t);
      fputc('\n', stderr);
    }
    weir_log(ok ? WEIR_LOG_INFO : WEIR_LOG_WARN, "progress", "%s: %s after %.1f s (%llu/%llu %s)",
             p->what, ok ? "done" : "failed", t - p->t_begin,
             (unsigned long long)atomic_load(&p->done), (unsigned long long)p->total, p->unit);
  }
  atomic_store(&p->active, 0);
}

double weir_progress_fraction(const weir_progress *p) {
  if (!atomic_load(&((weir_progress *)p)->active)) return -1;
  return (double)atomic_load(&((weir_progress *)p)->done) / (double)p->total;
}

int weir_progress_active(const weir_progress *p) {
  return atomic_load(&((weir_progress *)p)->active);
}
