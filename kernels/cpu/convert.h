/* weir CPU kernels: row conversions between f32 and the 16-bit float formats.
 *
 * The scalar conversions (weir_f16_to_f32, weir_f32_to_f16, weir_bf16_to_f32,
 * weir_f32_to_bf16) are the SDK's (weir/numeric.h), with its rounding rules; the row
 * functions here give the same results and use F16C / AVX-512 when weir_cpu_isa() allows.
 * Pure functions, thread-safe; src and dst must not overlap. */
#ifndef WEIR_KERNELS_CPU_CONVERT_H
#define WEIR_KERNELS_CPU_CONVERT_H

#include <stdint.h>

#include "weir/numeric.h"

/* The 65536-entry f16 -> f32 table the scalar paths use (built on first call, thread-safe). */
const float *weir_f16_table(void);

void weir_f16_to_f32_row(const uint16_t *src, float *dst, int64_t n);
void weir_f32_to_f16_row(const float *src, uint16_t *dst, int64_t n);
void weir_bf16_to_f32_row(const uint16_t *src, float *dst, int64_t n);
void weir_f32_to_bf16_row(const float *src, uint16_t *dst, int64_t n);

#endif
