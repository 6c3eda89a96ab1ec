#!/usr/bin/env python3
"""Load generator for ridgeserve's OpenAI-compatible HTTP API (standard library only).

Runs C concurrent streaming clients against POST /v1/completions, each sending requests
back to back until N requests have finished, and reports throughput (generated tokens/s,
requests/s) and percentiles of time to first token (TTFT) and inter-token latency (ITL),
measured on the client from the server-sent events.

  python3 tools/bench/load_generator.py --url http://127.0.0.1:8000 \
      --concurrency 1,8,32 --requests 64 --max-tokens 64 --prompt-tokens 128
"""
import argparse
import http.client
import json
import statistics
import threading
import time
import urllib.parse


def percentile(values, q):
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, int(round(q / 100.0 * (len(ordered) - 1)))))
    return ordered[index]


def one_request(host, port, body, timeout):
    """Streams one completion; returns (ttft, [gaps], tokens) measured on arrival of events."""
    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    start = time.perf_counter()
    connection.request("POST", "/v1/completions", body=json.dumps(body),
                       headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status}: {response.read()[:300]!r}")
    ttft, last, gaps, tokens = None, None, [], 0
    for raw in response:
        line = raw.decode("utf-8").strip()
        if not line.startswith("data: "):
            continue
        payload = line[len("data: "):]
        if payload == "[DONE]":
            break
        chunk = json.loads(payload)
        if chunk.get("usage") and not chunk.get("choices"):
            tokens = chunk["usage"]["completion_tokens"]
            continue
        now = time.perf_counter()
        if ttft is None:
            ttft = now - start
        elif last is not None:
            gaps.append(now - last)
        last = now
    connection.close()
    return ttft, gaps, tokens


def run_level(args, concurrency):
    host_port = urllib.parse.urlparse(args.url)
    # A fixed pseudo-random prompt of token ids: the model's tokenizer is not needed.
    body = {
        "prompt": [(7919 * i + 13) % args.vocab for i in range(args.prompt_tokens)],
        "max_tokens": args.max_tokens, "temperature": 0.0, "stream": True,
        "ignore_eos": True, "stream_options": {"include_usage": True},
    }
    if args.solver_tolerance is not None:
        body["solver_tolerance"] = args.solver_tolerance
    lock = threading.Lock()
    remaining = [args.requests]
    ttfts, gaps, tokens, errors = [], [], [0], []

    def worker():
        while True:
            with lock:
                if remaining[0] == 0:
                    return
                remaining[0] -= 1
            try:
                ttft, g, n = one_request(host_port.hostname, host_port.port, body, args.timeout)
            except Exception as error:  # report, keep the run going
                with lock:
                    errors.append(str(error))
                continue
            with lock:
                ttfts.append(ttft)
                gaps.extend(g)
                tokens[0] += n

    start = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    ms = lambda v: 1000.0 * v
    print(f"{concurrency:>4} {len(ttfts):>5} {tokens[0] / elapsed:>10.1f} {len(ttfts) / elapsed:>8.2f} "
          f"{ms(percentile(ttfts, 50)):>9.1f} {ms(percentile(ttfts, 90)):>9.1f} {ms(percentile(ttfts, 99)):>9.1f} "
          f"{ms(percentile(gaps, 50)):>8.1f} {ms(percentile(gaps, 90)):>8.1f} {ms(percentile(gaps, 99)):>8.1f} "
          f"{len(errors):>6}", flush=True)
    for error in errors[:3]:
        print("   error:", error)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--requests", type=int, default=32, help="requests per concurrency level")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=4096, help="prompt ids are drawn below this")
    parser.add_argument("--solver-tolerance", type=float, default=None)
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args()
    print("conc  reqs  gen_tok/s    req/s  ttft_p50  ttft_p90  ttft_p99  itl_p50  itl_p90  itl_p99 errors")
    print("                                     (ms)      (ms)      (ms)     (ms)     (ms)     (ms)")
    for level in (int(c) for c in args.concurrency.split(",")):
        run_level(args, max(level, 1))


if __name__ == "__main__":
    main()
