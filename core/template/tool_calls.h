/* Tool calls in generated text: finding them in what a model wrote, in the formats chat
 * templates teach (docs/http-api.md, "Tool calling"), and deciding how much of a stream may
 * be sent as plain content before a call could begin.
 *
 *   Hermes / Qwen     <tool_call>{"name": ..., "arguments": {...}}</tool_call>, repeated
 *   Mistral           [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]
 *   Llama 3.x         <|python_tag|>{"name": ..., "parameters": {...}} (";" between calls),
 *                     or the same JSON as the whole reply
 *   forced (required) [{"name": ..., "parameters": {...}}, ...]: what the server's constraint
 *                     for tool_choice "required" produces
 *   forced (named)    the arguments object alone: tool_choice naming one function
 *
 * Pure functions over bytes: no server state, thread-safe. Text that does not parse as a
 * call stays content (a model that writes a malformed call gets its text back, not an
 * error). */
#ifndef WEIR_TEMPLATE_TOOL_CALLS_H
#define WEIR_TEMPLATE_TOOL_CALLS_H

#include <stddef.h>

typedef enum weir_tool_mode {
  WEIR_TOOLS_OFF = 0,  /* no tools, or tool_choice "none": the text is content */
  WEIR_TOOLS_AUTO,     /* the model may call: look for the formats above */
  WEIR_TOOLS_REQUIRED, /* the output is the forced array */
  WEIR_TOOLS_NAMED,    /* the output is the named function's arguments */
} weir_tool_mode;

typedef struct weir_tool_call {
  char *name;      /* malloc'd */
  char *arguments; /* malloc'd JSON text, as OpenAI's `function.arguments` string */
} weir_tool_call;

typedef struct weir_tool_output {
  char *content;         /* malloc'd text outside the calls, trimmed; "" when none */
  weir_tool_call *calls; /* malloc'd [num_calls] */
  int num_calls;
  /* The reply ended inside a call (cut by max_tokens, a stop string, a timeout); that call
   * was dropped, the complete ones before it are in calls. Forced modes; in AUTO mode a
   * Hermes reply cut inside a call after whole ones. */
  int dropped_partial;
} weir_tool_output;

/* At most this many calls are taken from one reply; more stay content. */
#define WEIR_MAX_TOOL_CALLS 64

/* Parses a finished reply. `named` is the function's name in WEIR_TOOLS_NAMED mode (else
 * unused). On success out owns its strings (weir_tool_output_free). In the OFF and AUTO
 * modes num_calls 0 means the whole text is content. In the forced modes (REQUIRED, NAMED)
 * the reply is never content: out holds the complete calls (possibly none) and content "";
 * a call the reply was cut inside is dropped (dropped_partial), so a client never receives
 * arguments that are not a whole JSON value. WEIR_E_NOMEM. */
int weir_tool_parse(const char *text, size_t len, weir_tool_mode mode, const char *named,
                     weir_tool_output *out);
void weir_tool_output_free(weir_tool_output *o);

/* Streaming in WEIR_TOOLS_AUTO mode: how many leading bytes of the reply so far (text, len)
 * can be sent as content now, given that `from` bytes were sent before (markers are looked
 * for from there on, so a stream costs time linear in its length). That is everything
 * before the first call marker, less a tail that could be the start of one; a reply whose
 * first non-blank character is '{' is held whole (it may be a Llama 3 JSON call). *in_call
 * is set once a marker has been seen (nothing after it is content). */
size_t weir_tool_stream_safe(const char *text, size_t len, size_t from, int *in_call);

#endif
