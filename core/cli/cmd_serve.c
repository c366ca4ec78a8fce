/* weir serve: the OpenAI-compatible HTTP server (docs/http-api.md). */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "config/config.h"
#include "http/http.h"
#include "util/log.h"
#include "util/opt.h"

static void usage(FILE *f) {
  fputs("usage: weir serve [MODEL.gguf] [--config FILE] [--set KEY=VALUE ...] [flags]\n"
        "Serves the OpenAI-compatible API (/v1/completions, /v1/chat/completions, /v1/models,\n"
        "/tokenize, /detokenize, /health, /metrics, /version) until SIGINT or SIGTERM, then\n"
        "drains in-flight requests (server.drain_timeout_ms) and exits 0.\n"
        "\n"
        "  MODEL.gguf, -m, --model PATH   the model (model.path)\n"
        "  --config FILE                  TOML configuration (etc/server.toml documents every key)\n"
        "  --set KEY=VALUE                override one key, e.g. --set server.port=9000\n"
        "  --served-model-name NAME       the model's id (repeat to add aliases)\n"
        "  --max-model-len N, -c, --ctx-size N   longest prompt + output (model.max_model_len)\n"
        "  --api-key K                    require 'Authorization: Bearer K' (also env WEIR_API_KEY)\n"
        "  --host H  --port N  --device NAME  --threads N  --attention NAME  --quant NAME\n"
        "  --sampler NAME  --kv-dtype T  --log-level L  --log-format text|json\n"
        "  --max-num-seqs N  --max-num-batched-tokens N  --block-size N\n"
        "  --plugin-dir DIR               extra plugin search directory (repeatable)\n"
        "  --version                      print the version\n",
        f);
}

int weir__cmd_serve(int argc, char **argv) {
  weir_config cfg;
  weir_config_args flags = {0};
  weir_opt o;
  const struct option *tables[] = {weir_config_options};
  char err[512] = "";
  int code = 2, c, positional = 0;
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
    /* `weir serve MODEL.gguf`: the model as the one positional argument, applied in its
     * place among the flags. */
    if (c == WEIR_OPT_POSITIONAL && positional++ == 0) c = WEIR_CONFIG_FLAG_MODEL;
    else if (c == WEIR_OPT_POSITIONAL) {
      fprintf(stderr, "weir serve: unexpected argument '%s' (one model file only)\n\n", o.arg);
      usage(stderr);
      goto free_opt;
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
