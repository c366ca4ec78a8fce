/* One-line error messages into a caller's buffer: the (err, errlen) convention of core's
 * fallible functions. */
#ifndef WEIR_UTIL_ERR_H
#define WEIR_UTIL_ERR_H

#include <stddef.h>

/* Formats into err (truncating to errlen); does nothing when err is NULL or errlen is 0.
 * Thread-safe. */
void weir_set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
