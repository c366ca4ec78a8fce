/* The CUDA device plugin's pool allocator (plugins/device/cuda/pool.c), driven over malloc'd
 * chunks so that it runs on machines without a GPU: random allocate/free sequences checked
 * against the bytes each live allocation holds, coalescing, chunk growth, failure paths. */
#include <CUnit/Basic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool.h"
#include "weir/status.h"

typedef struct backing {
  int chunks;   /* chunks handed out */
  int freed;
  int fail_next; /* make the next chunk allocation fail */
} backing;

static int b_alloc(void *ctx, size_t size, void **ptr) {
  backing *b = ctx;
  if (b->fail_next) {
    b->fail_next = 0;
    return WEIR_E_NOMEM;
  }
  void *p = NULL;
  if (posix_memalign(&p, 4096, size) != 0) return WEIR_E_NOMEM;
  b->chunks++;
  *ptr = p;
  return WEIR_OK;
}

static void b_free(void *ctx, void *ptr) {
  backing *b = ctx;
  b->freed++;
  free(ptr);
}

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng >> 32);
}

static void test_random_ops(void) {
  backing b = {0};
  weir__pool p;
  CU_ASSERT_EQUAL_FATAL(weir__pool_init(&p, 1 << 20, b_alloc, b_free, &b), WEIR_OK);
  enum { N = 200 };
  unsigned char *ptr[N] = {0};
  size_t size[N] = {0};
  int ok = 1;
  for (int step = 0; step < 20000 && ok; step++) {
    int i = (int)(rnd() % N);
    if (ptr[i]) {
      for (size_t j = 0; j < size[i]; j++)
        if (ptr[i][j] != (unsigned char)i) {
          ok = 0;
          break;
        }
      CU_ASSERT_EQUAL(weir__pool_free(&p, ptr[i]), WEIR_OK);
      ptr[i] = NULL;
    } else {
      /* Mostly small, sometimes larger than a chunk. */
      size[i] = rnd() % 50 == 0 ? (size_t)(rnd() % (3 << 20)) + 1 : (size_t)(rnd() % 20000) + 1;
      void *q = NULL;
      CU_ASSERT_EQUAL_FATAL(weir__pool_alloc(&p, size[i], &q), WEIR_OK);
      CU_ASSERT((uintptr_t)q % WEIR_POOL_ALIGN == 0);
      ptr[i] = q;
      memset(ptr[i], i, size[i]);
    }
  }
  CU_ASSERT(ok); /* no allocation overwrote another */
  for (int i = 0; i < N; i++)
    if (ptr[i]) CU_ASSERT_EQUAL(weir__pool_free(&p, ptr[i]), WEIR_OK);
  CU_ASSERT_EQUAL(p.in_use, 0);
  weir__pool_fini(&p);
  CU_ASSERT_EQUAL(b.chunks, b.freed);
}

static void test_coalesce(void) {
  backing b = {0};
  weir__pool p;
  const size_t chunk = 1 << 20;
  CU_ASSERT_EQUAL_FATAL(weir__pool_init(&p, chunk, b_alloc, b_free, &b), WEIR_OK);
  void *q[16];
  for (int i = 0; i < 16; i++) CU_ASSERT_EQUAL(weir__pool_alloc(&p, chunk / 16, &q[i]), WEIR_OK);
  CU_ASSERT_EQUAL(b.chunks, 1); /* sixteen pieces fill exactly one chunk */
  /* Free in an order that exercises merging with both neighbours. */
  static const int order[16] = {1, 3, 2, 0, 15, 13, 14, 5, 7, 6, 4, 9, 11, 10, 8, 12};
  for (int i = 0; i < 16; i++) CU_ASSERT_EQUAL(weir__pool_free(&p, q[order[i]]), WEIR_OK);
  void *whole = NULL;
  CU_ASSERT_EQUAL(weir__pool_alloc(&p, chunk, &whole), WEIR_OK);
  CU_ASSERT_EQUAL(b.chunks, 1); /* the pieces merged back into one free range */
  CU_ASSERT_EQUAL(weir__pool_free(&p, whole), WEIR_OK);
  weir__pool_fini(&p);
}

static void test_failures(void) {
  backing b = {0};
  weir__pool p;
  CU_ASSERT_EQUAL_FATAL(weir__pool_init(&p, 1 << 16, b_alloc, b_free, &b), WEIR_OK);
  void *q = (void *)0x1;
  b.fail_next = 1;
  CU_ASSERT_EQUAL(weir__pool_alloc(&p, 100, &q), WEIR_E_NOMEM);
  CU_ASSERT_EQUAL(q, (void *)0x1); /* untouched on failure */
  CU_ASSERT_EQUAL(weir__pool_alloc(&p, 0, &q), WEIR_E_INVAL);
  CU_ASSERT_EQUAL(weir__pool_alloc(&p, 100, &q), WEIR_OK);
  char local;
  CU_ASSERT_EQUAL(weir__pool_free(&p, &local), WEIR_E_INVAL);          /* not ours */
  CU_ASSERT_EQUAL(weir__pool_free(&p, (char *)q + 256), WEIR_E_INVAL); /* inside a piece */
  CU_ASSERT_EQUAL(weir__pool_free(&p, q), WEIR_OK);
  CU_ASSERT_EQUAL(weir__pool_free(&p, q), WEIR_E_INVAL); /* double free */
  CU_ASSERT_EQUAL(weir__pool_free(&p, NULL), WEIR_OK);
  /* A reservation is used before any new chunk. */
  CU_ASSERT_EQUAL(weir__pool_reserve(&p, 4 << 20), WEIR_OK);
  int before = b.chunks;
  CU_ASSERT_EQUAL(weir__pool_alloc(&p, 3 << 20, &q), WEIR_OK);
  CU_ASSERT_EQUAL(b.chunks, before);
  weir__pool_fini(&p);
  CU_ASSERT_EQUAL(b.chunks, b.freed);
}

int main(void) {
  if (CU_initialize_registry() != CUE_SUCCESS) return 1;
  CU_pSuite s = CU_add_suite("cuda_pool", NULL, NULL);
  if (!s || !CU_add_test(s, "random allocate/free", test_random_ops) ||
      !CU_add_test(s, "coalescing", test_coalesce) ||
      !CU_add_test(s, "failure paths", test_failures))
    return 1;
  CU_basic_set_mode(CU_BRM_VERBOSE);
  CU_basic_run_tests();
  unsigned failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
  CU_cleanup_registry();
  return failed ? 1 : 0;
}
