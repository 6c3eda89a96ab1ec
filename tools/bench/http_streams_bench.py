#!/usr/bin/env python3
"""Concurrent-streams benchmark for ridgeserve's HTTP server (standard library only).

Opens --streams streaming completions at once (POST /v1/completions, "stream": true, token-id
prompts of --prompt-tokens, --max-tokens each with ignore_eos) and holds them all open until they
end, while a probe asks GET /health every 100 ms. Reports:

  - streams completed, failed; generated tokens/s over HTTP (client-counted events);
  - time to first token and stream duration percentiles;
  - /health latency (p50, p99, max and when it happened) during the load, and any probe that
    failed; "steady": from one second after the last stream started (--ramp-seconds);
  - the server process's threads and resident memory (from /proc, sampled every 0.5 s): before,
    peak, and per open stream; its CPU time (cores busy, and microseconds per generated token);
  - ridgeserve_http_connections{state="open"} at its peak, from /metrics.

The clients are asyncio coroutines spread over --processes processes (one event loop each), so
the clients' interpreter locks do not set the pace. --launch starts the server (its command with
{port}) and stops it after; --url uses a running one (then threads and memory need --pid).

  python3 tools/bench/http_streams_bench.py --streams 4096 --max-tokens 64 --launch \\
      "build/server/ridgeserve serve --model assets/default-model --http-port {port} \\
       --slots 4096 --max-waiting 4096"
"""
import argparse
import asyncio
import json
import multiprocessing
import os
import resource
import shlex
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request


def percentile(values, q):
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q / 100.0 * (len(ordered) - 1)))))]


async def one_stream(host, port, body, start_event, delay):
    """One streaming request; returns (ok, ttft, duration, tokens, error)."""
    await start_event.wait()
    if delay > 0:
        await asyncio.sleep(delay)
    start = time.perf_counter()
    ttft = None
    tokens = 0
    try:
        reader, writer = await asyncio.open_connection(host, port)
        payload = json.dumps(body).encode()
        writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: bench\r\nContent-Type: "
                     b"application/json\r\nContent-Length: " + str(len(payload)).encode() +
                     b"\r\n\r\n" + payload)
        await writer.drain()
        status = await reader.readline()
        if b" 200 " not in status:
            rest = await reader.read(2000)
            writer.close()
            return False, None, None, 0, (status + rest).decode(errors="replace")[:300]
        done = False
        while not done:
            line = await reader.readline()
            if not line:
                break
            if line.startswith(b"data: "):
                if line.startswith(b"data: [DONE]"):
                    done = True
                    break
                event = json.loads(line[6:])
                for choice in event.get("choices", []):
                    n = len(choice.get("token_ids") or [])
                    if n and ttft is None:
                        ttft = time.perf_counter() - start
                    tokens += n
        writer.close()
        return done, ttft, time.perf_counter() - start, tokens, None if done else "no [DONE]"
    except Exception as error:  # noqa: BLE001: every failure is counted and shown
        return False, None, None, tokens, repr(error)[:300]


def client_process(host, port, bodies, delays, barrier, out):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    async def run():
        start_event = asyncio.Event()
        tasks = [asyncio.ensure_future(one_stream(host, port, b, start_event, d))
                 for b, d in zip(bodies, delays)]
        await asyncio.sleep(0)
        barrier.wait()
        start_event.set()
        return await asyncio.gather(*tasks)

    out.put(asyncio.run(run()))


def proc_status(pid):
    threads = rss = 0
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Threads:"):
                    threads = int(line.split()[1])
                elif line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) * 1024
    except OSError:
        pass
    return threads, rss


def cpu_seconds(pid):
    """User + system CPU time of the process so far (all its threads)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def metric(url, name, label):
    try:
        text = urllib.request.urlopen(url + "/metrics", timeout=5).read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(name + "{") and label in line:
            return float(line.split()[-1])
    return None


def monitor(url, pid, stop, samples, start):
    host_url = url
    next_metric = 0.0
    while not stop.is_set():
        t0 = time.perf_counter()
        try:
            ok = urllib.request.urlopen(host_url + "/health", timeout=5).status == 200
        except OSError:
            ok = False
        samples["health"].append((time.perf_counter() - t0, ok, t0 - start))
        if pid:
            samples["proc"].append(proc_status(pid))
        if time.perf_counter() >= next_metric:
            value = metric(host_url, "ridgeserve_http_connections", 'state="open"')
            if value is not None:
                samples["open"].append(value)
            next_metric = time.perf_counter() + 0.5
        stop.wait(0.1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url, process, timeout):
    deadline = time.monotonic() + timeout
    for path in ("/health", "/ready"):
        while True:
            try:
                if urllib.request.urlopen(url + path, timeout=5).status == 200:
                    break
            except OSError:
                pass
            if process is not None and process.poll() is not None:
                raise SystemExit(f"the server exited with code {process.returncode}")
            if time.monotonic() > deadline:
                raise SystemExit(f"{path} did not answer 200 within {timeout} s")
            time.sleep(0.2)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="a running server, e.g. http://127.0.0.1:8000")
    parser.add_argument("--pid", type=int, default=0, help="its process id (threads, memory)")
    parser.add_argument("--launch", help="server command with {port}")
    parser.add_argument("--launch-timeout", type=float, default=600)
    parser.add_argument("--streams", type=int, default=1024)
    parser.add_argument("--prompt-tokens", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--token-range", default="1000,4000", help="prompt ids LO,HI")
    parser.add_argument("--processes", type=int, default=min(8, os.cpu_count() or 1))
    parser.add_argument("--ramp-seconds", type=float, default=0.0,
                        help="start the streams evenly over this time (0: all at once); the "
                             "probe's figures after it are reported apart as 'steady'")
    parser.add_argument("--json", help="write the summary here")
    args = parser.parse_args()

    process = None
    log = None
    if args.launch:
        port = free_port()
        argv = shlex.split(args.launch.replace("{port}", str(port)))
        log = tempfile.NamedTemporaryFile(prefix="streams_server_", suffix=".log", delete=False)
        print(f"launching: {shlex.join(argv)}  (log: {log.name})", flush=True)
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        pid = process.pid
    else:
        url, pid = args.url.rstrip("/"), args.pid
    host, port = url.split("//")[1].split(":")
    port = int(port)
    try:
        wait_ready(url, process, args.launch_timeout)
        threads_idle, rss_idle = proc_status(pid) if pid else (0, 0)
        lo, hi = (int(x) for x in args.token_range.split(","))
        bodies = []
        for i in range(args.streams):
            ids = [lo + (i * 7919 + j * 104729) % (hi - lo) for j in range(args.prompt_tokens)]
            bodies.append({"prompt": ids, "max_tokens": args.max_tokens, "stream": True,
                           "ignore_eos": True, "temperature": 0, "return_token_ids": True})
        delays = [args.ramp_seconds * i / max(1, args.streams) for i in range(args.streams)]
        shards = [bodies[i::args.processes] for i in range(args.processes)]
        delay_shards = [delays[i::args.processes] for i in range(args.processes)]
        barrier = multiprocessing.Barrier(args.processes + 1)
        out = multiprocessing.Queue()
        workers = [multiprocessing.Process(target=client_process,
                                           args=(host, port, shard, shard_delays, barrier, out))
                   for shard, shard_delays in zip(shards, delay_shards)]
        for w in workers:
            w.start()
        samples = {"health": [], "proc": [], "open": []}
        stop = threading.Event()
        barrier.wait()
        cpu_start = cpu_seconds(pid) if pid else 0.0
        start = time.perf_counter()
        probe = threading.Thread(target=monitor, args=(url, pid, stop, samples, start))
        probe.start()
        results = []
        for _ in workers:
            results.extend(out.get())
        wall = time.perf_counter() - start
        cpu_used = (cpu_seconds(pid) - cpu_start) if pid else 0.0
        stop.set()
        probe.join()
        for w in workers:
            w.join()
    finally:
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                process.kill()

    ok = [r for r in results if r[0]]
    failed = [r for r in results if not r[0]]
    tokens = sum(r[3] for r in results)
    health = [h for h, _, _ in samples["health"]]
    steady = [h for h, _, t in samples["health"] if t >= args.ramp_seconds + 1.0]
    worst = max(samples["health"], default=(float("nan"), True, float("nan")))
    threads_peak = max((t for t, _ in samples["proc"]), default=0)
    rss_peak = max((m for _, m in samples["proc"]), default=0)
    summary = {
        "streams": args.streams, "completed": len(ok), "failed": len(failed),
        "failures": sorted({r[4] for r in failed})[:5],
        "wall_s": round(wall, 2), "generated_tokens": tokens,
        "tokens_per_s": round(tokens / wall, 1),
        "ttft_ms": {q: round(1000 * percentile([r[1] for r in ok if r[1]], q), 1)
                    for q in (50, 90, 99)},
        "duration_s": {q: round(percentile([r[2] for r in ok], q), 2) for q in (50, 99)},
        "health_ms": {"p50": round(1000 * percentile(health, 50), 1),
                      "p99": round(1000 * percentile(health, 99), 1),
                      "max": round(1000 * worst[0], 1),
                      "max_at_s": round(worst[2], 2),
                      "probes": len(health),
                      "failed": sum(1 for _, good, _ in samples["health"] if not good),
                      "steady_p99": round(1000 * percentile(steady, 99), 1),
                      "steady_max": round(1000 * max(steady, default=float("nan")), 1)},
        "open_connections_peak": max(samples["open"], default=None),
        "server_threads": {"idle": threads_idle, "peak": threads_peak},
        "server_rss_mib": {"idle": round(rss_idle / 2**20, 1), "peak": round(rss_peak / 2**20, 1)},
        "server_cpu_cores": round(cpu_used / wall, 2),
        "server_cpu_us_per_token": round(1e6 * cpu_used / max(1, tokens), 1),
        "rss_per_stream_kib": round((rss_peak - rss_idle) / 1024 / max(1, args.streams), 1),
    }
    print(json.dumps(summary, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)
    if log is not None:
        print(f"(server log: {log.name})")
    return 0 if not failed and summary["health_ms"]["failed"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
