/* Stop strings over streamed text.
 *
 * Text arrives in pieces (already UTF-8-complete, from the incremental detokenizer). The
 * matcher emits everything that can no longer be part of a stop string and holds back the
 * longest tail that is still the beginning of one, so a client never sees a partial match.
 * When a stop string completes, the text before it is emitted and the rest is dropped.
 * Because stop strings are valid UTF-8, a held-back tail always starts on a character
 * boundary, so emitted text never splits a character either.
 *
 * Not thread-safe; one matcher per request. */
#ifndef WEIR_ENGINE_STOP_H
#define WEIR_ENGINE_STOP_H

#include <stddef.h>

typedef struct weir_stop_matcher {
  char **stops;   /* owned copies */
  size_t *lens;
  int num_stops;
  char *buf;      /* held text followed by the piece being processed */
  size_t len, cap;
  size_t emit_len; /* bytes of buf handed out by the last call */
  int stopped;
  int include_stop; /* set after init: the completed stop string is emitted too */
  int which;        /* once stopped: the index in stops of the string that completed */
} weir_stop_matcher;

/* Copies the stop strings (empty ones are ignored). Returns 0 or WEIR_E_NOMEM. */
int weir_stop_init(weir_stop_matcher *m, const char *const *stops, int num_stops);
void weir_stop_free(weir_stop_matcher *m);

/* Appends text; *emit and *emit_len receive the text that is now safe to send (valid until the
 * next call; with include_stop, up to and including a completed stop string). Returns 1 when a
 * stop string completed (the matcher then stays stopped and
 * ignores further text), 0 otherwise, or WEIR_E_NOMEM. */
int weir_stop_feed(weir_stop_matcher *m, const char *text, size_t len, const char **emit,
                   size_t *emit_len);

/* At the end of generation (EOS, length): releases the held-back tail. */
void weir_stop_flush(weir_stop_matcher *m, const char **emit, size_t *emit_len);

#endif
