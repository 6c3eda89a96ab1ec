#!/usr/bin/env python3
"""A small client for ridgeserve's OpenAI-compatible HTTP API (Python standard library only).

    tools/client/ridge_client.py "Once upon a time" --max-tokens 32 --stream
    tools/client/ridge_client.py --chat "Hello!" --solver-tolerance 1e-3

Streams print text as it arrives (server-sent events); the usage with solver statistics is
printed to stderr at the end.
"""
import argparse
import json
import sys
import urllib.error
import urllib.request


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("prompt")
    p.add_argument("--url", default="http://127.0.0.1:8000")
    p.add_argument("--chat", action="store_true", help="use /v1/chat/completions")
    p.add_argument("--stream", action="store_true")
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--seed", type=int)
    p.add_argument("--solver-tolerance", type=float)
    p.add_argument("--solver-max-iterations", type=int)
    args = p.parse_args()

    body = {"max_tokens": args.max_tokens, "temperature": args.temperature}
    if args.chat:
        path, body["messages"] = "/v1/chat/completions", [{"role": "user", "content": args.prompt}]
    else:
        path, body["prompt"] = "/v1/completions", args.prompt
    for key in ("seed", "solver_tolerance", "solver_max_iterations"):
        if getattr(args, key) is not None:
            body[key] = getattr(args, key)
    if args.stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}

    request = urllib.request.Request(args.url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        response = urllib.request.urlopen(request)
    except urllib.error.HTTPError as e:
        sys.exit(f"HTTP {e.code}: {json.loads(e.read())['error']['message']}")

    usage = None
    if not args.stream:
        reply = json.load(response)
        choice = reply["choices"][0]
        print(choice["message"]["content"] if args.chat else choice["text"])
        usage = reply["usage"]
    else:
        for raw in response:  # one SSE line at a time
            line = raw.decode().rstrip("\r\n")
            if not line.startswith("data: "):
                continue
            data = line[len("data: "):]
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            if "error" in chunk:
                sys.exit(f"\nerror: {chunk['error']['message']}")
            for choice in chunk["choices"]:
                text = choice["delta"].get("content", "") if args.chat else choice["text"]
                print(text, end="", flush=True)
            usage = chunk.get("usage") or usage
        print()
    if usage:
        print(json.dumps(usage), file=sys.stderr)


if __name__ == "__main__":
    main()
