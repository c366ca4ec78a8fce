/* A best-fit sub-allocator over large device chunks, so that steady-state
 * allocation never reaches cudaMalloc (which synchronizes the device and costs tens of
 * microseconds to milliseconds).
 *
 * The pool obtains chunks of at least `chunk_size` bytes from a backing allocator (cudaMalloc
 * in the plugin, malloc in the unit test), hands out 256-byte aligned pieces, and coalesces
 * neighbouring free pieces on free. Chunks are returned to the backing allocator only at fini.
 * Freed memory may be handed out again at once: with one stream, the device executes work in
 * issue order, so a kernel issued after the free cannot overtake one issued before it.
 *
 * Thread-safety: every function but init and fini takes the pool's mutex. */
#ifndef WEIR_CUDA_POOL_H
#define WEIR_CUDA_POOL_H

#include <pthread.h>
#include <stddef.h>

typedef int (*weir__pool_chunk_alloc_fn)(void *ctx, size_t size, void **ptr);
typedef void (*weir__pool_chunk_free_fn)(void *ctx, void *ptr);

typedef struct weir__pool_seg weir__pool_seg;
typedef struct weir__pool_chunk weir__pool_chunk;

typedef struct weir__pool {
  pthread_mutex_t mu;
  weir__pool_chunk *chunks;
  size_t chunk_size;
  weir__pool_chunk_alloc_fn chunk_alloc;
  weir__pool_chunk_free_fn chunk_free;
  void *ctx;
  size_t reserved; /* bytes held from the backing allocator */
  size_t in_use;   /* bytes handed out (rounded sizes) */
} weir__pool;

#define WEIR_POOL_ALIGN ((size_t)256)

/* Sets up an empty pool. Returns WEIR_OK or WEIR_E_INVAL. */
int weir__pool_init(weir__pool *p, size_t chunk_size, weir__pool_chunk_alloc_fn chunk_alloc,
                    weir__pool_chunk_free_fn chunk_free, void *ctx);
/* Adds one chunk of `size` bytes now (a reservation at start-up). */
int weir__pool_reserve(weir__pool *p, size_t size);
/* Returns WEIR_OK with *ptr set, or WEIR_E_NOMEM (backing allocator full) / WEIR_E_INVAL
 * (size 0). *ptr is untouched on failure. */
int weir__pool_alloc(weir__pool *p, size_t size, void **ptr);
/* Frees a pointer alloc returned; NULL is a no-op. Returns WEIR_E_INVAL for a pointer the pool
 * did not hand out (nothing is changed). */
int weir__pool_free(weir__pool *p, void *ptr);
/* Returns every chunk to the backing allocator. Pointers still out become invalid. */
void weir__pool_fini(weir__pool *p);

#endif
