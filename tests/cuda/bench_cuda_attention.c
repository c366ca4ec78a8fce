/* weir_cuda_attn_bench: decode attention alone, through the paged_cuda plugin as the engine
 * calls it (forward: KV write of the new token + attention over the context), on TinyLlama
 * 1.1B's attention shape by default (32 query heads, 4 KV heads, head_dim 64, block 16).
 *
 * For each KV dtype (f16, int8), batch size and context length: one layer's forward is
 * recorded into a step graph of `--calls` back-to-back forwards over `--calls` distinct layers
 * (so no layer's KV sits in L2 from the previous call) and replayed; the median replay time
 * divided by the calls is the time of one layer's attention. The bytes it must read are the
 * KV of every sequence's context (K and V, plus int8's row scales); bytes / time against the
 * device-to-device copy bandwidth measured in the same run is the fraction of the roofline.
 * Prints a table and, with --json FILE, writes the rows. Exits 77 without a GPU.
 *
 *   weir_cuda_attn_bench [--heads 32] [--kv-heads 4] [--head-dim 64] [--batches 1,8,64]
 *                        [--contexts 512,2048,4096] [--calls 22] [--reps 20] [--json FILE] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_host.h"

#define DEV CH_DEV
#define DS ch_dev.self
#define ATT ((const weir_attention_ops *)P_attn.ops)
#define CHECK CH_CHECK

static ch_plugin P_attn;

static int parse_list(const char *s, int *out, int max) {
  int n = 0;
  while (s && *s && n < max) {
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || v <= 0 || v > 1 << 20) return -1;
    out[n++] = (int)v;
    s = *end == ',' ? end + 1 : end;
    if (*end && *end != ',') return -1;
  }
  return n;
}

int main(int argc, char **argv) {
  int heads = 32, kv_heads = 4, hd = 64, bs = 16, calls = 22, reps = 20;
  int batches[16] = {1, 8, 64}, nb = 3, contexts[16] = {512, 2048, 4096}, nc = 3;
  const char *json = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
    int ok = val != NULL;
    if (!strcmp(a, "--heads") && ok) heads = atoi(val);
    else if (!strcmp(a, "--kv-heads") && ok) kv_heads = atoi(val);
    else if (!strcmp(a, "--head-dim") && ok) hd = atoi(val);
    else if (!strcmp(a, "--calls") && ok) calls = atoi(val);
    else if (!strcmp(a, "--reps") && ok) reps = atoi(val);
    else if (!strcmp(a, "--batches") && ok) ok = (nb = parse_list(val, batches, 16)) > 0;
    else if (!strcmp(a, "--contexts") && ok) ok = (nc = parse_list(val, contexts, 16)) > 0;
    else if (!strcmp(a, "--json") && ok) json = val;
    else ok = 0;
    if (!ok || heads <= 0 || kv_heads <= 0 || heads % kv_heads || hd <= 0 || calls <= 0 ||
        calls > 256 || reps <= 0) {
      fprintf(stderr, "usage: %s [--heads N] [--kv-heads N] [--head-dim N] [--batches L] "
                      "[--contexts L] [--calls N] [--reps N] [--json FILE]\n", argv[0]);
      return 2;
    }
    i++;
  }
  char why[256];
  if (ch_device_open(why, sizeof why) != WEIR_OK) {
    printf("no CUDA device: %s\n", why);
    return CH_SKIP;
  }
  if (ch_plugin_open(&P_attn, "weir_attention_paged_cuda.so") != WEIR_OK) {
    fprintf(stderr, "cannot open weir_attention_paged_cuda.so\n");
    return 1;
  }
  const double bw = ch_copy_bandwidth();
  printf("copy bandwidth %.0f GB/s; attention %d/%d heads, head_dim %d, block %d, %d calls "
         "per replay\n", bw / 1e9, heads, kv_heads, hd, bs, calls);
  printf("%-5s %6s %6s %10s %10s %8s\n", "kv", "batch", "ctx", "us/layer", "GB/s", "roofline");
  FILE *jf = json ? fopen(json, "w") : NULL;
  if (jf) fprintf(jf, "{\"copy_bandwidth_gbs\": %.1f, \"rows\": [", bw / 1e9);
  int first_row = 1;
  const weir_dtype dts[2] = {WEIR_DTYPE_F16, WEIR_DTYPE_I8};
  for (int di = 0; di < 2; di++)
    for (int bi = 0; bi < nb; bi++)
      for (int ci = 0; ci < nc; ci++) {
        const int S = batches[bi], ctx = contexts[ci];
        weir_attn_shape shape = {sizeof shape, calls, heads, kv_heads, hd, bs, dts[di],
                                 1.0f / 8.0f};
        const size_t bb = ATT->block_bytes(P_attn.self, &shape);
        if (bb == 0) {
          fprintf(stderr, "unsupported shape\n");
          return 1;
        }
        const int mbps = (ctx + bs - 1) / bs, nblocks = S * mbps;
        const size_t layer_bytes = (size_t)nblocks * bb;
        char *pool = ch_dalloc(layer_bytes * (size_t)calls);
        /* Small finite values everywhere (f16 0x2C2C = 0.0659, int8 0x2C = 44 with a scale
         * 0x2C2C2C2C = 2.4e-12): a benchmark only needs no NaN. */
        CHECK(DEV->memset(DS, pool, 0x2C, layer_bytes * (size_t)calls));
        int32_t *qsl = malloc((size_t)(S + 1) * 4), *cl = malloc((size_t)S * 4),
                *bt = malloc((size_t)nblocks * 4), *sl = malloc((size_t)S * 4);
        for (int s = 0; s <= S; s++) qsl[s] = s;
        for (int s = 0; s < S; s++) {
          cl[s] = ctx;
          for (int b = 0; b < mbps; b++) bt[s * mbps + b] = s * mbps + b;
          sl[s] = bt[s * mbps + (ctx - 1) / bs] * bs + (ctx - 1) % bs;
        }
        int32_t *d_qsl = ch_dalloc((size_t)(S + 1) * 4), *d_cl = ch_dalloc((size_t)S * 4),
                *d_bt = ch_dalloc((size_t)nblocks * 4), *d_sl = ch_dalloc((size_t)S * 4);
        ch_h2d(d_qsl, qsl, (size_t)(S + 1) * 4);
        ch_h2d(d_cl, cl, (size_t)S * 4);
        ch_h2d(d_bt, bt, (size_t)nblocks * 4);
        ch_h2d(d_sl, sl, (size_t)S * 4);
        float *hq = malloc((size_t)S * heads * hd * 4), *hk = malloc((size_t)S * kv_heads * hd * 4);
        ch_fill_uniform(hq, (size_t)S * heads * hd, -1, 1);
        ch_fill_uniform(hk, (size_t)S * kv_heads * hd, -1, 1);
        float *q = ch_dalloc((size_t)S * heads * hd * 4), *k = ch_dalloc((size_t)S * kv_heads * hd * 4),
              *v = ch_dalloc((size_t)S * kv_heads * hd * 4), *o = ch_dalloc((size_t)S * heads * hd * 4);
        ch_h2d(q, hq, (size_t)S * heads * hd * 4);
        ch_h2d(k, hk, (size_t)S * kv_heads * hd * 4);
        ch_h2d(v, hk, (size_t)S * kv_heads * hd * 4);
        weir_attn_batch b = {sizeof b, S, S, d_qsl, d_cl, d_bt, mbps, d_sl, 1, ctx,
                             qsl, cl, bt, sl};
        /* One un-recorded round sizes the plugin's scratch, then a graph of `calls` layers. */
        for (int l = 0; l < calls; l++) {
          weir_kv_view kv = {pool + (size_t)l * layer_bytes, bb, nblocks};
          CHECK(ATT->forward(P_attn.self, &shape, &b, &kv, q, k, v, o));
        }
        const uint64_t key = 0xA77E000000ull + (uint64_t)(di * 1000000 + bi * 1000 + ci);
        CHECK(DEV->graph_begin(DS, key));
        for (int l = 0; l < calls; l++) {
          weir_kv_view kv = {pool + (size_t)l * layer_bytes, bb, nblocks};
          CHECK(ATT->forward(P_attn.self, &shape, &b, &kv, q, k, v, o));
        }
        CHECK(DEV->graph_end(DS, key));
        CHECK(DEV->graph_launch(DS, key));
        CHECK(DEV->synchronize(DS));
        double t[256];
        const int R = reps < 256 ? reps : 256;
        for (int r = 0; r < R; r++) {
          double t0 = ch_now();
          CHECK(DEV->graph_launch(DS, key));
          CHECK(DEV->synchronize(DS));
          t[r] = ch_now() - t0;
        }
        qsort(t, (size_t)R, sizeof t[0], ch_cmp_double);
        const double per = t[R / 2] / calls;
        /* What one layer must read: each sequence's ctx rows of K and V for every KV head. */
        const double row = (double)hd * (dts[di] == WEIR_DTYPE_I8 ? 1 : 2) +
                           (dts[di] == WEIR_DTYPE_I8 ? 4 : 0);
        const double bytes = (double)S * ctx * kv_heads * 2 * row;
        const double gbs = bytes / per / 1e9;
        const char *name = dts[di] == WEIR_DTYPE_I8 ? "int8" : "f16";
        printf("%-5s %6d %6d %10.2f %10.1f %7.1f%%\n", name, S, ctx, per * 1e6, gbs,
               100.0 * bytes / per / bw);
        if (jf)
          fprintf(jf, "%s{\"kv\": \"%s\", \"batch\": %d, \"ctx\": %d, \"us_per_layer\": %.3f, "
                      "\"gbs\": %.1f, \"roofline\": %.4f}", first_row ? "" : ", ", name, S, ctx,
                  per * 1e6, gbs, bytes / per / bw);
        first_row = 0;
        DEV->graph_reset(DS);
        ch_dfree(q);
        ch_dfree(k);
        ch_dfree(v);
        ch_dfree(o);
        ch_dfree(d_qsl);
        ch_dfree(d_cl);
        ch_dfree(d_bt);
        ch_dfree(d_sl);
        ch_dfree(pool);
        free(hq);
        free(hk);
        free(qsl);
        free(cl);
        free(bt);
        free(sl);
      }
  if (jf) {
    fprintf(jf, "]}\n");
    fclose(jf);
  }
  ch_plugin_close(&P_attn);
  ch_device_close();
  return 0;
}
