#include "engine/stop.h"

#include <stdlib.h>
#include <string.h>

#include "weir/status.h"

int weir_stop_init(weir_stop_matcher *m, const char *const *stops, int num_stops) {
  memset(m, 0, sizeof *m);
  if (num_stops <= 0) return WEIR_OK;
  m->stops = calloc((size_t)num_stops, sizeof *m->stops);
  m->lens = calloc((size_t)num_stops, sizeof *m->lens);
  if (!m->stops || !m->lens) goto fail;
  for (int i = 0; i < num_stops; i++) {
    if (!stops[i] || !stops[i][0]) continue;
    m->stops[m->num_stops] = strdup(stops[i]);
    if (!m->stops[m->num_stops]) goto fail;
    m->lens[m->num_stops] = strlen(stops[i]);
    m->num_stops++;
  }
  return WEIR_OK;
fail:
  weir_stop_free(m);
  return WEIR_E_NOMEM;
}

void weir_stop_free(weir_stop_matcher *m) {
  for (int i = 0; i < m->num_stops; i++) free(m->stops[i]);
  free(m->stops);
  free(m->lens);
  free(m->buf);
  memset(m, 0, sizeof *m);
}

/* Drops the bytes handed out by the previous call. */
static void consume_emitted(weir_stop_matcher *m) {
  if (m->emit_len) {
    memmove(m->buf, m->buf + m->emit_len, m->len - m->emit_len);
    m->len -= m->emit_len;
    m->emit_len = 0;
  }
}

int weir_stop_feed(weir_stop_matcher *m, const char *text, size_t len, const char **emit,
                   size_t *emit_len) {
  *emit = "";
  *emit_len = 0;
  if (m->stopped) return 1;
  consume_emitted(m);
  if (m->len + len + 1 > m->cap) {
    size_t cap = m->cap ? m->cap : 64;
    while (cap < m->len + len + 1) cap *= 2;
    char *nb = realloc(m->buf, cap);
    if (!nb) return WEIR_E_NOMEM;
    m->buf = nb;
    m->cap = cap;
  }
  memcpy(m->buf + m->len, text, len);
  m->len += len;
  m->buf[m->len] = 0;

  /* The earliest complete match wins: generation stops at the first stop string. */
  size_t first = m->len, first_len = 0;
  for (int i = 0; i < m->num_stops; i++) {
    const char *hit = memmem(m->buf, m->len, m->stops[i], m->lens[i]);
    if (hit && (size_t)(hit - m->buf) < first) {
      first = (size_t)(hit - m->buf);
      first_len = m->lens[i];
      m->which = i;
    }
  }
  if (first < m->len) {
    m->stopped = 1;
    if (m->include_stop) first += first_len; /* within buf: the match was found there */
    m->emit_len = first;
    *emit = m->buf;
    *emit_len = first;
    return 1;
  }
  /* Hold back the longest tail that is a proper prefix of some stop string. */
  size_t hold = 0;
  for (int i = 0; i < m->num_stops; i++) {
    size_t maxk = m->lens[i] - 1 < m->len ? m->lens[i] - 1 : m->len;
    for (size_t k = maxk; k > hold; k--)
      if (memcmp(m->buf + m->len - k, m->stops[i], k) == 0) {
        hold = k;
        break;
      }
  }
  m->emit_len = m->len - hold;
  *emit = m->buf;
  *emit_len = m->emit_len;
  return 0;
}

void weir_stop_flush(weir_stop_matcher *m, const char **emit, size_t *emit_len) {
  if (m->stopped) {
    *emit = "";
    *emit_len = 0;
    return;
  }
  consume_emitted(m);
  m->emit_len = m->len;
  *emit = m->buf ? m->buf : "";
  *emit_len = m->len;
}
