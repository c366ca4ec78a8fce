/* weir serve: the OpenAI-compatible HTTP server (docs/http-api.md). */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "config/config.h"
#include "http/http.h"
#include "util/log.h"

static void usage(FILE *f) {
  fputs("usage: weir serve [--config FILE] [--set KEY=VALUE ...] [flags]\n"
        "Serves the OpenAI-compatible API (/v1/completions, /v1/chat/completions, /v1/models,\n"
        "/tokenize, /detokenize, /health, /metrics, /version) until SIGINT or SIGTERM, then\n"
        "drains in-flight requests (server.drain_timeout_ms) and exits 0.\n"
        "\n"
        "  --config FILE     TOML configuration (etc/server.toml documents every key)\n"
        "  --set KEY=VALUE   override one key, e.g. --set server.port=9000 (repeatable)\n"
        "  --host H  --port N  --model PATH  --device NAME  --threads N  --attention NAME\n"
        "  --quant NAME  --sampler NAME  --kv-dtype T  --log-level L  --log-format text|json\n"
        "  --api-key K       require 'Authorization: Bearer K' (also env WEIR_API_KEY)\n"
        "  --plugin-dir DIR  extra plugin search directory (repeatable)\n",
        f);
}

int weir__cmd_serve(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout);
      return 0;
    }
  weir_config cfg;
  weir_config_defaults(&cfg);
  char err[512] = "";
  int code = 2;
  if (weir_config_from_args(&argc, argv, &cfg, err, sizeof err) != 0) {
    fprintf(stderr, "weir serve: %s\n", err);
    goto free_config;
  }
  if (argc > 1) {
    fprintf(stderr, "weir serve: unexpected argument '%s'\n\n", argv[1]);
    usage(stderr);
    goto free_config;
  }
  weir_log_configure(cfg.log_level, cfg.log_format, NULL);
  code = weir_http_serve(&cfg);
free_config:
  weir_config_free(&cfg);
  return code;
}
