/* Core logging: levels, human text on a terminal or JSON lines, one process-wide sink.
 * Thread-safe: every call writes one whole line under a lock. */
#ifndef WEIR_UTIL_LOG_H
#define WEIR_UTIL_LOG_H

#include <stdarg.h>
#include <stdio.h>

#include "weir/plugin.h" /* weir_log_level */

typedef enum weir_log_format {
  WEIR_LOG_TEXT = 0,
  WEIR_LOG_JSON = 1,
} weir_log_format;

/* Sets the minimum level, the format and the stream (NULL: stderr). Not thread-safe against
 * concurrent logging: call at start-up. */
void weir_log_configure(weir_log_level min_level, weir_log_format format, FILE *out);
weir_log_level weir_log_min_level(void);
/* Parses "debug", "info", "warn", "error"; returns 0 on success, WEIR_E_INVAL otherwise. */
int weir_log_level_parse(const char *s, weir_log_level *out);

/* Logs one line. `component` names the subsystem or plugin ("loader", "plugin:paged"). */
void weir_log(weir_log_level level, const char *component, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void weir_logv(weir_log_level level, const char *component, const char *fmt, va_list ap);

/* Writes `json` (one complete JSON object, no newline) as its own line, whatever the format:
 * per-request records are always JSON. A "ts" field (UTC, ISO 8601 with milliseconds) is
 * put first. Every line the logger writes is valid UTF-8 (invalid bytes become U+FFFD). */
void weir_log_record(const char *json);

#endif
