/* weir SDK: status codes.
 *
 * Every fallible weir function, in core and in plugins, returns an int that is 0 (WEIR_OK)
 * on success or one of the negative codes below. Codes are never renumbered; a retired code
 * keeps its number as a placeholder. Since ABI 1.0. */
#ifndef WEIR_STATUS_H
#define WEIR_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum weir_status {
  WEIR_OK = 0,
  WEIR_E_NOMEM = -1,      /* an allocation failed (host or device memory) */
  WEIR_E_INVAL = -2,      /* an argument or an input value is invalid */
  WEIR_E_NOTSUP = -3,     /* the operation, dtype or device is not supported */
  WEIR_E_IO = -4,         /* a read, write, open or mmap failed */
  WEIR_E_FORMAT = -5,     /* a file or message is malformed (GGUF, TOML, JSON, HTTP) */
  WEIR_E_ABI = -6,        /* a plugin's ABI version or build signature does not match */
  WEIR_E_NOTFOUND = -7,   /* a file, key, plugin or tensor does not exist */
  WEIR_E_EXISTS = -8,     /* a name is already taken */
  WEIR_E_RANGE = -9,      /* a value lies outside its allowed range */
  WEIR_E_DEVICE = -10,    /* the device failed or is absent (no GPU, driver error) */
  WEIR_E_NOSPACE = -11,   /* a fixed pool is exhausted (KV-cache blocks, queue slots) */
  WEIR_E_CANCELED = -12,  /* the operation was aborted by its owner */
  WEIR_E_TIMEOUT = -13,   /* a deadline passed */
  WEIR_E_BUSY = -14,      /* the resource is busy; try again later */
  WEIR_E_INTERNAL = -15,  /* a bug: an invariant did not hold */
  WEIR_E_PLUGIN = -16,    /* a plugin failed (its init or a callback returned an error) */
} weir_status;

/* Names a status code in a short English phrase. Never returns NULL; the string is static.
 * Thread-safe. Defined inline so that a plugin needs no core symbol to use it. */
static inline const char *weir_strerror(int status) {
  switch (status) {
  case WEIR_OK: return "success";
  case WEIR_E_NOMEM: return "out of memory";
  case WEIR_E_INVAL: return "invalid argument";
  case WEIR_E_NOTSUP: return "not supported";
  case WEIR_E_IO: return "input/output error";
  case WEIR_E_FORMAT: return "malformed input";
  case WEIR_E_ABI: return "plugin ABI mismatch";
  case WEIR_E_NOTFOUND: return "not found";
  case WEIR_E_EXISTS: return "already exists";
  case WEIR_E_RANGE: return "value out of range";
  case WEIR_E_DEVICE: return "device error";
  case WEIR_E_NOSPACE: return "no space left in pool";
  case WEIR_E_CANCELED: return "canceled";
  case WEIR_E_TIMEOUT: return "timed out";
  case WEIR_E_BUSY: return "busy";
  case WEIR_E_INTERNAL: return "internal error";
  case WEIR_E_PLUGIN: return "plugin error";
  default: return "unknown error";
  }
}

#ifdef __cplusplus
}
#endif
#endif
