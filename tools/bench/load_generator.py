#!/usr/bin/env python3
"""Load generator for ridgeserve's OpenAI-compatible HTTP API (standard library only).

Runs C concurrent streaming clients against POST /v1/completions, each sending requests
back to back until N requests have finished, and reports throughput (generated tokens/s,
requests/s) and percentiles of time to first token (TTFT) and inter-token latency (ITL),
measured on the client from the server-sent events.

The clients are threads spread over several processes (--processes; by default one per 16
clients, up to the machine's cores): in one process they share one interpreter lock, and at
tens of thousands of events a second that lock, not the server, set the pace.

  python3 tools/bench/load_generator.py --url http://127.0.0.1:8000 \
      --concurrency 1,8,32 --requests 64 --max-tokens 64 --prompt-tokens 128
"""
import argparse
import http.client
import json
import multiprocessing
import os
import queue
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
        if '"completion_tokens"' in payload:  # only the usage chunk is parsed
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


def run_clients(args, body, clients, requests, ready, go, results):
    """One process: `clients` threads finishing `requests` requests between them; puts
    (ttfts, gaps, tokens, errors) on `results`."""
    host_port = urllib.parse.urlparse(args.url)
    lock = threading.Lock()
    remaining = [requests]
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

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    ready.wait()
    go.wait()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    results.put((ttfts, gaps, tokens[0], errors))


def split(total, parts, i):
    return total // parts + (1 if i < total % parts else 0)


def run_level(args, concurrency):
    # A fixed pseudo-random prompt of token ids: the model's tokenizer is not needed.
    body = {
        "prompt": [(7919 * i + 13) % args.vocab for i in range(args.prompt_tokens)],
        "max_tokens": args.max_tokens, "temperature": 0.0, "stream": True,
        "ignore_eos": True, "stream_options": {"include_usage": True},
    }
    if args.solver_tolerance is not None:
        body["solver_tolerance"] = args.solver_tolerance
    processes = args.processes or min(os.cpu_count() or 1, (concurrency + 15) // 16)
    processes = max(1, min(processes, concurrency, args.requests))
    context = multiprocessing.get_context("fork")
    ready, go, results = context.Barrier(processes + 1), context.Event(), context.Queue()
    children = [context.Process(target=run_clients,
                                args=(args, body, split(concurrency, processes, i),
                                      split(args.requests, processes, i), ready, go, results))
                for i in range(processes)]
    for child in children:
        child.start()
    ready.wait(timeout=60)  # every process is up: the clock starts with all clients at once
    start = time.perf_counter()
    go.set()
    ttfts, gaps, tokens, errors = [], [], 0, []
    for _ in children:
        while True:
            try:
                t, g, n, e = results.get(timeout=1.0)
                break
            except queue.Empty:
                failed = [c.exitcode for c in children if c.exitcode not in (None, 0)]
                if failed:
                    raise RuntimeError(f"a client process failed (exit code {failed[0]})")
        ttfts += t
        gaps += g
        tokens += n
        errors += e
    elapsed = time.perf_counter() - start
    for child in children:
        child.join()
    ms = lambda v: 1000.0 * v
    print(f"{concurrency:>4} {len(ttfts):>5} {tokens / elapsed:>10.1f} {len(ttfts) / elapsed:>8.2f} "
          f"{ms(percentile(ttfts, 50)):>9.1f} {ms(percentile(ttfts, 90)):>9.1f} {ms(percentile(ttfts, 99)):>9.1f} "
          f"{ms(percentile(gaps, 50)):>8.1f} {ms(percentile(gaps, 90)):>8.1f} {ms(percentile(gaps, 99)):>8.1f} "
          f"{len(errors):>6} {processes:>5}", flush=True)
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
    parser.add_argument("--processes", type=int, default=0,
                        help="client processes (0: one per 16 clients, up to the cores)")
    args = parser.parse_args()
    if args.processes < 0 or args.requests < 1:
        parser.error("--processes must be >= 0 and --requests >= 1")
    print("conc  reqs  gen_tok/s    req/s  ttft_p50  ttft_p90  ttft_p99  itl_p50  itl_p90  itl_p99 errors procs")
    print("                                     (ms)      (ms)      (ms)     (ms)     (ms)     (ms)")
    for level in (int(c) for c in args.concurrency.split(",")):
        run_level(args, max(level, 1))


if __name__ == "__main__":
    main()
