#!/usr/bin/env python3
"""Renders chat templates with Jinja2 the way transformers does, for the C++ chat-template test.

Writes tests/data/tokenizer/chat_golden.json: {"templates": [{"name", "source", "cases":
[{"messages", "add_generation_prompt", "expected"}]}]}. (The real checkpoints' templates, rendered
by transformers itself, are in tests/data/chat_templates/: make_chat_template_golden.py.)
Needs: pip install jinja2. Run from the repository root.
"""
import json
import pathlib

import jinja2

OUT = pathlib.Path("tests/data/tokenizer/chat_golden.json")
QWEN_STYLE = json.loads(pathlib.Path("tests/data/tokenizer/qwen_style/tokenizer_config.json")
                        .read_text())["chat_template"]

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|im_start|>assistant\\n' }}{% endif %}")
# The same template laid out over several lines with whitespace control, as some checkpoints do.
CHATML_MULTILINE = """{%- for message in messages %}
    {{- "<|im_start|>" + message["role"] + "\\n" + message["content"] + "<|im_end|>" + "\\n" }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- "<|im_start|>assistant\\n" }}
{%- endif %}
"""
QWEN_CUSTOM_PROMPT = QWEN_STYLE.replace("You are a helpful assistant.",
                                        "You are Ridge, a \\'careful\\' assistant.")
# A different format, and ChatML variants whose output differs by a character.
LLAMA2 = ("{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
          "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% else %}"
          "{{ message['content'] + eos_token }}{% endif %}{% endfor %}")
CHATML_NO_NEWLINE = CHATML.replace("'<|im_end|>' + '\\n'", "'<|im_end|>'")
CHATML_TEXT_BETWEEN = CHATML.replace("{% endfor %}", "\n{% endfor %}").replace(
    "{% for message in messages %}", "{% for message in messages %} ")

CONVERSATIONS = [
    [],
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"},
     {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3?\nThanks."}],
    [{"role": "user", "content": "Unicode: héllo 世界 🤖, quotes ' \" and {{ braces }}"}],
    [{"role": "assistant", "content": ""}, {"role": "user", "content": "  spaced  "}],
]


def render(source, messages, add_generation_prompt):
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True,
                             extensions=["jinja2.ext.loopcontrols"])
    return env.from_string(source).render(messages=messages,
                                          add_generation_prompt=add_generation_prompt,
                                          bos_token="<s>", eos_token="</s>")


def main():
    templates = []
    for name, source in [
        ("chatml", CHATML),
        ("chatml_multiline", CHATML_MULTILINE),
        ("qwen_style", QWEN_STYLE),
        ("qwen_custom_prompt", QWEN_CUSTOM_PROMPT),
        ("llama2", LLAMA2),
        ("chatml_no_newline", CHATML_NO_NEWLINE),
        ("chatml_text_between", CHATML_TEXT_BETWEEN),
    ]:
        cases = []
        for messages in CONVERSATIONS:
            for agp in (False, True):
                cases.append({"messages": messages, "add_generation_prompt": agp,
                              "expected": render(source, messages, agp)})
        templates.append({"name": name, "source": source, "cases": cases})
    OUT.write_text(json.dumps({"templates": templates}, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
