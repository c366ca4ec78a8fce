/* weir serve: the OpenAI-compatible HTTP server (docs/http-api.md). */
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "config/config.h"
#include "http/http.h"
#include "util/log.h"
#include "util/opt.h"

static void usage(FILE *f) {
  fputs("usage: weir serve [MODEL.gguf] [--config FILE] [--set KEY=VALUE ...] [flags]\n"
        "Serves the OpenAI-compatible API on http://127.0.0.1:8000 by default (--host 0.0.0.0\n"
        "to listen on every interface) until SIGINT or SIGTERM, then drains in-flight requests\n"
        "(server.drain_timeout_ms) and exits 0. Without a model it serves models/default.gguf.\n"
        "\n"
        "Endpoints (docs/http-api.md):\n"
        "  POST /v1/chat/completions  /v1/completions  /v1/responses  /v1/embeddings\n"
        "  GET  /v1/models  /v1/models/{id}\n"
        "  POST /tokenize  /detokenize\n"
        "  GET  /health (503 while loading or draining)  /metrics (Prometheus)  /version\n"
        "\n"
        "weir reads GGUF files only; a Hugging Face directory converts with llama.cpp's\n"
        "convert_hf_to_gguf.py (docs/models.md).\n"
        "\n"
        "  MODEL.gguf, -m, --model PATH   the model (model.path); give it once\n"
        "  --config FILE                  TOML configuration (etc/server.toml documents every key)\n"
        "  --set KEY=VALUE                override one key, e.g. --set server.port=9000\n"
        "  --served-model-name NAME...    the model's id; further names (in the same flag or\n"
        "                                 repeated) are aliases, all listed by /v1/models\n"
        "  --max-model-len N, -c, --ctx-size N   longest prompt + output (model.max_model_len);\n"
        "                                 beyond the trained context only with\n"
        "                                 --allow-long-max-model-len\n"
        "  --api-key K                    require 'Authorization: Bearer K' (also env WEIR_API_KEY)\n"
        "  --host H (127.0.0.1)  --port N (8000)\n"
        "  --device NAME  -t, --threads N  --attention NAME  --quant NAME  --sampler NAME\n"
        "  --kv-dtype T  --log-level L  --log-format text|json\n"
        "  --max-num-seqs N (-np N)  --max-num-batched-tokens N  --block-size N\n"
        "  --gpu-memory-utilization F     weights + KV cache take F of the device's memory\n"
        "  --enable-prefix-caching, --no-enable-prefix-caching\n"
        "  --chat-template NAME|FILE      a built-in template or a Jinja file\n"
        "  -ngl N                         0: the CPU device; every layer: the CUDA device\n"
        "  --plugin-dir DIR               extra plugin search directory (repeatable)\n"
        "  --version                      print the version\n"
        "Flags from vLLM and llama-server: docs/deployment.md, \"Migrating\".\n",
        f);
}

/* Whether a bare argument after --served-model-name is the model rather than another name:
 * a .gguf path, or a path that exists (a name such as "org/model" is not one; a Hugging Face
 * directory is, so that it gets its own message rather than becoming an alias). */
static int looks_like_model(const char *a) {
  size_t n = strlen(a);
  struct stat st;
  if (n >= 5 && !strcasecmp(a + n - 5, ".gguf")) return 1;
  return stat(a, &st) == 0;
}

int weir__cmd_serve(int argc, char **argv) {
  weir_config cfg;
  weir_config_args flags = {0};
  weir_opt o;
  const struct option *tables[] = {weir_config_options};
  char err[512] = "";
  int code = 2, c, positional = 0, in_names = 0;
  const char *model = NULL;
  weir_config_defaults(&cfg);
  if (weir_opt_init(&o, "weir serve", argc, argv, WEIR_CONFIG_SHORTOPTS, tables, 1) != 0) {
    fprintf(stderr, "weir serve: out of memory\n");
    goto free_config;
  }
  while ((c = weir_opt_next(&o)) != WEIR_OPT_END) {
    if (c == 'h') {
      usage(stdout);
      code = 0;
      goto free_opt;
    }
    if (c == WEIR_OPT_VERSION) {
      weir_opt_print_version();
      code = 0;
      goto free_opt;
    }
    if (c == WEIR_OPT_ERROR) {
      fprintf(stderr, "%s\n", o.err);
      goto free_opt;
    }
    /* vLLM's --served-model-name takes several names: the bare arguments right after it
     * are further names, unless one is plainly the model (looks_like_model). */
    if (c == WEIR_OPT_POSITIONAL && in_names && !looks_like_model(o.arg)) {
      c = WEIR_CONFIG_FLAG_SERVED_NAME;
    } else if (c == WEIR_OPT_POSITIONAL && positional++ == 0) {
      /* `weir serve MODEL.gguf`: the model as the one positional argument, applied in its
       * place among the flags. */
      c = WEIR_CONFIG_FLAG_MODEL;
    } else if (c == WEIR_OPT_POSITIONAL) {
      fprintf(stderr, "weir serve: unexpected argument '%s' (one model file only)\n\n", o.arg);
      usage(stderr);
      goto free_opt;
    }
    in_names = c == WEIR_CONFIG_FLAG_SERVED_NAME;
    /* The model given twice (positional and --model, or -m twice) is a conflict, not a
     * silent choice: say which two, unless they are the same path. */
    if (c == WEIR_CONFIG_FLAG_MODEL || c == 'm') {
      if (model && strcmp(model, o.arg) != 0) {
        fprintf(stderr, "weir serve: the model is given twice ('%s' and '%s'); give one "
                "model, as the positional argument or with --model\n", model, o.arg);
        goto free_opt;
      }
      model = o.arg;
    }
    int taken = weir_config_args_take(&flags, c, o.arg);
    if (taken < 0) {
      fprintf(stderr, "weir serve: out of memory\n");
      goto free_opt;
    }
  }
  if (weir_config_args_apply(&flags, &cfg, err, sizeof err) != 0) {
    fprintf(stderr, "weir serve: %s\n", err);
    goto free_opt;
  }
  weir_log_configure(cfg.log_level, cfg.log_format, NULL);
  code = weir_http_serve(&cfg);
free_opt:
  weir_opt_fini(&o);
free_config:
  weir_config_args_free(&flags);
  weir_config_free(&cfg);
  return code;
}
