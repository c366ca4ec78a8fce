/* "sim": a device plugin that weir's core has never heard of, built against the SDK alone
 * (weir/device.h, no kernels/, no core header): the proof that a device is open (ABI 1.5).
 * It declares device_names {"sim", "cpu"}: the device it provides, and that plugins for "cpu"
 * run on its memory, which is plain host memory. Its operations are written here in plain,
 * single-threaded C from the contracts in device.h; it counts every call and, when its
 * option trace_file is set, writes the counts there at fini, so a test can tell that the
 * model really ran on it (tests/plugins/test_device_sim.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weir/device.h"

enum { OP_ALLOC, OP_COPY, OP_RMS_NORM, OP_ROPE, OP_SWIGLU, OP_ADD, OP_ADD_BIAS, OP_GET_ROWS, OP_N };
static const char *const k_op_names[OP_N] = {"alloc", "copy",  "rms_norm", "rope",
                                             "swiglu", "add", "add_bias", "get_rows"};

typedef struct sim {
  const weir_host *host;
  char *trace_file;
  long long calls[OP_N];
} sim;

static const weir_option_desc k_options[] = {
    {.key = "trace_file",
     .type = WEIR_OPT_STRING,
     .help = "write the number of calls of each operation to this file at fini (\"\": no)",
     .def_string = ""},
};

static int sim_init(const weir_host *host, const weir_plugin_args *args, void **self) {
  const char *tf;
  int rc = weir_option_string(host, "trace_file", &tf); /* by key (ABI 1.5) */
  if (rc != WEIR_OK) return rc;
  sim *s = calloc(1, sizeof *s);
  if (!s) return WEIR_E_NOMEM;
  s->host = host;
  if (!tf) tf = "";
  if (*tf && !(s->trace_file = strdup(tf))) {
    free(s);
    return WEIR_E_NOMEM;
  }
  const char *dev = WEIR_HAS_FIELD(args, weir_plugin_args, device_name) && args->device_name
                        ? args->device_name
                        : "?";
  host->log(host->ctx, WEIR_LOG_INFO, "simulated device '%s' up (host memory, plain C)", dev);
  *self = s;
  return WEIR_OK;
}

static void sim_fini(void *self) {
  sim *s = self;
  if (s->trace_file) {
    FILE *f = fopen(s->trace_file, "w");
    if (f) {
      for (int i = 0; i < OP_N; i++) fprintf(f, "%s %lld\n", k_op_names[i], s->calls[i]);
      fclose(f);
    }
    free(s->trace_file);
  }
  free(s);
}

static int sim_info(void *self, weir_device_info *out) {
  (void)self;
  if (!out) return WEIR_E_INVAL;
  snprintf(out->name, sizeof out->name, "sim (weir's test device: host memory, plain C)");
  out->total_memory = 0;
  out->free_memory = 0;
  return WEIR_OK;
}

static int sim_alloc(void *self, size_t size, void **ptr) {
  ((sim *)self)->calls[OP_ALLOC]++;
  void *p = NULL;
  if (posix_memalign(&p, 64, size ? (size + 63) / 64 * 64 : 64) != 0) return WEIR_E_NOMEM;
  *ptr = p;
  return WEIR_OK;
}

static void sim_free(void *self, void *ptr) {
  (void)self;
  free(ptr);
}

static int sim_copy(void *self, void *dst, const void *src, size_t size) {
  ((sim *)self)->calls[OP_COPY]++;
  if (size && (!dst || !src)) return WEIR_E_INVAL;
  if (size) memmove(dst, src, size);
  return WEIR_OK;
}

static int sim_memset(void *self, void *dst, int value, size_t size) {
  (void)self;
  if (size && !dst) return WEIR_E_INVAL;
  if (size) memset(dst, value, size);
  return WEIR_OK;
}

static int sim_synchronize(void *self) {
  (void)self;
  return WEIR_OK;
}

static int sim_rms_norm(void *self, float *out, const float *x, const float *weight,
                        int64_t rows, int64_t dim, float eps) {
  ((sim *)self)->calls[OP_RMS_NORM]++;
  if (rows < 0 || dim <= 0 || !out || !x || !weight) return rows == 0 ? WEIR_OK : WEIR_E_INVAL;
  for (int64_t r = 0; r < rows; r++) {
    const float *xr = x + r * dim;
    float *o = out + r * dim;
    double ss = 0;
    for (int64_t j = 0; j < dim; j++) ss += (double)xr[j] * xr[j];
    const float scale = (float)(1.0 / sqrt(ss / (double)dim + (double)eps));
    for (int64_t j = 0; j < dim; j++) o[j] = xr[j] * scale * weight[j];
  }
  return WEIR_OK;
}

static int sim_rope(void *self, float *x, const int32_t *positions, int64_t n_tokens,
                    int32_t n_heads, int32_t head_dim, int32_t rot_dim, float freq_base,
                    float freq_scale, weir_rope_style style) {
  ((sim *)self)->calls[OP_ROPE]++;
  if (n_tokens == 0) return WEIR_OK;
  if (n_tokens < 0 || !x || !positions || rot_dim > head_dim || rot_dim % 2) return WEIR_E_INVAL;
  const int32_t half = rot_dim / 2;
  for (int64_t t = 0; t < n_tokens; t++)
    for (int32_t h = 0; h < n_heads; h++) {
      float *v = x + (t * n_heads + h) * (int64_t)head_dim;
      for (int32_t i = 0; i < half; i++) {
        /* the angle pos * freq_scale * base^(-2i/rot_dim), on pairs or on halves */
        const double th =
            (double)positions[t] * freq_scale * pow((double)freq_base, -2.0 * i / rot_dim);
        const float c = (float)cos(th), s = (float)sin(th);
        const int32_t a = style == WEIR_ROPE_NEOX ? i : 2 * i;
        const int32_t b = style == WEIR_ROPE_NEOX ? i + half : 2 * i + 1;
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * c - x1 * s;
        v[b] = x0 * s + x1 * c;
      }
    }
  return WEIR_OK;
}

static int sim_swiglu(void *self, float *out, const float *gate, const float *up, int64_t n) {
  ((sim *)self)->calls[OP_SWIGLU]++;
  if (n > 0 && (!out || !gate || !up)) return WEIR_E_INVAL;
  for (int64_t i = 0; i < n; i++) out[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
  return WEIR_OK;
}

static int sim_add(void *self, float *out, const float *a, const float *b, int64_t n) {
  ((sim *)self)->calls[OP_ADD]++;
  if (n > 0 && (!out || !a || !b)) return WEIR_E_INVAL;
  for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
  return WEIR_OK;
}

static int sim_add_bias(void *self, float *x, const float *bias, int64_t rows, int64_t dim) {
  ((sim *)self)->calls[OP_ADD_BIAS]++;
  if (rows > 0 && dim > 0 && (!x || !bias)) return WEIR_E_INVAL;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t j = 0; j < dim; j++) x[r * dim + j] += bias[j];
  return WEIR_OK;
}

static int sim_get_rows(void *self, float *out, const float *x, const int32_t *rows, int64_t n,
                        int64_t dim) {
  ((sim *)self)->calls[OP_GET_ROWS]++;
  if (n > 0 && (!out || !x || !rows)) return WEIR_E_INVAL;
  for (int64_t i = 0; i < n; i++) {
    if (rows[i] < 0) return WEIR_E_RANGE;
    memmove(out + i * dim, x + (int64_t)rows[i] * dim, sizeof(float) * (size_t)dim);
  }
  return WEIR_OK;
}

static const weir_device_ops k_ops = {
    .struct_size = sizeof(weir_device_ops),
    .info = sim_info,
    .alloc = sim_alloc,
    .free = sim_free,
    .copy_h2d = sim_copy,
    .copy_d2h = sim_copy,
    .copy_d2d = sim_copy,
    .memset = sim_memset,
    .synchronize = sim_synchronize,
    .rms_norm = sim_rms_norm,
    .rope = sim_rope,
    .swiglu = sim_swiglu,
    .add = sim_add,
    .add_bias = sim_add_bias,
    .get_rows = sim_get_rows,
};

/* The device it provides, then the device whose plugins run on its memory. Built a second
 * time as "simalone" (SIM_ALONE), a device that runs no other device's plugins: the loader
 * must refuse the CPU plugins on it. */
#ifdef SIM_ALONE
#define SIM_NAME "simalone"
static const char *const k_device_names[] = {SIM_NAME, NULL};
#else
#define SIM_NAME "sim"
static const char *const k_device_names[] = {SIM_NAME, "cpu", NULL};
#endif

static const weir_plugin_desc k_desc = {
    WEIR_PLUGIN_DESC_HEADER,
    .kind = WEIR_PLUGIN_DEVICE,
    .name = SIM_NAME,
    .version = "1.0.0",
    .description = "test device: host memory, plain C ops, counts its calls",
    .devices = 0, /* no ABI 1.0 bit: known by name only */
    .dtypes = WEIR_DTYPE_BIT(WEIR_DTYPE_F32),
    .options = k_options,
    .num_options = 1,
    .init = sim_init,
    .fini = sim_fini,
    .ops = &k_ops,
    .device_names = k_device_names,
};

WEIR_PLUGIN_EXPORT(k_desc)
