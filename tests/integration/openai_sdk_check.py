#!/usr/bin/env python3
"""The official `openai` Python SDK against a real `ridgeserve serve` (issue 30).

Starts the server on a test checkpoint (random small weights, so the text is noise) with the tiny
byte-level tokenizer, Qwen3's chat template (--chat-template) and --reasoning-parser qwen3, then
drives it with the SDK: chat with tools offered, a tool call and its result sent back; streaming
with the reasoning parser on; n = 2; stop strings; echo; loglikelihood requests as
lm-evaluation-harness sends them (prompt lists, echo with logprobs) and vLLM's prompt_logprobs;
/tokenize and /detokenize round trip;
response_format json_object and json_schema;
and the 400s the SDK raises as BadRequestError (unknown tool_choice function, a tool schema that
is not an object, continue_final_message with add_generation_prompt). The model cannot be made to
emit a <tool_call> here; parsing the model's tool calls and reasoning is covered by
tests/server/http_chat_test.cc with a scripted engine.

Needs the `openai` package (scripts/install_deps.sh installs it into .tools/); without it the check
exits 77, which CTest reports as skipped.

    python3 tests/integration/openai_sdk_check.py --server build/server/ridgeserve --repo .
"""
import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

try:
    import openai
except ImportError:
    # scripts/install_deps.sh installs the SDK into the repository's .tools/ virtual environment.
    # (A venv's python3 links to the base interpreter, so compare prefixes, not executables; the
    # environment variable stops a second re-exec should the venv lack the package too.)
    tools = pathlib.Path(__file__).resolve().parents[2] / ".tools"
    tools_python = tools / "bin" / "python3"
    if (tools_python.exists() and pathlib.Path(sys.prefix).resolve() != tools.resolve()
            and not os.environ.get("RIDGE_SDK_CHECK_REEXEC")):
        os.environ["RIDGE_SDK_CHECK_REEXEC"] = "1"
        os.execv(str(tools_python), [str(tools_python)] + sys.argv)
    print("the openai package is not installed (scripts/install_deps.sh puts it in .tools/): "
          "SDK check skipped")
    sys.exit(77)

FAILURES = []


def check(condition, message):
    if not condition:
        FAILURES.append(message)
        print("FAIL:", message)


def tiny_tokenizer(directory):
    """The tests' byte-level tokenizer (tests/server/tiny_tokenizer.h), written as JSON."""
    def byte_char(b):
        printable = lambda x: (33 <= x <= 126) or (0xA1 <= x <= 0xAC) or (0xAE <= x <= 0xFF)
        if printable(b):
            return chr(b)
        return chr(256 + sum(1 for x in range(b) if not printable(x)))
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    vocab = {s: i for i, s in enumerate(specials)}
    for b in range(256):
        vocab[byte_char(b)] = 3 + b
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                  "use_regex": False}
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": s, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}
                         for i, s in enumerate(specials)],
        "normalizer": None, "pre_tokenizer": byte_level, "post_processor": None,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": []}}
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tokenizer.json").write_text(json.dumps(tokenizer))
    (directory / "tokenizer_config.json").write_text(json.dumps(
        {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "add_bos_token": False}))


def start_server(binary, repo, work):
    log = work / "server.log"
    args = [binary, "serve", "--model", str(repo / "tests/data/mesanet/d64_untied"),
            "--tokenizer", str(work / "tokenizer"),
            "--chat-template", str(repo / "tests/data/chat_templates/qwen3.jinja"),
            "--reasoning-parser", "qwen3", "--served-model-name", "tiny", "--threads", "1",
            "--host", "127.0.0.1", "--http-port", "0"]
    process = subprocess.Popen(args, stdout=log.open("w"), stderr=subprocess.STDOUT)
    deadline = time.time() + 60
    while time.time() < deadline:
        match = re.search(r"serving model '[^']*' on http://[0-9.]+:([0-9]+)", log.read_text())
        if match:
            port = int(match.group(1))
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2) as r:
                    if r.status == 200:
                        return process, port
            except OSError:
                pass
        if process.poll() is not None:
            break
        time.sleep(0.2)
    process.kill()
    sys.exit(f"the server did not start:\n{log.read_text()}")


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather now in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}


def run_checks(client, port):
    # Tools offered: the request is accepted and the reply parses as a ChatCompletion.
    first = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[WEATHER], tool_choice="auto", max_tokens=8, seed=1)
    message = first.choices[0].message
    check(message.role == "assistant", "chat with tools: no assistant message")
    check(first.choices[0].finish_reason in ("length", "stop", "tool_calls"),
          f"chat with tools: finish_reason {first.choices[0].finish_reason}")
    for call in message.tool_calls or []:
        check(call.type == "function" and isinstance(json.loads(call.function.arguments), dict),
              "a parsed tool call is not a function call with JSON arguments")

    # A named tool_choice streams its call as the arguments are generated: the first piece names
    # it, later ones add text, and the joined pieces are the unary reply's arguments.
    named = dict(model="tiny", messages=[{"role": "user", "content": "Weather in Paris?"}],
                 tools=[WEATHER], max_tokens=24, temperature=0,
                 tool_choice={"type": "function", "function": {"name": "get_weather"}})
    unary = client.chat.completions.create(**named).choices[0].message.tool_calls
    check(unary is not None and len(unary) == 1 and unary[0].function.name == "get_weather",
          "named tool_choice: not one call to get_weather")
    pieces = [call for chunk in client.chat.completions.create(stream=True, **named)
              if chunk.choices for call in (chunk.choices[0].delta.tool_calls or [])]
    check(len(pieces) >= 1 and pieces[0].id.startswith("chatcmpl-tool-") and
          pieces[0].function.name == "get_weather" and all(p.index == 0 for p in pieces) and
          all(p.id is None for p in pieces[1:]),
          "named tool_choice streamed: not one call opened by its first piece")
    check("".join(p.function.arguments or "" for p in pieces) == unary[0].function.arguments,
          "named tool_choice streamed: the pieces do not join to the unary arguments")

    # The assistant's tool call and the tool's result sent back; a final answer comes.
    final = client.chat.completions.create(model="tiny", max_tokens=8, tools=[WEATHER], messages=[
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C, clear"}])
    check(isinstance(final.choices[0].message.content, str), "no answer after the tool result")
    check(final.usage.prompt_tokens > 100, "the tool result conversation rendered too short")

    # Streaming with the reasoning parser on, thinking switched off by the template. Half of the
    # model's 512 ids are past the tokenizer's 259 and have no text, and lone bytes past 0x7F
    # make none either: 6 tokens were all textless in about one run in ten, so 24, and a seed.
    chunks = list(client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "Hi"}], max_tokens=24, stream=True,
        stream_options={"include_usage": True}, seed=5,
        extra_body={"chat_template_kwargs": {"enable_thinking": False}, "ignore_eos": True}))
    check(chunks[0].choices[0].delta.role == "assistant", "stream: no role in the first chunk")
    check(chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 24,
          "stream: usage missing or wrong")
    streamed = "".join((c.choices[0].delta.content or "") + (getattr(
        c.choices[0].delta, "reasoning_content", None) or "") for c in chunks if c.choices)
    check(len(streamed) > 0, "stream: no text")

    # n = 2: two choices, indexed, usage summed.
    two = client.completions.create(model="tiny", prompt="Once", max_tokens=4, n=2, seed=7,
                                    extra_body={"ignore_eos": True})
    check([c.index for c in two.choices] == [0, 1], "n=2: choices not indexed 0, 1")
    check(two.usage.completion_tokens == 8, "n=2: completion tokens not summed")

    # echo and /tokenize + /detokenize round trip (vLLM's routes, via the SDK's raw POST).
    echoed = client.completions.create(model="tiny", prompt="Echo me", max_tokens=2, echo=True)
    check(echoed.choices[0].text.startswith("Echo me"), "echo: the prompt is not in front")
    # Loglikelihood as lm-evaluation-harness's local-completions model asks for it: a batch of
    # token-id prompts, echo with logprobs, one new token, greedy. Each choice's token_logprobs
    # cover its prompt (the first null) and the new token; vLLM's prompt_logprobs give the same
    # numbers for the same prompt (within float rounding: the batches differ).
    batch = [[72, 101, 108, 108, 111, 32], [87, 111, 114, 108, 100]]
    scored = client.completions.create(model="tiny", prompt=batch, echo=True, logprobs=1,
                                       max_tokens=1, temperature=0, seed=1234,
                                       extra_body={"ignore_eos": True})
    check([c.index for c in scored.choices] == [0, 1], "loglikelihood: choices not per prompt")
    for choice, ids in zip(scored.choices, batch):
        lp = choice.logprobs
        check(len(lp.token_logprobs) == len(ids) + 1 and lp.token_logprobs[0] is None
              and all(x <= 0 for x in lp.token_logprobs[1:]),
              f"loglikelihood: token_logprobs {lp.token_logprobs}")
        check(lp.top_logprobs[0] is None and all(len(t) == 1 for t in lp.top_logprobs[1:]),
              f"loglikelihood: top_logprobs {lp.top_logprobs}")
    vllm = client.completions.create(model="tiny", prompt=batch[0], max_tokens=1,
                                     extra_body={"prompt_logprobs": 0, "ignore_eos": True})
    listed = vllm.model_extra["choices"][0]["prompt_logprobs"] if vllm.model_extra else None
    listed = listed or vllm.choices[0].model_extra.get("prompt_logprobs")
    check(listed is not None and listed[0] is None and len(listed) == len(batch[0]),
          f"prompt_logprobs: {listed}")
    if listed:
        for t in range(1, len(batch[0])):
            entry = listed[t][str(batch[0][t])]
            check(abs(entry["logprob"] - scored.choices[0].logprobs.token_logprobs[t]) < 1e-4,
                  f"prompt_logprobs and echo disagree at {t}: {entry} vs "
                  f"{scored.choices[0].logprobs.token_logprobs[t]}")
    root = f"http://127.0.0.1:{port}"
    tokens = json.loads(client.post(f"{root}/tokenize", body={"prompt": "Héllo"}, cast_to=str))
    check(tokens["count"] == len("Héllo".encode()), f"tokenize: {tokens}")
    text = json.loads(client.post(f"{root}/detokenize", body={"tokens": tokens["tokens"]},
                                  cast_to=str))
    check(text["prompt"] == "Héllo", f"detokenize: {text}")

    # JSON mode through the SDK's response_format: an answer that ends is one JSON object.
    finished = 0
    for seed in range(1, 4):
        reply = client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "A cat, in JSON."}],
            response_format={"type": "json_object"}, max_tokens=150, seed=seed,
            extra_body={"chat_template_kwargs": {"enable_thinking": False}})
        choice = reply.choices[0]
        if choice.finish_reason == "stop":
            content = choice.message.content or ""
            try:
                parsed = json.loads(content)
            except ValueError:
                parsed = None
            check(isinstance(parsed, dict), f"json_object: not one JSON object: {content!r}")
            finished += 1
    check(finished >= 1, "json_object: no answer ended within 150 tokens")

    # Structured outputs through the SDK's response_format json_schema: an answer that ends is an
    # instance, checked by hand (its keys in the schema's order, each value's type, the enum). The
    # random model spends many tokens on whitespace (runs of up to 48), hence 1000 tokens.
    cat = {"type": "object",
           "properties": {"name": {"type": "string"}, "lives": {"type": "integer"},
                          "mood": {"enum": ["calm", "grumpy"]},
                          "toys": {"type": "array", "items": {"type": "string"}, "maxItems": 2}},
           "required": ["name", "lives", "mood", "toys"], "additionalProperties": False}
    finished = 0
    for seed in range(1, 4):
        reply = client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "A cat, in JSON."}],
            response_format={"type": "json_schema",
                             "json_schema": {"name": "cat", "strict": True, "schema": cat}},
            max_tokens=1000, seed=seed,
            extra_body={"chat_template_kwargs": {"enable_thinking": False}})
        choice = reply.choices[0]
        if choice.finish_reason != "stop":
            continue
        content = choice.message.content or ""
        try:
            parsed = json.loads(content)
        except ValueError:
            parsed = None
        check(isinstance(parsed, dict) and list(parsed) == ["name", "lives", "mood", "toys"]
              and isinstance(parsed["name"], str) and type(parsed["lives"]) is int
              and parsed["mood"] in ("calm", "grumpy") and isinstance(parsed["toys"], list)
              and len(parsed["toys"]) <= 2 and all(isinstance(t, str) for t in parsed["toys"]),
              f"json_schema: not an instance: {content!r}")
        finished += 1
    check(finished >= 1, "json_schema: no answer ended within 1000 tokens")

    # Bad requests are BadRequestError naming the field.
    bad = [({"tools": [WEATHER], "tool_choice": {"type": "function",
                                                "function": {"name": "launch"}}}, "tool_choice"),
           ({"tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]},
            "tools"),
           ({"extra_body": {"continue_final_message": True}}, "continue_final_message"),
           ({"response_format": {"type": "json_schema",
                                 "json_schema": {"name": "cat", "schema": {
                                     "type": "object", "properties": {
                                         "n": {"type": "string", "pattern": "^a"}}}}}},
            "response_format.json_schema.schema"),
           ({"response_format": {"type": "json_schema", "json_schema": {"schema": cat}}},
            "response_format.json_schema.name")]
    for extra, param in bad:
        try:
            client.chat.completions.create(model="tiny", max_tokens=2,
                                           messages=[{"role": "user", "content": "x"}], **extra)
            check(False, f"{param}: no error")
        except openai.BadRequestError as e:
            check(e.body is not None and e.body.get("param") == param,
                  f"{param}: error names {e.body}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--repo", default=".")
    args = parser.parse_args()
    repo = pathlib.Path(args.repo).resolve()
    with tempfile.TemporaryDirectory(prefix="ridge_sdk_") as tmp:
        work = pathlib.Path(tmp)
        tiny_tokenizer(work / "tokenizer")
        process, port = start_server(args.server, repo, work)
        try:
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused",
                                   max_retries=0, timeout=60)
            run_checks(client, port)
        finally:
            process.terminate()
            process.wait(timeout=30)
    if FAILURES:
        sys.exit(f"{len(FAILURES)} SDK check(s) failed")
    print(f"openai {openai.__version__} SDK checks passed")


if __name__ == "__main__":
    main()
