/* weir generate: one prompt through the real engine (plugins, paged KV cache, scheduler),
 * text printed as it is produced, then a line of throughput figures. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "util/buf.h"
#include "config/config.h"
#include "engine/engine.h"
#include "util/log.h"
#include "util/opt.h"

typedef struct gen_state {
  pthread_mutex_t lock;
  pthread_cond_t done_cond;
  int done;
  int echo_text;
  weir_gen_event final; /* copied scalars of the final event */
  char error[256];
  /* Process CPU seconds at submission, at the first token (prefill done) and at the end: on
   * a machine shared with other jobs these move less than wall time (benchmarks). */
  double cpu_submit, cpu_first, cpu_end;
} gen_state;

static double cpu_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Runs on the engine thread: print at once so the text streams. */
static void on_event(void *user, const weir_gen_event *ev) {
  gen_state *st = user;
  if (st->cpu_first == 0 && ev->num_tokens > 0) st->cpu_first = cpu_seconds();
  if (st->echo_text && ev->text_len) {
    fwrite(ev->text, 1, ev->text_len, stdout);
    fflush(stdout);
  }
  if (ev->finish == WEIR_FINISH_NONE) return;
  double now = cpu_seconds();
  pthread_mutex_lock(&st->lock);
  if (st->cpu_first == 0) st->cpu_first = now;
  st->cpu_end = now;
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
          "  --version                print the version\n"
          "Configuration: --config FILE, -m/--model PATH, --device NAME, --threads N,\n"
          "--attention NAME, --quant NAME, --kv-dtype T, --max-model-len N, --set KEY=VALUE and\n"
          "the other flags of `weir serve` (see docs/configuration.md).\n");
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

  enum {
    G_PROMPT = 0x100, G_PROMPT_FILE, G_RANDOM, G_SYSTEM, G_CHAT, G_QUIET, G_IGNORE_EOS,
    G_MAX_TOKENS, G_TEMP, G_TOP_K, G_TOP_P, G_MIN_P, G_REP, G_PRES, G_FREQ, G_SEED
  };
  static const struct option k_opts[] = {
      {"prompt", required_argument, 0, G_PROMPT},
      {"prompt-file", required_argument, 0, G_PROMPT_FILE},
      {"random-prompt", required_argument, 0, G_RANDOM},
      {"system", required_argument, 0, G_SYSTEM},
      {"chat", no_argument, 0, G_CHAT},
      {"quiet", no_argument, 0, G_QUIET},
      {"ignore-eos", no_argument, 0, G_IGNORE_EOS},
      {"max-tokens", required_argument, 0, G_MAX_TOKENS},
      {"temperature", required_argument, 0, G_TEMP},
      {"top-k", required_argument, 0, G_TOP_K},
      {"top-p", required_argument, 0, G_TOP_P},
      {"min-p", required_argument, 0, G_MIN_P},
      {"repetition-penalty", required_argument, 0, G_REP},
      {"presence-penalty", required_argument, 0, G_PRES},
      {"frequency-penalty", required_argument, 0, G_FREQ},
      {"seed", required_argument, 0, G_SEED},
      {0, 0, 0, 0},
  };
  const struct option *tables[] = {k_opts, weir_config_options};
  weir_config_args flags = {0};
  weir_opt o;
  if (weir_opt_init(&o, "weir generate", argc, argv, "n:" WEIR_CONFIG_SHORTOPTS, tables, 2) != 0) {
    fprintf(stderr, "weir generate: out of memory\n");
    goto out;
  }
  int c, bad = 0;
  while (!bad && (c = weir_opt_next(&o)) != WEIR_OPT_END) {
    int64_t iv = 0;
    double dv = 0;
    switch (c) {
    case 'h':
      usage(stdout);
      ret = 0;
      bad = 1;
      break;
    case WEIR_OPT_VERSION:
      weir_opt_print_version();
      ret = 0;
      bad = 1;
      break;
    case G_PROMPT:
      free(prompt);
      prompt = strdup(o.arg);
      break;
    case G_PROMPT_FILE:
      free(prompt);
      if (!(prompt = weir_read_file(o.arg, NULL))) {
        snprintf(o.err, sizeof o.err, "weir generate: cannot read %s", o.arg);
        bad = 2;
      }
      break;
    case G_RANDOM:
      if (weir_opt_int(&o, 1, 1 << 24, &iv)) bad = 2;
      random_prompt = (int32_t)iv;
      break;
    case G_SYSTEM:
      free(system);
      system = strdup(o.arg);
      break;
    case G_CHAT: chat = 1; break;
    case G_QUIET: quiet = 1; break;
    case G_IGNORE_EOS: req.ignore_eos = 1; break;
    case 'n':
    case G_MAX_TOKENS:
      if (weir_opt_int(&o, 1, 1 << 24, &iv)) bad = 2;
      req.max_tokens = (int32_t)iv;
      break;
    case G_TEMP:
      if (weir_opt_double(&o, 0, 100, &dv)) bad = 2;
      req.sampling.temperature = (float)dv;
      break;
    case G_TOP_K:
      if (weir_opt_int(&o, 0, 1 << 24, &iv)) bad = 2;
      req.sampling.top_k = (int32_t)iv;
      break;
    case G_TOP_P:
      if (weir_opt_double(&o, 1e-9, 1, &dv)) bad = 2;
      req.sampling.top_p = (float)dv;
      break;
    case G_MIN_P:
      if (weir_opt_double(&o, 0, 1, &dv)) bad = 2;
      req.sampling.min_p = (float)dv;
      break;
    case G_REP:
      if (weir_opt_double(&o, 1e-6, 100, &dv)) bad = 2;
      req.sampling.repetition_penalty = (float)dv;
      break;
    case G_PRES:
      if (weir_opt_double(&o, -2, 2, &dv)) bad = 2;
      req.sampling.presence_penalty = (float)dv;
      break;
    case G_FREQ:
      if (weir_opt_double(&o, -2, 2, &dv)) bad = 2;
      req.sampling.frequency_penalty = (float)dv;
      break;
    case G_SEED:
      if (weir_opt_int(&o, 0, INT64_MAX, &iv)) bad = 2;
      req.seed = (uint64_t)iv;
      break;
    case WEIR_OPT_POSITIONAL:
      snprintf(o.err, sizeof o.err, "weir generate: unexpected argument '%s'", o.arg);
      bad = 2;
      break;
    case WEIR_OPT_ERROR: bad = 2; break;
    default:
      if (weir_config_args_take(&flags, c, o.arg) <= 0) {
        snprintf(o.err, sizeof o.err, "weir generate: out of memory");
        bad = 2;
      }
    }
  }
  if (bad == 2) fprintf(stderr, "%s\n", o.err);
  weir_opt_fini(&o);
  if (bad) {
    weir_config_args_free(&flags);
    goto out;
  }
  int arc = weir_config_args_apply(&flags, &cfg, err, sizeof err);
  weir_config_args_free(&flags);
  if (arc != 0) {
    fprintf(stderr, "weir generate: %s\n", err);
    goto out;
  }
  if (!prompt && !random_prompt) {
    fprintf(stderr, "weir generate: --prompt or --random-prompt is required\n\n");
    usage(stderr);
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
  st.cpu_submit = cpu_seconds();
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
      /* The process CPU time of each phase ends the line: on a machine shared with other
       * jobs it moves less than wall time (docs/benchmarking.md). */
      printf("prompt: %d tokens in %.3f s (%.2f tokens/s); generated: %d tokens in %.3f s "
             "(%.2f tokens/s); finish: %s; cpu: prefill %.3f s, decode %.3f s\n",
             f->prompt_tokens, f->timing.prefill_s, pp, f->completion_tokens,
             f->timing.decode_s, tg, weir_finish_reason_name(f->finish),
             st.cpu_first - st.cpu_submit, st.cpu_end - st.cpu_first);
      weir_engine_stats es;
      weir_engine_stats_get(eng, &es);
      if (es.spec_draft_tokens > 0)
        printf("speculative: %llu tokens drafted, %llu accepted (%.3f)\n",
               (unsigned long long)es.spec_draft_tokens,
               (unsigned long long)es.spec_accepted_tokens,
               (double)es.spec_accepted_tokens / (double)es.spec_draft_tokens);
      /* The draft model's own work, which a step that drafts nothing does not run. */
      if (es.spec_draft_passes > 0)
        printf("draft model: %llu forward passes over %llu tokens\n",
               (unsigned long long)es.spec_draft_passes,
               (unsigned long long)es.spec_draft_model_tokens);
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
