/* Progress of a long task (loading a model, writing one, calibrating, quantizing, measuring
 * perplexity): one facility for all of them.
 *
 * The owner reports how far it got with weir_progress_update; the facility shows it where a
 * person looks: on a terminal (stderr is a tty) as one line rewritten in place at most ten
 * times a second, otherwise as a log line (weir_log, level info) every `log_interval_s`
 * seconds. Begin and end are always logged. Nothing is shown when the log level is above
 * info. Any thread may read the state (weir_progress_fraction) while the owner works: the
 * HTTP layer answers /health with it while the model loads.
 *
 * Threading: one owner calls begin / update / end; readers may call weir_progress_fraction and
 * weir_progress_active from any thread. A zeroed weir_progress is idle and valid. */
#ifndef WEIR_UTIL_PROGRESS_H
#define WEIR_UTIL_PROGRESS_H

#include <stdatomic.h>
#include <stdint.h>

typedef struct weir_progress {
  /* Private. */
  char what[96];                  /* "loading model tiny.gguf" */
  char unit[24];                  /* "tensors", "layers", "MiB" */
  uint64_t total;
  _Atomic uint64_t done;
  _Atomic int active;
  double t_begin, t_last_show;
  double log_interval_s;
  int tty;
  int shown_len;
} weir_progress;

/* Starts a task of `total` units (> 0). `what` and `unit` are copied. log_interval_s <= 0
 * takes 5 s. */
void weir_progress_begin(weir_progress *p, const char *what, uint64_t total, const char *unit,
                         double log_interval_s);
/* Records that `done` of `total` units are complete (clamped to total). Cheap: it prints at
 * most at the rates above. */
void weir_progress_update(weir_progress *p, uint64_t done);
/* Ends the task: a last line with the elapsed time, "done" or "failed". */
void weir_progress_end(weir_progress *p, int ok);

/* The fraction done, 0..1, or -1 when no task is under way. Any thread. */
double weir_progress_fraction(const weir_progress *p);
/* 1 between begin and end. Any thread. */
int weir_progress_active(const weir_progress *p);

#endif
