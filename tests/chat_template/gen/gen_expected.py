#!/usr/bin/python3
"""Renders each family's Jinja chat template with Jinja2 (Debian's python3-jinja2, set up
the way Hugging Face transformers renders chat templates: trim_blocks, lstrip_blocks,
raise_exception) to produce the expected strings weir's built-in renderers must match.

Run from the repository root:  /usr/bin/python3 tests/chat_template/gen/gen_expected.py
Writes tests/chat_template/fixtures/templates.tsv (name, Jinja source: also used by the
detection test) and tests/chat_template/fixtures/expected.tsv (name, add_generation_prompt,
bos, eos, rendered text, then role/content pairs).

Gemma and Mistral templates have no system role; weir folds a system prompt into the first
user message ("system\\n\\nuser"), so the conversation is folded the same way before it is
handed to their Jinja templates.
"""
import os

import jinja2

OUT = "tests/chat_template/fixtures"

TEMPLATES = {
    "chatml": (
        "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
        "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
        "{{ '<|im_start|>assistant\\n' }}{% endif %}"
    ),
    "llama2": (
        "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
        "{% set system_message = messages[0]['content'] %}{% else %}"
        "{% set loop_messages = messages %}{% set system_message = false %}{% endif %}"
        "{% for message in loop_messages %}"
        "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
        "{% endif %}"
        "{% if loop.index0 == 0 and system_message != false %}"
        "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
        "{% else %}{% set content = message['content'] %}{% endif %}"
        "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
        "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}"
        "{% endif %}{% endfor %}"
    ),
    "llama3": (
        "{% set loop_messages = messages %}{% for message in loop_messages %}"
        "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
        "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
        "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
        "{% endif %}"
    ),
    "mistral": (
        "{{ bos_token }}{% for message in messages %}"
        "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
        "{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
        "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
        "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}"
        "{% endif %}{% endfor %}"
    ),
    "zephyr": (
        "{% for message in messages %}\n{% if message['role'] == 'user' %}\n"
        "{{ '<|user|>\\n' + message['content'] + eos_token }}\n"
        "{% elif message['role'] == 'system' %}\n"
        "{{ '<|system|>\\n' + message['content'] + eos_token }}\n"
        "{% elif message['role'] == 'assistant' %}\n"
        "{{ '<|assistant|>\\n'  + message['content'] + eos_token }}\n{% endif %}\n"
        "{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n"
        "{% endfor %}"
    ),
    "gemma": (
        "{{ bos_token }}{% if messages[0]['role'] == 'system' %}"
        "{{ raise_exception('System role not supported') }}{% endif %}"
        "{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
        "{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}"
        "{% else %}{% set role = message['role'] %}{% endif %}"
        "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}"
        "{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}"
    ),
    "phi3": (
        "{% for message in messages %}{% if message['role'] == 'system' %}"
        "{{'<|system|>\\n' + message['content'] + '<|end|>\\n'}}"
        "{% elif message['role'] == 'user' %}{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}"
        "{% elif message['role'] == 'assistant' %}"
        "{{'<|assistant|>\\n' + message['content'] + '<|end|>\\n'}}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}"
    ),
}

SPECIAL = {
    "chatml": ("<|endoftext|>", "<|im_end|>"),
    "llama2": ("<s>", "</s>"),
    "llama3": ("<|begin_of_text|>", "<|eot_id|>"),
    "mistral": ("<s>", "</s>"),
    "zephyr": ("<s>", "</s>"),
    "gemma": ("<bos>", "<eos>"),
    "phi3": ("<s>", "<|endoftext|>"),
}

CONVERSATIONS = [
    [("system", "You are terse."), ("user", "Hi there"), ("assistant", "Hello."),
     ("user", "What is 2+2?")],
    [("user", "  padded question \n"), ("assistant", " padded answer "), ("user", "next")],
    [("system", "Be kind.\n"), ("user", "\nHello\n")],
    [("user", "Only one turn, with unicode: héllo 世界 😀")],
]


def esc(s):
    return (s.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
            .replace("\r", "\\r"))


def fold_system(conv):
    if conv and conv[0][0] == "system" and len(conv) > 1:
        return [("user", conv[0][1] + "\n\n" + conv[1][1])] + conv[2:]
    return conv


def raise_exception(msg):
    raise jinja2.exceptions.TemplateError(msg)


def main():
    os.makedirs(OUT, exist_ok=True)
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    with open(os.path.join(OUT, "templates.tsv"), "w", encoding="utf-8") as f:
        f.write("# name\tJinja template  (generated by tests/chat_template/gen/gen_expected.py)\n")
        for name, src in TEMPLATES.items():
            f.write(f"{name}\t{esc(src)}\n")
    n = 0
    with open(os.path.join(OUT, "expected.tsv"), "w", encoding="utf-8") as f:
        f.write("# name\tgen\tbos\teos\trendered\trole\tcontent...  "
                "(rendered by Jinja2; generated by tests/chat_template/gen/gen_expected.py)\n")
        for name, src in TEMPLATES.items():
            tpl = env.from_string(src)
            bos, eos = SPECIAL[name]
            for conv in CONVERSATIONS:
                msgs = fold_system(conv) if name in ("gemma", "mistral") else conv
                for gen in (0, 1):
                    out = tpl.render(messages=[{"role": r, "content": c} for r, c in msgs],
                                     add_generation_prompt=bool(gen), bos_token=bos,
                                     eos_token=eos)
                    fields = [name, str(gen), esc(bos), esc(eos), esc(out)]
                    for r, c in conv:
                        fields += [r, esc(c)]
                    f.write("\t".join(fields) + "\n")
                    n += 1
    print(f"chat templates: {len(TEMPLATES)} templates, {n} renderings")


if __name__ == "__main__":
    main()
