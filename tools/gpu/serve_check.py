#!/usr/bin/env python3
"""End-to-end check of `ridgeserve serve` on a GPU machine (standard library only).

Starts the server twice on the same checkpoint, once with --device cpu and once with
--device cuda, and over HTTP: sends the same greedy completions to both and compares the
texts; checks that a seeded sampled request repeats on the GPU; streams a chat completion;
reads /metrics for the solver's iteration counts. Then, optionally, measures HTTP serving
throughput on the GPU with tools/bench/load_generator.py. Exits non-zero when a check fails.

  python3 tools/gpu/serve_check.py --server /tmp/ridge/bin/ridgeserve \
      --model assets/default-model [--load-model DIR --concurrency 1,16,64]

The server processes get --lib-path prepended to LD_LIBRARY_PATH (the bundled shared
libraries); this script itself needs none of them.
"""
import argparse
import http.client
import json
import os
import subprocess
import sys
import time

PROMPTS = [
    "Once upon a time",
    "The capital of France is",
    "def fibonacci(n):",
    "In the beginning there was",
    "A recurrent model keeps a fixed-size state",
]


class SkipChecks(Exception):
    pass


def request(port, method, path, body=None, timeout=120):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    headers = {"Content-Type": "application/json"} if body is not None else {}
    connection.request(method, path, body=json.dumps(body) if body is not None else None,
                       headers=headers)
    response = connection.getresponse()
    data = response.read()
    connection.close()
    return response.status, data


def start_server(args, device, port, model, extra=()):
    env = dict(os.environ)
    if args.lib_path:
        env["LD_LIBRARY_PATH"] = args.lib_path + ":" + env.get("LD_LIBRARY_PATH", "")
    log = open(f"/tmp/serve_{device}_{port}.log", "w")
    process = subprocess.Popen(
        [args.server, "serve", "--model", model, "--device", device, "--http-port", str(port),
         "--slots", str(args.slots), "--served-model-name", "m", *extra],
        stdout=log, stderr=subprocess.STDOUT, env=env)
    deadline = time.time() + 300
    while time.time() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{device} server exited: " + open(log.name).read()[-2000:])
        try:
            status, _ = request(port, "GET", "/ready", timeout=2)
            if status == 200:
                return process, log.name
        except OSError:
            pass
        time.sleep(0.5)
    process.kill()
    raise RuntimeError(f"{device} server not ready in 300 s")


def stop_server(process):
    process.terminate()
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
    return process.returncode


def completion(port, body):
    status, data = request(port, "POST", "/v1/completions", dict(body, model="m"))
    if status != 200:
        raise RuntimeError(f"HTTP {status}: {data[:300]!r}")
    return json.loads(data)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--lib-path", default="")
    parser.add_argument("--devices", default="cpu,cuda", help="reference device, device checked")
    parser.add_argument("--slots", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--load-model", default="", help="checkpoint for the throughput run")
    parser.add_argument("--concurrency", default="1,16,64")
    parser.add_argument("--load-requests", type=int, default=128)
    parser.add_argument("--load-server-args", action="append", default=None,
                        help="extra serve flags for a throughput run (repeat: one run each)")
    parser.add_argument("--skip-checks", action="store_true", help="throughput runs only")
    args = parser.parse_args()
    reference_device, device = args.devices.split(",")
    failures = []

    servers = {}
    for i, d in enumerate([] if args.skip_checks else [reference_device, device]):
        servers[d + str(i)] = start_server(args, d, 18100 + i, args.model)
    ref_port, gpu_port = 18100, 18101
    try:
        if args.skip_checks:
            raise SkipChecks()
        matched = 0
        for prompt in PROMPTS:
            body = {"prompt": prompt, "max_tokens": args.max_tokens, "temperature": 0}
            ref = completion(ref_port, body)["choices"][0]["text"]
            got = completion(gpu_port, body)["choices"][0]["text"]
            same = ref == got
            matched += same
            print(f"greedy {prompt!r}: {'same text' if same else 'DIFFERENT'}"
                  + ("" if same else f"\n  {reference_device}: {ref!r}\n  {device}: {got!r}"))
        print(f"greedy: {matched}/{len(PROMPTS)} completions identical on {reference_device} "
              f"and {device}")
        if matched < len(PROMPTS) - 1:
            failures.append("greedy completions differ")

        body = {"prompt": PROMPTS[0], "max_tokens": 32, "temperature": 0.9, "top_p": 0.95,
                "seed": 1234}
        first = completion(gpu_port, body)["choices"][0]["text"]
        second = completion(gpu_port, body)["choices"][0]["text"]
        print(f"seeded sampling repeats on {device}: {first == second}")
        if first != second:
            failures.append("seeded sampling differs between two identical requests")

        status, data = request(gpu_port, "POST", "/v1/chat/completions", {
            "model": "m", "messages": [{"role": "user", "content": "Hello!"}],
            "max_tokens": 16, "stream": True})
        events = [line for line in data.decode().splitlines() if line.startswith("data: ")]
        print(f"streamed chat: HTTP {status}, {len(events)} events, last {events[-1] if events else None!r}")
        if status != 200 or not events or events[-1] != "data: [DONE]":
            failures.append("streamed chat completion")

        status, data = request(gpu_port, "GET", "/metrics")
        lines = [line for line in data.decode().splitlines()
                 if "iteration" in line and not line.startswith("#")]
        print(f"metrics: HTTP {status}; solver iteration series: {len(lines)}")
        for line in lines[:6]:
            print("  " + line)
        if status != 200 or not lines:
            failures.append("/metrics has no solver iteration series")
    except SkipChecks:
        pass
    finally:
        for name, (process, log) in servers.items():
            code = stop_server(process)
            print(f"{name} server exit code {code} (log {log})")
            if code != 0:
                failures.append(f"{name} server exited with {code}")

    for extra in (args.load_server_args or [""]) if args.load_model else []:
        print(f"== throughput on {device}, {args.load_model}, serve flags {extra!r}", flush=True)
        process, log = start_server(args, device, 18102, args.load_model, extra.split())
        try:
            generator = os.path.join(os.path.dirname(__file__), "..", "bench", "load_generator.py")
            subprocess.run([sys.executable, generator, "--url", "http://127.0.0.1:18102",
                            "--concurrency", args.concurrency, "--requests",
                            str(args.load_requests), "--max-tokens", "64", "--prompt-tokens",
                            "128"], check=False)
        finally:
            stop_server(process)
            print("load server log tail:\n" + open(log).read()[-600:])

    print("FAILED: " + "; ".join(failures) if failures else "all serve checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
