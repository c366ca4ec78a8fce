/* The response cache's front index (core/http/api_front.c): exact-byte lookups, and a
 * refresh of the same answer keeping its rendered body (Redis refreshes every front entry
 * each second; without this its next streamed hit replayed and rendered again), while a
 * refresh with another answer, or another key, drops it. Bytes stay within the bound. */
#include <stdlib.h>
#include <string.h>

#include "http/api_internal.h"
#include "testutil.h"

static const weir__front_desc g_desc = {.chat = 1, .stream = 1, .n = 1, .num_prompts = 1};

static weir__front_entry *put(weir__front *f, const char *body, const char *key,
                              const char *rec) {
  uint64_t h = weir__front_hash(1, "", 0, body, strlen(body));
  if (weir__front_put(f, h, 1, "", 0, body, strlen(body), key, &g_desc, rec, strlen(rec),
                      0) != 0)
    return NULL;
  return weir__front_find(f, h, 1, "", 0, body, strlen(body));
}

static void give_render(weir__front *f, weir__front_entry *e, const char *text) {
  char *r = strdup(text);
  uint32_t *ido = malloc(sizeof *ido), *cro = malloc(sizeof *cro);
  ido[0] = 0;
  cro[0] = 1;
  weir__front_set_render(f, e, r, strlen(r), ido, cro, 1, 4);
}

static void test_refresh_keeps_render(void) {
  weir__front *f = weir__front_new(1 << 20, 100);
  weir__front_entry *e = put(f, "{\"a\":1}", "k1", "answer one");
  CU_ASSERT_PTR_NOT_NULL_FATAL(e);
  CU_ASSERT_PTR_NULL(e->render);
  give_render(f, e, "rendered one");
  /* The same answer under the same key again: a new entry, the rendered body kept. */
  weir__front_entry *e2 = put(f, "{\"a\":1}", "k1", "answer one");
  CU_ASSERT_PTR_NOT_NULL_FATAL(e2);
  WT_ASSERT_INT_EQ(weir__front_count(f), 1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(e2->render);
  WT_ASSERT_INT_EQ(e2->render_len, 12);
  CU_ASSERT(!memcmp(e2->render, "rendered one", 12));
  WT_ASSERT_INT_EQ(e2->render_n, 1);
  WT_ASSERT_INT_EQ(e2->render_id_off[0], 0);
  WT_ASSERT_INT_EQ(e2->render_created_off[0], 1);
  WT_ASSERT_INT_EQ(e2->render_id_len, 4);
  /* Another answer for the same bytes (the entry expired and was generated anew): the
   * rendered body of the old answer must not be served for it. */
  weir__front_entry *e3 = put(f, "{\"a\":1}", "k1", "answer two");
  CU_ASSERT_PTR_NOT_NULL_FATAL(e3);
  CU_ASSERT_PTR_NULL(e3->render);
  give_render(f, e3, "rendered two");
  /* Another key (the server's configuration changed the key) drops it too. */
  weir__front_entry *e4 = put(f, "{\"a\":1}", "k2", "answer two");
  CU_ASSERT_PTR_NOT_NULL_FATAL(e4);
  CU_ASSERT_PTR_NULL(e4->render);
  /* Other bytes are other entries. */
  CU_ASSERT_PTR_NOT_NULL(put(f, "{\"a\":2}", "k3", "answer three"));
  WT_ASSERT_INT_EQ(weir__front_count(f), 2);
  weir__front_free(f);
}

/* A table just large enough for two entries and one rendered body: carrying the body over
 * must keep within the bound (the oldest goes), and never drop the entry just made. */
static void test_refresh_within_bound(void) {
  const size_t one = sizeof(weir__front_entry) + 7 + 10 + 3; /* body, record, NULs */
  weir__front *f = weir__front_new(2 * one + 12 + 8 + 4, 100);
  weir__front_entry *a = put(f, "{\"a\":1}", "k1", "answer one");
  CU_ASSERT_PTR_NOT_NULL_FATAL(a);
  give_render(f, a, "rendered one");
  CU_ASSERT_PTR_NOT_NULL_FATAL(put(f, "{\"b\":1}", "k2", "answer two"));
  WT_ASSERT_INT_EQ(weir__front_count(f), 2);
  /* Refreshing a keeps its body: a is now the newest, b stays (it all fits). */
  weir__front_entry *a2 = put(f, "{\"a\":1}", "k1", "answer one");
  CU_ASSERT_PTR_NOT_NULL_FATAL(a2);
  CU_ASSERT_PTR_NOT_NULL(a2->render);
  WT_ASSERT_INT_EQ(weir__front_count(f), 2);
  /* A third entry evicts the oldest (b), never the refreshed one. */
  CU_ASSERT_PTR_NOT_NULL(put(f, "{\"c\":1}", "k3", "answer 3!!"));
  uint64_t ha = weir__front_hash(1, "", 0, "{\"a\":1}", 7);
  uint64_t hb = weir__front_hash(1, "", 0, "{\"b\":1}", 7);
  CU_ASSERT_PTR_NULL(weir__front_find(f, hb, 1, "", 0, "{\"b\":1}", 7));
  weir__front_entry *a3 = weir__front_find(f, ha, 1, "", 0, "{\"a\":1}", 7);
  CU_ASSERT_PTR_NOT_NULL_FATAL(a3);
  CU_ASSERT_PTR_NOT_NULL(a3->render);
  weir__front_free(f);
}

int main(void) {
  static const wt_test tests[] = {
      {"a refresh of the same answer keeps its rendered body", test_refresh_keeps_render},
      {"the refreshed body stays within the table's bound", test_refresh_within_bound},
      {NULL, NULL}};
  return wt_run_suite("front", tests);
}
