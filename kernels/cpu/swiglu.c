/* SwiGLU (see swiglu.h). expf saturates cleanly: a very negative gate gives exp = inf and
 * silu = -0, a very positive one gives exp = 0 and silu = gate. */
#include "swiglu.h"

#include <math.h>

void weir_swiglu(float *out, const float *gate, const float *up, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}
