/* An Earley recognizer over the compiled grammar, one set per byte.
 *
 * An item is (position, origin): a rule's DFA state and the set where the rule began. Reading
 * a byte moves every item whose state has a transition on it into the next set; then the set
 * is closed: an item at an accepting state completes its rule, advancing the items of its
 * origin set that wait on that rule; an item with rule edges predicts those rules (a new item
 * at their start, origin here). Nullable rules are handled as Aycock and Horspool do, by also
 * advancing over them at prediction time, so a completion whose origin is the current set is
 * never needed.
 *
 * Set 0 is always empty and stands for the context: the start item (or, for the token
 * classes, the one position being examined) begins in set 1 with origin 0, so a completion
 * back to origin 0 finds nothing to advance and "an item of origin 0 is at an accepting
 * state" means the start rule is complete.
 *
 * Sets are appended and removed only at the end, so a matcher's state after any step is a
 * prefix of its chart: rollback is truncation, and the token walks of the mask computation
 * push and pop sets on the matcher's own chart. */
#include <stdlib.h>
#include <string.h>

#include "grammar/internal.h"
#include "weir/status.h"

void weir__chart_free(weir__chart *c) {
  free(c->items);
  free(c->set_start);
  free(c->slot);
  free(c->stamp);
  memset(c, 0, sizeof *c);
}

static int reserve_items(weir__chart *c, uint32_t n) {
  if (n <= c->cap_items) return 0;
  uint32_t cap = c->cap_items ? c->cap_items * 2 : 256;
  while (cap < n) cap *= 2;
  weir__item *p = realloc(c->items, (size_t)cap * sizeof *p);
  if (!p) return WEIR_E_NOMEM;
  c->items = p;
  c->cap_items = cap;
  return 0;
}

static int reserve_sets(weir__chart *c, uint32_t n) {
  if (n + 1 <= c->cap_sets) return 0;
  uint32_t cap = c->cap_sets ? c->cap_sets * 2 : 64;
  while (cap < n + 1) cap *= 2;
  uint32_t *p = realloc(c->set_start, (size_t)cap * sizeof *p);
  if (!p) return WEIR_E_NOMEM;
  c->set_start = p;
  c->cap_sets = cap;
  return 0;
}

/* Replaces the dedup table by an empty one of at least `slots` slots (a power of two). */
static int table_grow(weir__chart *c, uint32_t slots) {
  uint32_t n = c->n_slots ? c->n_slots : 64;
  while (n < slots) n *= 2;
  uint32_t *s = realloc(c->slot, (size_t)n * sizeof *s);
  if (!s) return WEIR_E_NOMEM;
  c->slot = s;
  uint32_t *t = calloc(n, sizeof *t);
  if (!t) return WEIR_E_NOMEM;
  free(c->stamp);
  c->stamp = t;
  c->n_slots = n;
  c->cur_stamp = 0;
  return 0;
}

/* The dedup table covers the set being built; a new stamp empties it in O(1). */
static int table_reset(weir__chart *c, uint32_t expect) {
  if (expect * 2 > c->n_slots && table_grow(c, expect * 2)) return WEIR_E_NOMEM;
  if (++c->cur_stamp == 0) {
    memset(c->stamp, 0, (size_t)c->n_slots * sizeof *c->stamp);
    c->cur_stamp = 1;
  }
  return 0;
}

static inline uint32_t item_hash(uint32_t pos, uint32_t origin) {
  return (pos * 0x9E3779B1u) ^ (origin * 0x85EBCA77u);
}

/* Adds (pos, origin) to the set being built (items from set_start[n_sets] on) unless present.
 * Returns 1 added, 0 present, WEIR_E_NOMEM. */
static int add_item(weir__chart *c, uint32_t pos, uint32_t origin) {
  const uint32_t first = c->set_start[c->n_sets];
  const uint32_t count = c->n_items - first;
  if ((count + 1) * 2 > c->n_slots) {
    /* Rehash what the set holds into a table twice as large. */
    if (table_grow(c, (count + 1) * 2 > c->n_slots * 2 ? (count + 1) * 2 : c->n_slots * 2))
      return WEIR_E_NOMEM;
    c->cur_stamp = 1;
    const uint32_t n = c->n_slots;
    for (uint32_t i = first; i < c->n_items; i++) {
      uint32_t h = item_hash(c->items[i].pos, c->items[i].origin) & (n - 1);
      while (c->stamp[h] == c->cur_stamp) h = (h + 1) & (n - 1);
      c->stamp[h] = c->cur_stamp;
      c->slot[h] = i;
    }
  }
  const uint32_t mask = c->n_slots - 1;
  uint32_t h = item_hash(pos, origin) & mask;
  while (c->stamp[h] == c->cur_stamp) {
    const weir__item *it = &c->items[c->slot[h]];
    if (it->pos == pos && it->origin == origin) return 0;
    h = (h + 1) & mask;
  }
  if (reserve_items(c, c->n_items + 1)) return WEIR_E_NOMEM;
  c->stamp[h] = c->cur_stamp;
  c->slot[h] = c->n_items;
  c->items[c->n_items++] = (weir__item){pos, origin};
  return 1;
}

/* Closes the set being built (index k = n_sets). */
static int close_set(weir__chart *c, const weir_grammar *g) {
  const uint32_t k = c->n_sets;
  for (uint32_t i = c->set_start[k]; i < c->n_items; i++) {
    const weir__item it = c->items[i];
    if ((g->pos_flags[it.pos] & WEIR__POS_ACCEPT) && it.origin < k) {
      /* Completion: advance the origin set's items waiting on this rule. */
      const uint32_t rule = g->pos_rule[it.pos];
      const uint32_t a = c->set_start[it.origin], z = c->set_start[it.origin + 1];
      for (uint32_t j = a; j < z; j++) {
        const weir__item w = c->items[j];
        for (uint32_t e = g->pos_ref[w.pos]; e < g->pos_ref[w.pos + 1]; e++)
          if (g->refs[e].rule == rule && add_item(c, g->refs[e].target, w.origin) < 0)
            return WEIR_E_NOMEM;
      }
    }
    for (uint32_t e = g->pos_ref[it.pos]; e < g->pos_ref[it.pos + 1]; e++) {
      const weir__ref_edge re = g->refs[e];
      if (add_item(c, g->rule_start[re.rule], k) < 0) return WEIR_E_NOMEM;
      if (g->rule_nullable[re.rule] && add_item(c, re.target, it.origin) < 0)
        return WEIR_E_NOMEM;
    }
  }
  return 0;
}

int weir__chart_start(weir__chart *c, const weir_grammar *g, uint32_t pos) {
  if (reserve_sets(c, 2) || reserve_items(c, 16)) return WEIR_E_NOMEM;
  c->n_items = 0;
  c->set_start[0] = 0;
  c->set_start[1] = 0; /* set 0: empty */
  c->n_sets = 1;
  if (table_reset(c, 8)) return WEIR_E_NOMEM;
  if (add_item(c, pos, 0) < 0 || close_set(c, g)) return WEIR_E_NOMEM;
  c->n_sets = 2;
  c->set_start[2] = c->n_items;
  return 0;
}

int weir__chart_push(weir__chart *c, const weir_grammar *g, uint8_t byte) {
  const uint32_t k = c->n_sets; /* the set being built */
  if (reserve_sets(c, k + 1)) return WEIR_E_NOMEM;
  const uint32_t a = c->set_start[k - 1], z = c->set_start[k];
  if (table_reset(c, z - a + 8)) return WEIR_E_NOMEM;
  for (uint32_t i = a; i < z; i++) {
    const uint32_t pos = c->items[i].pos;
    if (!(g->pos_flags[pos] & WEIR__POS_SCAN)) continue;
    const int32_t t = weir__scan(g, pos, byte);
    if (t >= 0 && add_item(c, (uint32_t)t, c->items[i].origin) < 0) goto nomem;
  }
  if (c->n_items == c->set_start[k]) return 0; /* nothing scanned: not allowed */
  if (close_set(c, g)) goto nomem;
  c->n_sets = k + 1;
  c->set_start[k + 1] = c->n_items;
  return 1;
nomem:
  c->n_items = c->set_start[k];
  return WEIR_E_NOMEM;
}

void weir__chart_truncate(weir__chart *c, uint32_t n_sets) {
  if (n_sets >= c->n_sets) return;
  c->n_sets = n_sets;
  c->n_items = c->set_start[n_sets];
}

int weir__chart_complete(const weir__chart *c, const weir_grammar *g) {
  const uint32_t k = c->n_sets - 1;
  for (uint32_t i = c->set_start[k]; i < c->set_start[k + 1]; i++)
    if (c->items[i].origin == 0 && (g->pos_flags[c->items[i].pos] & WEIR__POS_ACCEPT)) return 1;
  return 0;
}

int weir__chart_copy(weir__chart *dst, const weir__chart *src) {
  weir__chart_free(dst);
  if (reserve_items(dst, src->n_items + 1) || reserve_sets(dst, src->n_sets + 1)) {
    weir__chart_free(dst);
    return WEIR_E_NOMEM;
  }
  memcpy(dst->items, src->items, (size_t)src->n_items * sizeof *src->items);
  memcpy(dst->set_start, src->set_start, ((size_t)src->n_sets + 1) * sizeof *src->set_start);
  dst->n_items = src->n_items;
  dst->n_sets = src->n_sets;
  return 0;
}
