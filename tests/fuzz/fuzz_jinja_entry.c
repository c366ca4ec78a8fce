/* The Jinja fuzzing entry (fuzz_jinja_entry.h). */
#include "fuzz_jinja_entry.h"

#include <stdlib.h>
#include <string.h>

#include "template/jinja.h"
#include "weir/status.h"

static const char k_context[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
    " {\"role\": \"user\", \"content\": \"Weather in Paris? \\u00e9\\u65e5 \\ud83c\\udf0d\"},"
    " {\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"id\": \"a1B2c3D4e\","
    " \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\":"
    " {\"city\": \"Paris\", \"days\": 2, \"ratio\": 0.5}}}]},"
    " {\"role\": \"tool\", \"tool_call_id\": \"a1B2c3D4e\", \"content\": \"18 C\"},"
    " {\"role\": \"assistant\", \"content\": \"<think>\\nok\\n</think>\\n\\nIt is 18 C.\"}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\","
    " \"description\": \"Weather.\", \"parameters\": {\"type\": \"object\", \"properties\":"
    " {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\", \"enum\": [1, 2]}},"
    " \"required\": [\"city\"]}}}],"
    " \"documents\": null, \"add_generation_prompt\": true, \"bos_token\": \"<s>\","
    " \"eos_token\": \"</s>\", \"enable_thinking\": false}";

static weir_jinja_ctx *g_ctx;

int weir_fuzz_jinja(const uint8_t *data, size_t size) {
  if (!g_ctx) {
    if (weir_jinja_ctx_new(&g_ctx) ||
        weir_jinja_ctx_update_json(g_ctx, k_context, sizeof k_context - 1, NULL, 0))
      abort();
  }
  weir_jinja_template *t = NULL;
  weir_jinja_error err;
  int rc = weir_jinja_parse((const char *)data, size, &t, &err);
  if (rc) {
    if (rc == WEIR_E_NOMEM) return 0;
    return rc == WEIR_E_FORMAT && err.msg[0] && t == NULL ? 0 : -1;
  }
  weir_jinja_limits lim;
  weir_jinja_limits_default(&lim);
  /* Tight budgets keep each run short (the templates of tests/jinja render this
   * conversation in a few thousand steps); the budgets' own code paths still run. */
  lim.max_steps = 10000;
  lim.max_output = 1 << 14;
  lim.max_memory = 8u << 20;
  lim.max_depth = 100;
  lim.now = 1741944413;
  char *out = NULL;
  size_t len = 0;
  rc = weir_jinja_render(t, g_ctx, &lim, &out, &len, &err);
  weir_jinja_template_free(t);
  if (rc == 0) {
    /* the text may hold NUL bytes (the template's own); it is terminated after len */
    int ok = out && out[len] == '\0' && len <= lim.max_output;
    free(out);
    return ok ? 2 : -1;
  }
  if (out) return -1;
  if (rc != WEIR_E_INVAL && rc != WEIR_E_RANGE && rc != WEIR_E_NOMEM) return -1;
  return err.msg[0] || err.raised ? 1 : -1;
}
