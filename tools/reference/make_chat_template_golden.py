#!/usr/bin/env python3
"""Renders real chat templates with transformers' apply_chat_template, for the C++ Jinja test.

Writes tests/data/chat_templates/golden.json: {"transformers": version, "templates": [{"name",
"file", "special_tokens": {...}, "cases": [{"name", "messages", "tools", "add_generation_prompt",
"continue_final_message", "kwargs", and "expected" (the rendered text) or "error" (the message
transformers raised)}]}], "strftime_now_at": the Unix time templates' strftime_now reads}. That
clock is pinned (transformers reads datetime.now(); here it is NOW_AT, as local time) so that a
template printing today's date renders the same on any day; the C++ test passes the same time. The C++ test (tests/tokenizer/chat_template_golden_test.cc) must give
the same bytes for every case, and an error for every case that fails here.

Needs: python3 -m venv /tmp/refvenv && /tmp/refvenv/bin/pip install transformers jinja2
Run from the repository root: /tmp/refvenv/bin/python tools/reference/make_chat_template_golden.py
"""
import datetime
import json
import pathlib

import transformers
import transformers.utils.chat_template_utils as chat_template_utils
from transformers import PreTrainedTokenizerFast

DATA = pathlib.Path("tests/data/chat_templates")
TOKENIZER = "tests/data/tokenizer/qwen_style/tokenizer.json"

# 2026-12-02 12:00 UTC: the same calendar day in every time zone from UTC-11 to UTC+11.
NOW_AT = 1796212800


class PinnedDatetime(datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return datetime.datetime.fromtimestamp(NOW_AT, tz)


# transformers' strftime_now calls datetime.now() through this module's name.
chat_template_utils.datetime = PinnedDatetime

# Template file -> the special tokens its checkpoint's tokenizer defines.
TEMPLATES = {
    "qwen3": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "qwen2.5": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "qwq": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "deepseek-r1-distill": {"bos_token": "<｜begin▁of▁sentence｜>",
                            "eos_token": "<｜end▁of▁sentence｜>"},
    "llama3.1": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "llama3.2": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "hermes3-tool-use": {"bos_token": "<|begin_of_text|>", "eos_token": "<|im_end|>"},
    "mistral-nemo": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    "smollm3": {"eos_token": "<|im_end|>", "pad_token": "<|im_end|>"},
    "gemma2": {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"},
    "phi3.5": {"bos_token": "<s>", "eos_token": "<|endoftext|>", "unk_token": "<unk>"},
    "granite3.3": {"bos_token": "<|end_of_text|>", "eos_token": "<|end_of_text|>"},
    "chatml": {"eos_token": "<|im_end|>"},
}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. \"Paris\""},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
TIME_TOOL = {"type": "function", "function": {"name": "get_time", "description": "Time now.",
                                               "parameters": {"type": "object", "properties": {}}}}

SYSTEM = {"role": "system", "content": "You are a careful assistant."}
USER = {"role": "user", "content": "What's the weather in Paris?"}
CALL = {"role": "assistant", "content": "", "tool_calls": [
    {"id": "call_0001", "type": "function",
     "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]}
CALL_STRING_ARGS = {"role": "assistant", "content": "Let me check.", "tool_calls": [
    {"id": "call_0002", "type": "function",
     "function": {"name": "get_weather", "arguments": "{\"city\": \"Lyon\"}"}},
    {"id": "call_0003", "type": "function", "function": {"name": "get_time", "arguments": {}}}]}
RESULT = {"role": "tool", "tool_call_id": "call_0001", "name": "get_weather",
          "content": "{\"temperature\": 18.5, \"sky\": \"clear\"}"}

CASES = [
    ("user_only", [{"role": "user", "content": "Hello!"}], None, {}),
    ("system_user", [SYSTEM, {"role": "user", "content": "2+2?"}], None, {}),
    ("multi_turn", [SYSTEM, {"role": "user", "content": "2+2?"},
                    {"role": "assistant", "content": "4"},
                    {"role": "user", "content": "And 3+3?\nThanks."}], None, {}),
    ("no_system_multi_turn", [{"role": "user", "content": "Hi"},
                              {"role": "assistant", "content": "Hello! How can I help?"},
                              {"role": "user", "content": "Tell me a joke."}], None, {}),
    ("unicode_and_braces", [{"role": "user",
                             "content": "Unicode: héllo 世界 🤖, quotes ' \" and {{ braces }} {% x %}"}],
     None, {}),
    ("whitespace_content", [{"role": "user", "content": "  spaced out \n\n"}], None, {}),
    ("content_parts", [{"role": "user", "content": [{"type": "text", "text": "Part one. "},
                                                    {"type": "text", "text": "Part two."}]}],
     None, {}),
    ("thinking_off", [{"role": "user", "content": "Quick: capital of France?"}], None,
     {"enable_thinking": False}),
    ("thinking_on", [{"role": "user", "content": "Prove it."}], None, {"enable_thinking": True}),
    ("earlier_reasoning_field", [
        {"role": "user", "content": "What is 7*6?"},
        {"role": "assistant", "content": "42", "reasoning_content": "7*6 = 42."},
        {"role": "user", "content": "And 8*6?"}], None, {}),
    ("earlier_reasoning_inline", [
        {"role": "user", "content": "What is 7*6?"},
        {"role": "assistant", "content": "<think>\n7 sixes make 42.\n</think>\n\n42"},
        {"role": "user", "content": "Thanks"}], None, {}),
    ("final_assistant_reasoning", [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello", "reasoning_content": "Greet back."}], None, {}),
    ("tools_offered", [SYSTEM, USER], [WEATHER_TOOL, TIME_TOOL], {}),
    ("tools_no_system", [USER], [WEATHER_TOOL], {}),
    ("tool_call_and_result", [SYSTEM, USER, CALL, RESULT], [WEATHER_TOOL], {}),
    ("tool_round_trip_answer", [USER, CALL, RESULT,
                                {"role": "assistant", "content": "It is 18.5 °C and clear."},
                                {"role": "user", "content": "Thanks!"}], [WEATHER_TOOL], {}),
    ("two_calls_two_results", [USER, CALL_STRING_ARGS,
                               {"role": "tool", "tool_call_id": "call_0002", "content": "rain"},
                               {"role": "tool", "tool_call_id": "call_0003", "content": "12:00"}],
     [WEATHER_TOOL, TIME_TOOL], {}),
    ("tool_call_thinking_off", [USER, CALL, RESULT], [WEATHER_TOOL], {"enable_thinking": False}),
    ("date_string", [{"role": "user", "content": "What day is it?"}], None,
     {"date_string": "02 Dec 2026"}),
    ("empty_conversation", [], None, {}),
    ("assistant_first", [{"role": "assistant", "content": "I start."},
                         {"role": "user", "content": "ok"}], None, {}),
]


def render(tok, messages, tools, agp, cont, kwargs):
    try:
        text = tok.apply_chat_template(messages, tools=tools, tokenize=False,
                                       add_generation_prompt=agp, continue_final_message=cont,
                                       **kwargs)
        return {"expected": text}
    except Exception as e:  # noqa: BLE001 - the message is the golden
        return {"error": f"{type(e).__name__}: {e}"}


def main():
    templates = []
    for name, special in TEMPLATES.items():
        source = (DATA / f"{name}.jinja").read_text()
        tok = PreTrainedTokenizerFast(tokenizer_file=TOKENIZER, **special)
        tok.chat_template = source
        cases = []
        for case_name, messages, tools, kwargs in CASES:
            for agp in (False, True):
                cases.append({"name": f"{case_name}/agp={int(agp)}", "messages": messages,
                              "tools": tools, "add_generation_prompt": agp,
                              "continue_final_message": False, "kwargs": kwargs,
                              **render(tok, messages, tools, agp, False, kwargs)})
        for case_name, messages in [
            ("continue", [{"role": "user", "content": "Write a haiku."},
                          {"role": "assistant", "content": "Autumn moonlight -"}]),
            ("continue_trailing_space", [{"role": "user", "content": "Count."},
                                         {"role": "assistant", "content": "1, 2, "}]),
        ]:
            cases.append({"name": case_name, "messages": messages, "tools": None,
                          "add_generation_prompt": False, "continue_final_message": True,
                          "kwargs": {}, **render(tok, messages, None, False, True, {})})
        templates.append({"name": name, "file": f"{name}.jinja", "special_tokens": special,
                          "cases": cases})
    out = {"transformers": transformers.__version__, "strftime_now_at": NOW_AT,
           "templates": templates}
    (DATA / "golden.json").write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
