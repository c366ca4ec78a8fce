/* Chat templates mkmodel writes into tokenizer.chat_template: one Jinja text per family,
 * each carrying the markers a detector keys on (<|im_start|>, [INST] with <<SYS>>,
 * <|start_header_id|>, [INST] alone, <|user|> with eos, <start_of_turn>, <|im_start|> with
 * <think>, <|user|> with <|end|>). Written for weir from each family's published prompt
 * format in the Jinja dialect Hugging Face templates use. */
#include <string.h>

#include "mkmodel/mkmodel.h"

static const weir__chat_template templates[] = {
    {"chatml",
     "{%- for message in messages -%}\n"
     "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] | trim + '<|im_end|>\\n' -}}\n"
     "{%- endfor -%}\n"
     "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}",
     {"<|im_start|>", "<|im_end|>", NULL},
     NULL,
     "<|im_end|>"},
    {"llama2",
     "{%- if messages[0]['role'] == 'system' -%}\n"
     "{%- set system = '<<SYS>>\\n' + messages[0]['content'] | trim + '\\n<</SYS>>\\n\\n' -%}\n"
     "{%- set turns = messages[1:] -%}\n"
     "{%- else -%}{%- set system = '' -%}{%- set turns = messages -%}{%- endif -%}\n"
     "{%- for message in turns -%}\n"
     "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}"
     "{{- raise_exception('Roles must alternate user/assistant/user/...') -}}{%- endif -%}\n"
     "{%- if message['role'] == 'user' -%}\n"
     "{%- set text = (system if loop.first else '') + message['content'] | trim -%}\n"
     "{{- bos_token + '[INST] ' + text + ' [/INST]' -}}\n"
     "{%- else -%}{{- ' ' + message['content'] | trim + ' ' + eos_token -}}{%- endif -%}\n"
     "{%- endfor -%}",
     {NULL},
     NULL,
     NULL},
    {"llama3",
     "{{- bos_token -}}\n"
     "{%- for message in messages -%}\n"
     "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' -}}\n"
     "{{- message['content'] | trim + '<|eot_id|>' -}}\n"
     "{%- endfor -%}\n"
     "{%- if add_generation_prompt -%}"
     "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}{%- endif -%}",
     {"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
      "<|eot_id|>", NULL},
     "<|begin_of_text|>",
     "<|eot_id|>"},
    {"mistral",
     "{{- bos_token -}}\n"
     "{%- for message in messages -%}\n"
     "{%- if message['role'] == 'user' -%}"
     "{{- '[INST] ' + message['content'] | trim + ' [/INST]' -}}\n"
     "{%- elif message['role'] == 'assistant' -%}{{- message['content'] | trim + eos_token -}}\n"
     "{%- else -%}{{- raise_exception('Only user and assistant roles are supported') -}}\n"
     "{%- endif -%}\n"
     "{%- endfor -%}",
     {NULL},
     NULL,
     NULL},
    {"zephyr",
     "{%- for message in messages -%}\n"
     "{%- if message['role'] == 'user' -%}{{- '<|user|>\\n' + message['content'] + eos_token + '\\n' -}}\n"
     "{%- elif message['role'] == 'system' -%}{{- '<|system|>\\n' + message['content'] + eos_token + '\\n' -}}\n"
     "{%- elif message['role'] == 'assistant' -%}{{- '<|assistant|>\\n' + message['content'] + eos_token + '\\n' -}}\n"
     "{%- endif -%}\n"
     "{%- if loop.last and add_generation_prompt -%}{{- '<|assistant|>\\n' -}}{%- endif -%}\n"
     "{%- endfor -%}",
     {NULL},
     NULL,
     NULL},
    /* Gemma has no system role: a system message's text opens the first user turn. */
    {"gemma",
     "{{- bos_token -}}\n"
     "{%- if messages and messages[0]['role'] == 'system' -%}\n"
     "{%- set first = messages[0]['content'] | trim + '\\n\\n' -%}{%- set turns = messages[1:] -%}\n"
     "{%- else -%}{%- set first = '' -%}{%- set turns = messages -%}{%- endif -%}\n"
     "{%- for message in turns -%}\n"
     "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}"
     "{{- raise_exception('Conversation roles must alternate user/assistant/user/...') -}}{%- endif -%}\n"
     "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}\n"
     "{{- '<start_of_turn>' + role + '\\n' + (first if loop.first else '') + message['content'] | trim + '<end_of_turn>\\n' -}}\n"
     "{%- endfor -%}\n"
     "{%- if add_generation_prompt -%}{{- '<start_of_turn>model\\n' -}}{%- endif -%}",
     {"<start_of_turn>", "<end_of_turn>", NULL},
     NULL,
     "<end_of_turn>"},
    /* Qwen3: ChatML with a reasoning block. An assistant turn after the last user message
     * keeps its reasoning (`reasoning_content`, or a <think>...</think> part of its content)
     * as <think>\n...\n</think>\n\n before the answer; earlier turns lose it. The
     * generation prompt opens the assistant turn; with enable_thinking false it also writes
     * an empty reasoning block, which tells the model to answer at once. Tools go in the
     * system turn as <tools> JSON lines, calls as <tool_call> JSON, results as a user turn of
     * <tool_response> blocks. */
    {"qwen3",
     "{%- if tools -%}\n"
     "{{- '<|im_start|>system\\n' -}}\n"
     "{%- if messages[0]['role'] == 'system' -%}{{- messages[0]['content'] + '\\n\\n' -}}{%- endif -%}\n"
     "{{- '# Tools\\n\\nYou may call one or more functions. Their signatures are in <tools></tools>:\\n<tools>' -}}\n"
     "{%- for tool in tools -%}{{- '\\n' + tool | tojson -}}{%- endfor -%}\n"
     "{{- '\\n</tools>\\n\\nFor each call, return a JSON object with the function name and arguments '"
     " + 'inside <tool_call></tool_call>:\\n<tool_call>\\n{\"name\": <name>, \"arguments\": <args>}\\n</tool_call><|im_end|>\\n' -}}\n"
     "{%- elif messages and messages[0]['role'] == 'system' -%}\n"
     "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' -}}\n"
     "{%- endif -%}\n"
     "{%- set ns = namespace(last_user=-1) -%}\n"
     "{%- for m in messages -%}{%- if m['role'] == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}{%- endfor -%}\n"
     "{%- for m in messages -%}\n"
     "{%- set text = m['content'] if m['content'] is string else '' -%}\n"
     "{%- if m['role'] == 'system' and loop.first -%}\n"
     "{%- elif m['role'] == 'assistant' -%}\n"
     "{%- set thought = m['reasoning_content'] if m['reasoning_content'] is string else '' -%}\n"
     "{%- if '</think>' in text -%}\n"
     "{%- set thought = text.split('</think>')[0].split('<think>')[-1] -%}\n"
     "{%- set text = text.split('</think>')[-1] -%}\n"
     "{%- endif -%}\n"
     "{{- '<|im_start|>assistant\\n' -}}\n"
     "{%- if loop.index0 > ns.last_user and thought | trim -%}{{- '<think>\\n' + thought | trim + '\\n</think>\\n\\n' -}}{%- endif -%}\n"
     "{{- text | trim -}}\n"
     "{%- for call in m['tool_calls'] or [] -%}\n"
     "{%- set f = call['function'] if call['function'] is defined else call -%}\n"
     "{{- ('\\n' if text or not loop.first else '') + '<tool_call>\\n{\"name\": \"' + f['name'] + '\", \"arguments\": ' -}}\n"
     "{{- (f['arguments'] if f['arguments'] is string else f['arguments'] | tojson) + '}\\n</tool_call>' -}}\n"
     "{%- endfor -%}\n"
     "{{- '<|im_end|>\\n' -}}\n"
     "{%- elif m['role'] == 'tool' -%}\n"
     "{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}\n"
     "{{- '\\n<tool_response>\\n' + text + '\\n</tool_response>' -}}\n"
     "{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' -%}{{- '<|im_end|>\\n' -}}{%- endif -%}\n"
     "{%- else -%}\n"
     "{{- '<|im_start|>' + m['role'] + '\\n' + text + '<|im_end|>\\n' -}}\n"
     "{%- endif -%}\n"
     "{%- endfor -%}\n"
     "{%- if add_generation_prompt -%}\n"
     "{{- '<|im_start|>assistant\\n' -}}\n"
     "{%- if enable_thinking is defined and not enable_thinking -%}{{- '<think>\\n\\n</think>\\n\\n' -}}{%- endif -%}\n"
     "{%- endif -%}",
     {"<|im_start|>", "<|im_end|>", "<think>", "</think>", NULL},
     NULL,
     "<|im_end|>",
     {"<think>", "</think>", NULL}},
    {"phi3",
     "{%- for message in messages -%}\n"
     "{%- if message['role'] in ['system', 'user', 'assistant'] -%}"
     "{{- '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' -}}{%- endif -%}\n"
     "{%- endfor -%}\n"
     "{%- if add_generation_prompt -%}{{- '<|assistant|>\\n' -}}{%- else -%}{{- eos_token -}}{%- endif -%}",
     {"<|system|>", "<|user|>", "<|assistant|>", "<|end|>", NULL},
     NULL,
     "<|end|>"},
    {"none", NULL, {NULL}, NULL, NULL},
};

const weir__chat_template *weir__chat_template_find(const char *name) {
  for (size_t i = 0; i < sizeof templates / sizeof templates[0]; i++)
    if (strcmp(templates[i].name, name) == 0) return &templates[i];
  return NULL;
}
