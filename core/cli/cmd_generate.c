/* weir generate: one prompt through the real engine (plugins, paged KV cache, scheduler),
 * text printed as it is produced, then a line of throughput figures. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "config/config.h"
#include "engine/engine.h"
#include "util/log.h"

typedef struct gen_state {
  pthread_mutex_t lock;
  pthread_cond_t done_cond;
  int done;
  int echo_text;
  weir_gen_event final; /* copied scalars of the final event */
  char error[256];
} gen_state;

/* Runs on the engine thread: print at once so the text streams. */
static void on_event(void *user, const weir_gen_event *ev) {
  gen_state *st = user;
  if (st->echo_text && ev->text_len) {
    fwrite(ev->text, 1, ev->text_len, stdout);
    fflush(stdout);
  }
  if (ev->finish == WEIR_FINISH_NONE) return;
  pthread_mutex_lock(&st->lock);
  st->final = *ev;
  st->final.text = NULL;
  st->final.tokens = NULL;
  st->final.logprobs = NULL;
  st->final.error = NULL;
  if (ev->error) snprintf(st->error, sizeof st->error, "%s", ev->error);
  st->done = 1;
  pthread_cond_signal(&st->done_cond);
  pthread_mutex_unlock(&st->lock);
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: weir generate [--config FILE] [config overrides] --prompt TEXT [options]\n"
          "  --prompt TEXT            the prompt (or --prompt-file FILE)\n"
          "  --random-prompt N        N seeded random token ids as the prompt (benchmarks)\n"
          "  --chat                   render the prompt as one user message with the chat template\n"
          "  --system TEXT            with --chat: a system message\n"
          "  -n, --max-tokens N       tokens to generate (default 128)\n"
          "  --temperature T          0 = greedy (default 0)\n"
          "  --top-k K, --top-p P, --min-p P\n"
          "  --repetition-penalty R, --presence-penalty P, --frequency-penalty F\n"
          "  --seed S                 seed for sampling (default 0)\n"
          "  --ignore-eos             keep generating past the end-of-sequence token\n"
          "  --quiet                  print only the figures\n"
          "Config overrides: --model PATH, --device NAME, --threads N, --attention NAME,\n"
          "--quant NAME, --kv-dtype T, --set section.key=value (see docs/configuration.md).\n");
}

int weir__cmd_generate(int argc, char **argv) {
  weir_config cfg;
  weir_config_defaults(&cfg);
  char err[1024] = "";
  int ret = 2;
  char *prompt = NULL, *system = NULL, *rendered = NULL;
  int32_t *ids = NULL;
  weir_engine *eng = NULL;
  int chat = 0, quiet = 0;
  int32_t random_prompt = 0;
  weir_gen_request req = {0};
  req.max_tokens = 128;
  req.sampling = (weir_sampling_params){.struct_size = sizeof req.sampling,
                                        .temperature = 0,
                                        .top_k = 0,
                                        .top_p = 1,
                                        .min_p = 0,
                                        .repetition_penalty = 1,
                                        .num_logprobs = -1};
  req.has_seed = 1;

  if (weir_config_from_args(&argc, argv, &cfg, err, sizeof err) != 0) {
    fprintf(stderr, "weir generate: %s\n", err);
    goto out;
  }
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEEDV()                                                           \
  do {                                                                    \
    if (!v) {                                                             \
      fprintf(stderr, "weir generate: %s needs a value\n", a);            \
      goto out;                                                           \
    }                                                                     \
    i++;                                                                  \
  } while (0)
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      ret = 0;
      goto out;
    } else if (!strcmp(a, "--prompt")) {
      NEEDV();
      free(prompt);
      prompt = strdup(v);
    } else if (!strcmp(a, "--prompt-file")) {
      NEEDV();
      free(prompt);
      prompt = weir__read_file(v, NULL);
      if (!prompt) {
        fprintf(stderr, "weir generate: cannot read %s\n", v);
        goto out;
      }
    } else if (!strcmp(a, "--random-prompt")) {
      NEEDV();
      random_prompt = atoi(v);
      if (random_prompt <= 0) {
        fprintf(stderr, "weir generate: --random-prompt needs a positive count\n");
        goto out;
      }
    } else if (!strcmp(a, "--system")) {
      NEEDV();
      free(system);
      system = strdup(v);
    } else if (!strcmp(a, "--chat")) {
      chat = 1;
    } else if (!strcmp(a, "--quiet")) {
      quiet = 1;
    } else if (!strcmp(a, "--ignore-eos")) {
      req.ignore_eos = 1;
    } else if (!strcmp(a, "-n") || !strcmp(a, "--max-tokens")) {
      NEEDV();
      req.max_tokens = atoi(v);
    } else if (!strcmp(a, "--temperature")) {
      NEEDV();
      req.sampling.temperature = strtof(v, NULL);
    } else if (!strcmp(a, "--top-k")) {
      NEEDV();
      req.sampling.top_k = atoi(v);
    } else if (!strcmp(a, "--top-p")) {
      NEEDV();
      req.sampling.top_p = strtof(v, NULL);
    } else if (!strcmp(a, "--min-p")) {
      NEEDV();
      req.sampling.min_p = strtof(v, NULL);
    } else if (!strcmp(a, "--repetition-penalty")) {
      NEEDV();
      req.sampling.repetition_penalty = strtof(v, NULL);
    } else if (!strcmp(a, "--presence-penalty")) {
      NEEDV();
      req.sampling.presence_penalty = strtof(v, NULL);
    } else if (!strcmp(a, "--frequency-penalty")) {
      NEEDV();
      req.sampling.frequency_penalty = strtof(v, NULL);
    } else if (!strcmp(a, "--seed")) {
      NEEDV();
      req.seed = strtoull(v, NULL, 10);
    } else {
      fprintf(stderr, "weir generate: unknown option '%s'\n\n", a);
      usage(stderr);
      goto out;
    }
#undef NEEDV
  }
  if (!prompt && !random_prompt) {
    fprintf(stderr, "weir generate: --prompt or --random-prompt is required\n\n");
    usage(stderr);
    goto out;
  }
  if (req.max_tokens <= 0) {
    fprintf(stderr, "weir generate: --max-tokens must be at least 1\n");
    goto out;
  }
  weir_log_configure(cfg.log_level, cfg.log_format, NULL);

  ret = 1;
  if (weir_engine_create(&cfg, &eng) != 0) goto out;
  weir_engine_info info;
  weir_engine_info_get(eng, &info);
  int32_t n_ids = 0;
  if (random_prompt) {
    /* Ids drawn from the ordinary part of the vocabulary (past the first 259: control and
     * byte tokens in llama-style vocabularies), seeded so runs compare. */
    ids = malloc(sizeof(int32_t) * (size_t)random_prompt);
    if (!ids) goto out;
    uint64_t x = req.seed * 0x9e3779b97f4a7c15ull + 1;
    int32_t lo = info.vocab_size > 512 ? 259 : 3;
    for (int32_t i = 0; i < random_prompt; i++) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      ids[i] = lo + (int32_t)(x % (uint64_t)(info.vocab_size - lo));
    }
    n_ids = random_prompt;
  }
  const char *text = prompt;
  if (random_prompt) {
    /* nothing to render or tokenize */
  } else if (chat) {
    weir_chat_message msgs[2];
    int n = 0;
    if (system) msgs[n++] = (weir_chat_message){"system", system};
    msgs[n++] = (weir_chat_message){"user", prompt};
    if (weir_engine_render_chat(eng, msgs, n, 1, &rendered) != 0) {
      fprintf(stderr, "weir generate: could not render the chat template\n");
      goto out;
    }
    text = rendered;
  }
  if (!random_prompt &&
      (weir_engine_tokenize(eng, text, strlen(text), 1, &ids, &n_ids) != 0 || n_ids == 0)) {
    fprintf(stderr, "weir generate: could not tokenize the prompt\n");
    goto out;
  }
  if (n_ids + req.max_tokens > info.context_length) {
    req.max_tokens = info.context_length - n_ids;
    if (req.max_tokens <= 0) {
      fprintf(stderr, "weir generate: the prompt (%d tokens) fills the context (%d)\n", n_ids,
              info.context_length);
      goto out;
    }
  }
  req.prompt = ids;
  req.num_prompt = n_ids;

  gen_state st = {.echo_text = !quiet};
  pthread_mutex_init(&st.lock, NULL);
  pthread_cond_init(&st.done_cond, NULL);
  uint64_t id;
  int rc = weir_engine_submit(eng, &req, on_event, &st, &id);
  if (rc != 0) {
    fprintf(stderr, "weir generate: the engine refused the request: %s\n", weir_strerror(rc));
  } else {
    pthread_mutex_lock(&st.lock);
    while (!st.done) pthread_cond_wait(&st.done_cond, &st.lock);
    pthread_mutex_unlock(&st.lock);
    const weir_gen_event *f = &st.final;
    if (!quiet) printf("\n");
    if (f->finish == WEIR_FINISH_ERROR) {
      fprintf(stderr, "weir generate: %s\n", st.error[0] ? st.error : weir_strerror(f->status));
    } else {
      double pp = f->timing.prefill_s > 0 ? f->prompt_tokens / f->timing.prefill_s : 0;
      double tg = f->completion_tokens > 1 && f->timing.decode_s > 0
                      ? (f->completion_tokens - 1) / f->timing.decode_s
                      : 0;
      printf("prompt: %d tokens in %.3f s (%.2f tokens/s); generated: %d tokens in %.3f s "
             "(%.2f tokens/s); finish: %s\n",
             f->prompt_tokens, f->timing.prefill_s, pp, f->completion_tokens,
             f->timing.decode_s, tg, weir_finish_reason_name(f->finish));
      ret = 0;
    }
  }
  pthread_mutex_destroy(&st.lock);
  pthread_cond_destroy(&st.done_cond);

out:
  weir_engine_destroy(eng);
  free(ids);
  free(rendered);
  free(prompt);
  free(system);
  weir_config_free(&cfg);
  return ret;
}
