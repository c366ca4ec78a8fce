/* JSON numbers within bounds (numrange.c). */
#ifndef WEIR_GRAMMAR_NUMRANGE_H
#define WEIR_GRAMMAR_NUMRANGE_H

#include "grammar/internal.h"

typedef struct weir__bound {
  int set;
  int exclusive;
  double value; /* finite */
} weir__bound;

void weir__bound_init(weir__bound *bd);
/* The JSON numbers x with lo <= x <= hi (or <, per `exclusive`; an unset bound is open):
 * integers only when `integer`, else integers and decimals with a fraction, never exponents.
 * NONE when the range holds no such number. */
uint32_t weir__number_range(weir__gb *b, const weir__bound *lo, const weir__bound *hi,
                            int integer);

#endif
