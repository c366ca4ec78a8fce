/* Chat templates mkmodel writes into tokenizer.chat_template: one Jinja text per family,
 * each carrying the markers a detector keys on (<|im_start|>, [INST] with <<SYS>>,
 * <|start_header_id|>, [INST] alone, <|user|> with eos, <start_of_turn>, <|user|> with
 * <|end|>). Written for weir in the Jinja dialect Hugging Face templates use. */
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
    {"gemma",
     "{{- bos_token -}}\n"
     "{%- for message in messages -%}\n"
     "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}\n"
     "{{- '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' -}}\n"
     "{%- endfor -%}\n"
     "{%- if add_generation_prompt -%}{{- '<start_of_turn>model\\n' -}}{%- endif -%}",
     {"<start_of_turn>", "<end_of_turn>", NULL},
     NULL,
     "<end_of_turn>"},
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
