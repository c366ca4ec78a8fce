/* The CUDA device plugin: one GPU, one stream, a pooled allocator, staged host copies, the
 * graph's elementwise operations (kernels/cuda/elementwise.cu), the native handles other CUDA
 * plugins share (stream, cuBLAS, cuBLASLt), and step graphs. See docs/cuda.md. */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool.h"
#include "weir/device.h"
#include "weir_cuda_common.h"
#include "weir_cuda_kernels.h"

#define MAX_GRAPHS 256 /* decode sizes x tokens per sequence (verification), two models */
#define CUBLAS_WORKSPACE_BYTES ((size_t)32 << 20)

typedef struct step_graph {
  uint64_t key;
  cudaGraphExec_t exec;
} step_graph;

typedef struct cuda_dev {
  const weir_host *host;
  int device_id;
  char name[128];
  int num_sms;
  cudaStream_t stream;
  weir__pool pool;
  int pool_ready;

  /* Pinned staging ring for copy_h2d: the caller's bytes are copied here and the DMA runs
   * from here, so copy_h2d returns before the device reads them. When the ring wraps, the
   * stream is synchronized once so that no earlier copy still reads the bytes reused. */
  unsigned char *h2d_stage;
  size_t h2d_size, h2d_head;
  /* Pinned bounce buffer for copy_d2h (pageable destinations copy at a fraction of the
   * bandwidth and in small pieces). */
  unsigned char *d2h_stage;
  size_t d2h_size;

  pthread_mutex_t handle_mu;
  cublasHandle_t cublas;
  cublasLtHandle_t cublaslt;
  void *cublas_ws;

  step_graph graphs[MAX_GRAPHS];
  int num_graphs;
  int capturing;
} cuda_dev;

static const weir_option_desc k_options[] = {
    {.key = "device_id", .type = WEIR_OPT_INT,
                       .help = "CUDA device ordinal to run on", .def_int = 0, .min = 0,
                       .max = 255},
    {.key = "pool_chunk_mb", .type = WEIR_OPT_INT,
                           .help = "device memory the pool takes from the driver at a time (MiB)",
                           .def_int = 256, .min = 2, .max = 1 << 20},
    {.key = "reserve_mb", .type = WEIR_OPT_INT,
                        .help = "device memory reserved into the pool at start-up (MiB, 0: none)",
                        .def_int = 0, .min = 0, .max = 1 << 22},
    {.key = "staging_mb", .type = WEIR_OPT_INT,
                        .help = "pinned host staging buffer for host-to-device copies (MiB)",
                        .def_int = 16, .min = 1, .max = 4096},
};

/* The options as init reads them, by key. */
typedef struct cuda_settings {
  int64_t device_id, pool_chunk_mb, reserve_mb, staging_mb;
} cuda_settings;

static const weir_option_bind k_binds[] = {
    WEIR_OPTION_BIND_INT(cuda_settings, device_id, "device_id"),
    WEIR_OPTION_BIND_INT(cuda_settings, pool_chunk_mb, "pool_chunk_mb"),
    WEIR_OPTION_BIND_INT(cuda_settings, reserve_mb, "reserve_mb"),
    WEIR_OPTION_BIND_INT(cuda_settings, staging_mb, "staging_mb"),
};

#define LOG(d, lvl, ...) (d)->host->log((d)->host->ctx, (lvl), __VA_ARGS__)
/* Why init fails, for the loader's refusal (host->set_error). */
#define INIT_ERROR(d, ...) (d)->host->set_error((d)->host->ctx, __VA_ARGS__)

/* Logs a failed CUDA call and returns its weir status. */
static int fail(cuda_dev *d, cudaError_t e, const char *what) {
  LOG(d, WEIR_LOG_ERROR, "cuda: %s failed: %s (%s)", what, cudaGetErrorString(e),
      cudaGetErrorName(e));
  return weir_cuda_status(e);
}

#define CK(d, call, what)                                  \
  do {                                                     \
    cudaError_t e_ = (call);                               \
    if (e_ != cudaSuccess) return fail((d), e_, (what));   \
  } while (0)

static int chunk_alloc(void *ctx, size_t size, void **ptr) {
  cuda_dev *d = ctx;
  cudaError_t e = cudaMalloc(ptr, size);
  if (e != cudaSuccess) {
    (void)cudaGetLastError(); /* clear the sticky-free error so later calls do not see it */
    LOG(d, WEIR_LOG_WARN, "cuda: cudaMalloc(%zu MiB) failed: %s", size >> 20,
        cudaGetErrorString(e));
    return weir_cuda_status(e) == WEIR_E_NOMEM ? WEIR_E_NOMEM : WEIR_E_DEVICE;
  }
  return WEIR_OK;
}

static void chunk_free(void *ctx, void *ptr) {
  (void)ctx;
  cudaFree(ptr);
}

static void graphs_clear(cuda_dev *d) {
  for (int i = 0; i < d->num_graphs; i++) cudaGraphExecDestroy(d->graphs[i].exec);
  d->num_graphs = 0;
}

static void dev_fini(void *self) {
  cuda_dev *d = self;
  if (!d) return;
  weir_cuda_use_device(d->device_id);
  if (d->stream) cudaStreamSynchronize(d->stream);
  graphs_clear(d);
  if (d->cublas) cublasDestroy(d->cublas);
  if (d->cublaslt) cublasLtDestroy(d->cublaslt);
  if (d->pool_ready) weir__pool_fini(&d->pool); /* also releases cublas_ws */
  if (d->h2d_stage) cudaFreeHost(d->h2d_stage);
  if (d->d2h_stage) cudaFreeHost(d->d2h_stage);
  if (d->stream) cudaStreamDestroy(d->stream);
  pthread_mutex_destroy(&d->handle_mu);
  d->host->free(d->host->ctx, d);
}

static int dev_init(const weir_host *host, const weir_plugin_args *args, void **self) {
  int rc = WEIR_E_NOMEM;
  cuda_dev *d = host->alloc(host->ctx, sizeof *d, 0);
  if (!d) goto fail;
  memset(d, 0, sizeof *d);
  d->host = host;
  if (pthread_mutex_init(&d->handle_mu, NULL) != 0) {
    host->free(host->ctx, d);
    goto fail;
  }
  (void)args;
  cuda_settings set;
  if ((rc = weir_options_read(host, k_binds, (int)(sizeof k_binds / sizeof k_binds[0]), &set)) !=
      WEIR_OK)
    goto free_dev;
  d->device_id = (int)set.device_id;
  size_t chunk_mb = (size_t)set.pool_chunk_mb, reserve_mb = (size_t)set.reserve_mb;
  size_t staging_mb = (size_t)set.staging_mb;

  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    if (e != cudaSuccess)
      INIT_ERROR(d, "cuda: no CUDA device: cudaGetDeviceCount failed: %s (%s)",
          cudaGetErrorString(e), cudaGetErrorName(e));
    else
      INIT_ERROR(d, "cuda: no CUDA device: cudaGetDeviceCount found 0 devices");
    rc = WEIR_E_DEVICE;
    goto free_dev;
  }
  if (d->device_id >= count) {
    INIT_ERROR(d, "cuda: device_id %d out of range: this machine has %d device(s)",
        d->device_id, count);
    rc = WEIR_E_DEVICE;
    goto free_dev;
  }
  struct cudaDeviceProp prop;
  if ((e = weir_cuda_use_device(d->device_id)) != cudaSuccess ||
      (e = cudaGetDeviceProperties(&prop, d->device_id)) != cudaSuccess) {
    fail(d, e, "selecting the device");
    rc = WEIR_E_DEVICE;
    goto free_dev;
  }
  snprintf(d->name, sizeof d->name, "%.96s (sm_%d%d, %d SMs)", prop.name, prop.major,
           prop.minor, prop.multiProcessorCount);
  d->num_sms = prop.multiProcessorCount;
  /* A blocking stream (not cudaStreamNonBlocking): work a plugin issues on the legacy default
   * stream, when it could not obtain this stream, is still ordered with it. */
  if ((e = cudaStreamCreateWithFlags(&d->stream, cudaStreamDefault)) != cudaSuccess) {
    rc = fail(d, e, "cudaStreamCreate");
    goto free_dev;
  }
  rc = weir__pool_init(&d->pool, chunk_mb << 20, chunk_alloc, chunk_free, d);
  if (rc != WEIR_OK) goto free_dev;
  d->pool_ready = 1;
  if (reserve_mb > 0 && (rc = weir__pool_reserve(&d->pool, reserve_mb << 20)) != WEIR_OK) {
    INIT_ERROR(d, "cuda: cannot reserve %zu MiB of device memory (reserve_mb)", reserve_mb);
    goto free_dev;
  }
  d->h2d_size = staging_mb << 20;
  d->d2h_size = (size_t)4 << 20;
  if ((e = cudaHostAlloc((void **)&d->h2d_stage, d->h2d_size, cudaHostAllocDefault)) !=
          cudaSuccess ||
      (e = cudaHostAlloc((void **)&d->d2h_stage, d->d2h_size, cudaHostAllocDefault)) !=
          cudaSuccess) {
    rc = fail(d, e, "cudaHostAlloc (pinned staging)");
    goto free_dev;
  }
  LOG(d, WEIR_LOG_INFO, "cuda: device %d: %s, %.1f GiB, CUDA runtime %d", d->device_id, d->name,
      (double)prop.totalGlobalMem / (1 << 30), CUDART_VERSION);
  *self = d;
  return WEIR_OK;
free_dev:
  dev_fini(d);
fail:
  return rc;
}

static int dev_info(void *self, weir_device_info *out) {
  cuda_dev *d = self;
  size_t fr = 0, tot = 0;
  CK(d, weir_cuda_use_device(d->device_id), "cudaSetDevice");
  CK(d, cudaMemGetInfo(&fr, &tot), "cudaMemGetInfo");
  weir_device_info info;
  memset(&info, 0, sizeof info);
  snprintf(info.name, sizeof info.name, "%s", d->name);
  info.total_memory = tot;
  /* Free memory as the engine can use it: the driver's free memory plus what the pool holds
   * unused. */
  pthread_mutex_lock(&d->pool.mu);
  info.free_memory = fr + (d->pool.reserved - d->pool.in_use);
  pthread_mutex_unlock(&d->pool.mu);
  /* Fill no more than the caller's struct holds (an older host's may be shorter). */
  size_t n = out->struct_size && out->struct_size < sizeof info ? out->struct_size : sizeof info;
  info.struct_size = (uint32_t)n;
  memcpy(out, &info, n);
  return WEIR_OK;
}

static int dev_alloc(void *self, size_t size, void **ptr) {
  cuda_dev *d = self;
  if (!ptr) return WEIR_E_INVAL;
  /* A new chunk comes from cudaMalloc on the current device. */
  if (weir_cuda_use_device(d->device_id) != cudaSuccess) return WEIR_E_DEVICE;
  /* A zero-byte request gets the smallest piece, as the CPU device does, so that callers
   * may allocate empty tensors uniformly. */
  return weir__pool_alloc(&d->pool, size ? size : 1, ptr);
}

static void dev_free(void *self, void *ptr) {
  cuda_dev *d = self;
  if (weir__pool_free(&d->pool, ptr) != WEIR_OK)
    LOG(d, WEIR_LOG_ERROR, "cuda: free of %p, which the pool did not hand out", ptr);
}

static int dev_copy_h2d(void *self, void *dst, const void *src, size_t size) {
  cuda_dev *d = self;
  if (size == 0) return WEIR_OK;
  if (d->capturing) return WEIR_E_BUSY;
  CK(d, weir_cuda_use_device(d->device_id), "cudaSetDevice");
  /* Large copies (weights at load time) go straight from the caller's memory; the driver
   * stages pageable memory itself and returns when the source may be reused. */
  if (size > d->h2d_size / 4) {
    CK(d, cudaMemcpyAsync(dst, src, size, cudaMemcpyHostToDevice, d->stream), "copy_h2d");
    return WEIR_OK;
  }
  if (d->h2d_head + size > d->h2d_size) {
    CK(d, cudaStreamSynchronize(d->stream), "copy_h2d (staging wrap)");
    d->h2d_head = 0;
  }
  unsigned char *stage = d->h2d_stage + d->h2d_head;
  memcpy(stage, src, size);
  d->h2d_head += (size + 255) & ~(size_t)255;
  CK(d, cudaMemcpyAsync(dst, stage, size, cudaMemcpyHostToDevice, d->stream), "copy_h2d");
  return WEIR_OK;
}

static int dev_copy_d2h(void *self, void *dst, const void *src, size_t size) {
  cuda_dev *d = self;
  if (size == 0) return WEIR_OK;
  if (d->capturing) return WEIR_E_BUSY;
  CK(d, weir_cuda_use_device(d->device_id), "cudaSetDevice");
  if (size <= d->d2h_size) {
    CK(d, cudaMemcpyAsync(d->d2h_stage, src, size, cudaMemcpyDeviceToHost, d->stream),
       "copy_d2h");
    CK(d, cudaStreamSynchronize(d->stream), "copy_d2h (synchronize)");
    memcpy(dst, d->d2h_stage, size);
    return WEIR_OK;
  }
  CK(d, cudaMemcpyAsync(dst, src, size, cudaMemcpyDeviceToHost, d->stream), "copy_d2h");
  CK(d, cudaStreamSynchronize(d->stream), "copy_d2h (synchronize)");
  return WEIR_OK;
}

static int dev_copy_d2d(void *self, void *dst, const void *src, size_t size) {
  cuda_dev *d = self;
  if (size == 0) return WEIR_OK;
  CK(d, weir_cuda_use_device(d->device_id), "cudaSetDevice");
  CK(d, cudaMemcpyAsync(dst, src, size, cudaMemcpyDeviceToDevice, d->stream), "copy_d2d");
  return WEIR_OK;
}

static int dev_memset(void *self, void *dst, int value, size_t size) {
  cuda_dev *d = self;
  if (size == 0) return WEIR_OK;
  CK(d, weir_cuda_use_device(d->device_id), "cudaSetDevice");
  CK(d, cudaMemsetAsync(dst, value, size, d->stream), "memset");
  return WEIR_OK;
}

static int dev_synchronize(void *self) {
  cuda_dev *d = self;
  if (d->capturing) return WEIR_E_BUSY;
  CK(d, weir_cuda_use_device(d->device_id), "cudaSetDevice");
  CK(d, cudaStreamSynchronize(d->stream), "synchronize");
  return WEIR_OK;
}

/* Launches on the instance's device (a kernel launched on another device's stream fails). */
#define LAUNCH(d, call, what)                                   \
  do {                                                          \
    cudaError_t e_ = weir_cuda_use_device((d)->device_id);      \
    if (e_ == cudaSuccess) e_ = (call);                         \
    if (e_ != cudaSuccess) return fail((d), e_, what);          \
    return WEIR_OK;                                             \
  } while (0)

static int dev_rms_norm(void *self, float *out, const float *x, const float *weight,
                        int64_t rows, int64_t dim, float eps) {
  cuda_dev *d = self;
  LAUNCH(d, weir_cuda_rms_norm(d->stream, out, x, weight, rows, dim, eps), "rms_norm");
}

static int dev_rope(void *self, float *x, const int32_t *positions, int64_t n_tokens,
                    int32_t n_heads, int32_t head_dim, int32_t rot_dim, float freq_base,
                    float freq_scale, weir_rope_style style) {
  cuda_dev *d = self;
  LAUNCH(d,
         weir_cuda_rope(d->stream, x, positions, n_tokens, n_heads, head_dim, rot_dim, freq_base,
                        freq_scale, (int)style),
         "rope");
}

static int dev_swiglu(void *self, float *out, const float *gate, const float *up, int64_t n) {
  cuda_dev *d = self;
  LAUNCH(d, weir_cuda_swiglu(d->stream, out, gate, up, n), "swiglu");
}

static int dev_rope_freqs(void *self, float *x, const int32_t *positions, int64_t n_tokens,
                          int32_t n_heads, int32_t head_dim, int32_t rot_dim,
                          const float *inv_freq, float mscale, weir_rope_style style) {
  cuda_dev *d = self;
  LAUNCH(d,
         weir_cuda_rope_freqs(d->stream, x, positions, n_tokens, n_heads, head_dim, rot_dim,
                              inv_freq, mscale, (int)style),
         "rope_freqs");
}

static int dev_geglu(void *self, float *out, const float *gate, const float *up, int64_t n) {
  cuda_dev *d = self;
  LAUNCH(d, weir_cuda_geglu(d->stream, out, gate, up, n), "geglu");
}

static int dev_scale(void *self, float *x, float s, int64_t n) {
  cuda_dev *d = self;
  LAUNCH(d, weir_cuda_scale(d->stream, x, s, n), "scale");
}

static int dev_layer_norm(void *self, float *out, const float *x, const float *weight,
                          const float *bias, int64_t rows, int64_t dim, float eps) {
  cuda_dev *d = self;
  LAUNCH(d, weir_cuda_layer_norm(d->stream, out, x, weight, bias, rows, dim, eps), "layer_norm");
}

static int dev_gelu(void *self, float *out, const float *x, int64_t n) {
  cuda_dev *d = self;
  LAUNCH(d, weir_cuda_gelu(d->stream, out, x, n), "gelu");
}

static int dev_attention_full(void *self, float *out, const float *q, const float *k,
                              const float *v, int64_t n_tokens, int32_t n_heads,
                              int32_t n_kv_heads, int32_t head_dim, float scale) {
  cuda_dev *d = self;
  LAUNCH(d,
         weir_cuda_attention_full(d->stream, out, q, k, v, n_tokens, n_heads, n_kv_heads,
                                  head_dim, scale),
         "attention_full");
}

static int dev_softcap(void *self, float *x, float cap, int64_t n) {
  cuda_dev *d = self;
  LAUNCH(d, weir_cuda_softcap(d->stream, x, cap, n), "softcap");
}

static int dev_add(void *self, float *out, const float *a, const float *b, int64_t n) {
  cuda_dev *d = self;
  LAUNCH(d, weir_cuda_add(d->stream, out, a, b, n), "add");
}

/* ABI 1.7: residual add + RMSNorm in one launch (kernels/cuda/elementwise.cu). */
static int dev_add_rms_norm(void *self, float *out, float *residual, const float *x,
                            const float *weight, int64_t rows, int64_t dim, float eps) {
  cuda_dev *d = self;
  if (rows < 0 || dim < 0) return WEIR_E_INVAL;
  LAUNCH(d, weir_cuda_add_rms_norm(d->stream, out, residual, x, weight, rows, dim, eps),
         "add_rms_norm");
}

/* ABI 1.8: greedy picks on the device, one block per row (kernels/cuda/elementwise.cu). */
static int dev_argmax_rows(void *self, int32_t *out, float *prob, const float *x, int64_t rows,
                           int64_t n, const int32_t *ids, int32_t fallback) {
  cuda_dev *d = self;
  if (rows < 0 || n <= 0 || !out || !x) return WEIR_E_INVAL;
  LAUNCH(d, weir_cuda_argmax_rows(d->stream, out, prob, x, rows, n, ids, fallback),
         "argmax_rows");
}

static int dev_add_bias(void *self, float *x, const float *bias, int64_t rows, int64_t dim) {
  cuda_dev *d = self;
  LAUNCH(d, weir_cuda_add_bias(d->stream, x, bias, rows, dim), "add_bias");
}

static int dev_get_rows(void *self, float *out, const float *x, const int32_t *rows, int64_t n,
                        int64_t dim) {
  cuda_dev *d = self;
  LAUNCH(d, weir_cuda_get_rows(d->stream, out, x, rows, n, dim), "get_rows");
}

/* Creates cuBLAS handles on first request: creation costs tens of milliseconds and device
 * memory, which a deployment without cuBLAS users should not pay. The handle is bound to the
 * stream and given a workspace from the pool so that cuBLAS never allocates during a graph
 * capture. */
static void *dev_native_handle(void *self, const char *name) {
  cuda_dev *d = self;
  void *h = NULL;
  if (!name) return NULL;
  if (strcmp(name, "cuda.stream") == 0) return (void *)d->stream;
  if (strcmp(name, "cuda.device") == 0) return &d->device_id;
  pthread_mutex_lock(&d->handle_mu);
  weir_cuda_use_device(d->device_id);
  if (strcmp(name, "cublas") == 0) {
    if (!d->cublas) {
      cublasHandle_t c = NULL;
      if (cublasCreate(&c) != CUBLAS_STATUS_SUCCESS) {
        LOG(d, WEIR_LOG_ERROR, "cuda: cublasCreate failed");
        goto unlock;
      }
      if (!d->cublas_ws &&
          weir__pool_alloc(&d->pool, CUBLAS_WORKSPACE_BYTES, &d->cublas_ws) != WEIR_OK)
        d->cublas_ws = NULL;
      if (cublasSetStream(c, d->stream) != CUBLAS_STATUS_SUCCESS ||
          (d->cublas_ws &&
           cublasSetWorkspace(c, d->cublas_ws, CUBLAS_WORKSPACE_BYTES) != CUBLAS_STATUS_SUCCESS)) {
        LOG(d, WEIR_LOG_ERROR, "cuda: binding cuBLAS to the stream failed");
        cublasDestroy(c);
        goto unlock;
      }
      d->cublas = c;
    }
    h = d->cublas;
  } else if (strcmp(name, "cublaslt") == 0) {
    if (!d->cublaslt && cublasLtCreate(&d->cublaslt) != CUBLAS_STATUS_SUCCESS) {
      LOG(d, WEIR_LOG_ERROR, "cuda: cublasLtCreate failed");
      d->cublaslt = NULL;
    }
    h = d->cublaslt;
  } else if (strcmp(name, "cuda.num_sms") == 0) {
    h = &d->num_sms;
  }
unlock:
  pthread_mutex_unlock(&d->handle_mu);
  return h;
}

static step_graph *graph_find(cuda_dev *d, uint64_t key) {
  for (int i = 0; i < d->num_graphs; i++)
    if (d->graphs[i].key == key) return &d->graphs[i];
  return NULL;
}

static int dev_graph_begin(void *self, uint64_t key) {
  cuda_dev *d = self;
  (void)key;
  if (d->capturing) return WEIR_E_BUSY;
  if (!graph_find(d, key) && d->num_graphs == MAX_GRAPHS) return WEIR_E_NOSPACE;
  CK(d, weir_cuda_use_device(d->device_id), "cudaSetDevice");
  /* Relaxed: other threads may still allocate pinned memory or query the device meanwhile. */
  CK(d, cudaStreamBeginCapture(d->stream, cudaStreamCaptureModeRelaxed), "graph_begin");
  d->capturing = 1;
  return WEIR_OK;
}

static int dev_graph_end(void *self, uint64_t key) {
  cuda_dev *d = self;
  if (!d->capturing) return WEIR_E_INVAL;
  d->capturing = 0;
  cudaGraph_t g = NULL;
  cudaGraphExec_t exec = NULL;
  CK(d, cudaStreamEndCapture(d->stream, &g), "graph_end (a call in the step broke capture)");
  cudaError_t e = cudaGraphInstantiate(&exec, g, 0);
  cudaGraphDestroy(g);
  if (e != cudaSuccess) return fail(d, e, "cudaGraphInstantiate");
  step_graph *s = graph_find(d, key);
  if (s) {
    cudaGraphExecDestroy(s->exec);
  } else {
    s = &d->graphs[d->num_graphs++];
    s->key = key;
  }
  s->exec = exec;
  return WEIR_OK;
}

static int dev_graph_launch(void *self, uint64_t key) {
  cuda_dev *d = self;
  step_graph *s = graph_find(d, key);
  if (!s) return WEIR_E_NOTFOUND;
  CK(d, cudaGraphLaunch(s->exec, d->stream), "graph_launch");
  return WEIR_OK;
}

static void dev_graph_reset(void *self) { graphs_clear(self); }

static const weir_device_ops k_ops = {
    .struct_size = sizeof(weir_device_ops),
    .info = dev_info,
    .alloc = dev_alloc,
    .free = dev_free,
    .copy_h2d = dev_copy_h2d,
    .copy_d2h = dev_copy_d2h,
    .copy_d2d = dev_copy_d2d,
    .memset = dev_memset,
    .synchronize = dev_synchronize,
    .rms_norm = dev_rms_norm,
    .rope = dev_rope,
    .swiglu = dev_swiglu,
    .add = dev_add,
    .add_bias = dev_add_bias,
    .get_rows = dev_get_rows,
    .native_handle = dev_native_handle,
    .graph_begin = dev_graph_begin,
    .graph_end = dev_graph_end,
    .graph_launch = dev_graph_launch,
    .graph_reset = dev_graph_reset,
    .rope_freqs = dev_rope_freqs,
    .geglu = dev_geglu,
    .scale = dev_scale,
    .softcap = dev_softcap,
    .layer_norm = dev_layer_norm,
    .gelu = dev_gelu,
    .attention_full = dev_attention_full,
    .add_rms_norm = dev_add_rms_norm,
    .argmax_rows = dev_argmax_rows,
};

/* The device it provides, by name (ABI 1.5; the host reads these instead of the 1.0 `devices` bit). */
static const char *const k_device_names[] = {"cuda", NULL};

static const weir_plugin_desc k_desc = {
    WEIR_PLUGIN_DESC_HEADER,
    .kind = WEIR_PLUGIN_DEVICE,
    .name = "cuda",
    .version = WEIR_PLUGIN_VERSION, /* weir's own (cmake/WeirPlugin.cmake) */
    .description = "NVIDIA GPU through the CUDA runtime: pooled memory, one stream, f32 ops",
    .devices = WEIR_DEVICE_CUDA,
    .dtypes = WEIR_DTYPE_BIT(WEIR_DTYPE_F32),
    .options = k_options,
    .num_options = (int)(sizeof k_options / sizeof k_options[0]),
    .init = dev_init,
    .fini = dev_fini,
    .ops = &k_ops,
    .device_names = k_device_names,
};

WEIR_PLUGIN_EXPORT(k_desc)
