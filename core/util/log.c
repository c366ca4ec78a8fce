#include "util/log.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "util/utf8.h"

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static weir_log_level g_min = WEIR_LOG_INFO;
static weir_log_format g_format = WEIR_LOG_TEXT;
static FILE *g_out = NULL;

static const char *level_name(weir_log_level l) {
  switch (l) {
  case WEIR_LOG_DEBUG: return "debug";
  case WEIR_LOG_INFO: return "info";
  case WEIR_LOG_WARN: return "warn";
  case WEIR_LOG_ERROR: return "error";
  }
  return "?";
}

void weir_log_configure(weir_log_level min_level, weir_log_format format, FILE *out) {
  g_min = min_level;
  g_format = format;
  g_out = out;
}

weir_log_level weir_log_min_level(void) { return g_min; }

int weir_log_level_parse(const char *s, weir_log_level *out) {
  static const char *names[] = {"debug", "info", "warn", "error"};
  for (int i = 0; i < 4; i++)
    if (s && strcmp(s, names[i]) == 0) {
      *out = (weir_log_level)i;
      return 0;
    }
  return WEIR_E_INVAL;
}

/* Escapes a message for a JSON string value. */
static void put_json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    switch (*p) {
    case '"': fputs("\\\"", f); break;
    case '\\': fputs("\\\\", f); break;
    case '\n': fputs("\\n", f); break;
    case '\r': fputs("\\r", f); break;
    case '\t': fputs("\\t", f); break;
    default:
      if (*p < 0x20) fprintf(f, "\\u%04x", *p);
      else fputc(*p, f);
    }
  }
  fputc('"', f);
}

static void timestamp(char *ts, size_t cap) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  struct tm tm;
  gmtime_r(&tv.tv_sec, &tm);
  snprintf(ts, cap, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
           tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(tv.tv_usec / 1000));
}

/* Log lines are UTF-8: bytes from outside (file names, URLs) that are not, and a character
 * the message buffer cut in half, become U+FFFD. Returns s itself or *owned. */
static const char *utf8_line(const char *s, char **owned) {
  *owned = NULL;
  size_t n = strlen(s), i = 0;
  const unsigned char *p = (const unsigned char *)s;
  while (i < n) {
    int k = p[i] < 0x80 ? 1 : weir_utf8_scan(p + i, n - i);
    if (k <= 0) break;
    i += (size_t)k;
  }
  if (i == n) return s;
  size_t len = 0, cap = 0;
  if (weir_utf8_sanitize(p, n, 1, owned, &len, &cap, NULL) != 0) {
    free(*owned);
    *owned = NULL;
    return "(unprintable message)";
  }
  (*owned)[len] = '\0';
  return *owned;
}

void weir_logv(weir_log_level level, const char *component, const char *fmt, va_list ap) {
  if (level < g_min) return;
  char raw[4096];
  vsnprintf(raw, sizeof raw, fmt, ap);
  char *owned = NULL;
  const char *msg = utf8_line(raw, &owned);
  char ts[64];
  timestamp(ts, sizeof ts);
  pthread_mutex_lock(&g_lock);
  FILE *f = g_out ? g_out : stderr;
  if (g_format == WEIR_LOG_JSON) {
    fprintf(f, "{\"ts\":\"%s\",\"level\":\"%s\",\"component\":", ts, level_name(level));
    put_json_string(f, component ? component : "weir");
    fputs(",\"msg\":", f);
    put_json_string(f, msg);
    fputs("}\n", f);
  } else {
    fprintf(f, "%s %-5s [%s] %s\n", ts, level_name(level), component ? component : "weir", msg);
  }
  fflush(f);
  pthread_mutex_unlock(&g_lock);
  free(owned);
}

void weir_log(weir_log_level level, const char *component, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  weir_logv(level, component, fmt, ap);
  va_end(ap);
}

void weir_log_record(const char *json) {
  char *owned = NULL;
  const char *rec = utf8_line(json, &owned);
  char ts[64];
  timestamp(ts, sizeof ts);
  pthread_mutex_lock(&g_lock);
  FILE *f = g_out ? g_out : stderr;
  /* Every record starts with its time: {"ts":"...", then the record's own fields. */
  if (rec[0] == '{') fprintf(f, "{\"ts\":\"%s\"%s%s\n", ts, rec[1] == '}' ? "" : ",", rec + 1);
  else fprintf(f, "%s\n", rec);
  free(owned);
  fflush(f);
  pthread_mutex_unlock(&g_lock);
}
