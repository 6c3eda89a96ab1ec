"""A soak test of `ridgeserve serve` (issue 32): many clients for a long time, mixing what real
traffic and bad clients do, and then checks that nothing was lost.

Clients (threads, seeded) pick at random: unary and streamed completions and chats (text and
token-id prompts, greedy and sampled, stop strings, logprobs), streams dropped after a few chunks,
requests with tiny deadlines, malformed or out-of-range bodies, gRPC generations through
ridge_grpc_client, and /health, /ready and /metrics. Every call must end within its timeout with
the answer its kind allows (200 with a finish reason and as many tokens as the usage says; 400 for
a bad body; 429/503 under overload; a deadline as 408/504 or a finish). At the end the server
must be alive, back to zero running requests, waiting requests and used slots, its
ridgeserve_requests_total must have grown by at least the engine requests the clients saw
finish, and its resident memory must not have grown by more than --max-rss-growth after the
warm-up. A watcher asks /health every 0.5 s throughout: every probe must answer 200 within 2 s.
Afterwards up to --replays finished completions (token-id answers) are sent again one at a time
to the idle server, with the same seed: each that restored no prefix-cache state, either time,
must give the same token ids. On the CPU the server
runs with OPENBLAS_CORETYPE=Sandybridge, whose kernels round a row the same whatever the batch
(the default FMA kernels do not, so a request's logits would depend on what ran beside it); on a
GPU (--server-args "--device cuda") batched arithmetic varies with the batch, so differences are
reported, not counted as violations.

    python3 tools/soak/soak.py [--minutes 10] [--clients 24] [--model assets/default-model]
        [--server build/server/ridgeserve] [--grpc-client build/tools/client/ridge_grpc_client]
        [--server-args "--device cuda"] [--replays 300]

Prints a summary; exits 1 on any violation. Standard library only.
"""
import argparse
import http.client
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
from collections import Counter


class Soak:
    def __init__(self, args):
        self.args = args
        self.lock = threading.Lock()
        self.outcomes = Counter()
        self.violations = []
        self.engine_finished = 0  # requests the clients saw end inside the engine
        self.finished = []  # (body, token ids) of finished completions, for the replay
        self.health = []  # (latency s, status) of the watcher's probes
        self.deadline = time.time() + args.minutes * 60

    def record(self, kind, outcome):
        with self.lock:
            self.outcomes[(kind, outcome)] += 1

    def violate(self, text):
        with self.lock:
            if len(self.violations) < 50:
                self.violations.append(text)

    def count_engine(self):
        with self.lock:
            self.engine_finished += 1

    # --- HTTP -----------------------------------------------------------------------------
    def connection(self, timeout):
        return http.client.HTTPConnection("127.0.0.1", self.args.http_port, timeout=timeout)

    def post(self, path, body, timeout=300):
        conn = self.connection(timeout)
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        conn.request("POST", path, body=data, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        text = response.read()
        conn.close()
        return response.status, text

    def random_prompt(self, rng):
        if rng.random() < 0.5:
            return [rng.randrange(5, 500) for _ in range(rng.randrange(1, 300))]
        words = ["the", "cat", "sat", "on", "a", "mat", "once", "upon", "time", "river", "stone"]
        return " ".join(rng.choice(words) for _ in range(rng.randrange(1, 120)))

    def unary(self, rng, chat):
        body = {"max_tokens": rng.randrange(1, 48), "temperature": rng.choice([0, 0.7, 1.0]),
                "seed": rng.randrange(1 << 30)}
        if chat:
            body["messages"] = [{"role": "user", "content": self.random_prompt_text(rng)}]
            path = "/v1/chat/completions"
        else:
            body["prompt"] = self.random_prompt(rng)
            body["return_token_ids"] = True
            if rng.random() < 0.3:
                body["logprobs"] = 2
            path = "/v1/completions"
        if rng.random() < 0.2:
            body["stop"] = ["the"]
        status, text = self.post(path, body)
        kind = "chat" if chat else "completion"
        if status in (429, 503):
            self.record(kind, status)
            return
        if status != 200:
            self.violate(f"{kind}: HTTP {status}: {text[:200]!r}")
            return
        reply = json.loads(text)
        choice = reply["choices"][0]
        if choice.get("finish_reason") not in ("length", "stop"):
            self.violate(f"{kind}: finish_reason {choice.get('finish_reason')!r}")
        usage = reply["usage"]
        if "token_ids" in choice and len(choice["token_ids"]) != usage["completion_tokens"]:
            self.violate(f"{kind}: {len(choice['token_ids'])} token ids, usage says "
                         f"{usage['completion_tokens']}")
        if usage["completion_tokens"] > body["max_tokens"]:
            self.violate(f"{kind}: {usage['completion_tokens']} tokens > max_tokens")
        if "token_ids" in choice:
            cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
            with self.lock:
                if len(self.finished) < 20 * self.args.replays:
                    self.finished.append((body, choice["token_ids"], cached))
        self.record(kind, 200)
        self.count_engine()

    def random_prompt_text(self, rng):
        prompt = self.random_prompt(rng)
        return prompt if isinstance(prompt, str) else "tell me about stones"

    def stream(self, rng, drop):
        body = {"prompt": self.random_prompt(rng), "max_tokens": rng.randrange(4, 64),
                "temperature": 0.8, "seed": rng.randrange(1 << 30), "stream": True}
        conn = self.connection(300)
        conn.request("POST", "/v1/completions", body=json.dumps(body),
                     headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        if response.status in (429, 503):
            response.read()
            conn.close()
            self.record("stream", response.status)
            return
        if response.status != 200:
            self.violate(f"stream: HTTP {response.status}")
            conn.close()
            return
        chunks, done, finish = 0, False, None
        drop_after = rng.randrange(1, 4) if drop else None
        while True:
            line = response.fp.readline()
            if not line:
                break
            line = line.decode().strip()
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                done = True
                break
            chunk = json.loads(line[6:])
            for choice in chunk.get("choices", []):
                finish = choice.get("finish_reason") or finish
            chunks += 1
            if drop_after is not None and chunks >= drop_after:
                break
        conn.close()
        if drop:
            self.record("stream-dropped", "closed")
            return
        if not done or finish not in ("length", "stop"):
            self.violate(f"stream: done {done}, finish {finish!r} after {chunks} chunks")
            return
        self.record("stream", 200)
        self.count_engine()

    def tiny_deadline(self, rng):
        body = {"prompt": self.random_prompt(rng), "max_tokens": 64, "timeout": 0.001}
        status, text = self.post("/v1/completions", body)
        if status == 200:
            self.count_engine()
        elif status not in (408, 429, 503, 504):
            self.violate(f"deadline: HTTP {status}: {text[:200]!r}")
        self.record("deadline", status)

    def bad(self, rng):
        bodies = [b"{", b"[]", b'{"prompt": 5}', b'{"prompt": [1, 2.5]}', b'{"prompt": "x", '
                  b'"max_tokens": -1}', b'{"prompt": "x", "temperature": 1e400}',
                  b'{"messages": [{"role": "pirate", "content": "arr"}]}',
                  json.dumps({"prompt": [10 ** 12]}).encode(),
                  bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))]
        path = rng.choice(["/v1/completions", "/v1/chat/completions"])
        status, text = self.post(path, rng.choice(bodies))
        if status != 400:
            self.violate(f"bad body: HTTP {status}: {text[:200]!r}")
        self.record("bad", status)

    def probe(self, rng):
        path = rng.choice(["/health", "/ready", "/metrics"])
        conn = self.connection(10)
        conn.request("GET", path)
        response = conn.getresponse()
        response.read()
        conn.close()
        if response.status != 200:
            self.violate(f"{path}: HTTP {response.status}")
        self.record("probe", response.status)

    def grpc(self, rng):
        ids = ",".join(str(rng.randrange(5, 500)) for _ in range(rng.randrange(1, 100)))
        run = subprocess.run([self.args.grpc_client, "--address",
                              f"127.0.0.1:{self.args.grpc_port}", "--prompt-ids", ids,
                              "--max-tokens", str(rng.randrange(1, 32)), "--timeout", "300"],
                             capture_output=True, text=True, timeout=330)
        if run.returncode != 0:
            if "RESOURCE_EXHAUSTED" in run.stderr or "UNAVAILABLE" in run.stderr:
                self.record("grpc", "overloaded")
                return
            self.violate(f"grpc: rc {run.returncode}: {run.stderr[-200:]!r}")
            return
        self.record("grpc", "ok")
        self.count_engine()

    def client(self, index):
        rng = random.Random(1000 + index)
        actions = [(0.30, lambda: self.unary(rng, False)), (0.12, lambda: self.unary(rng, True)),
                   (0.20, lambda: self.stream(rng, False)), (0.10, lambda: self.stream(rng, True)),
                   (0.06, lambda: self.tiny_deadline(rng)), (0.10, lambda: self.bad(rng)),
                   (0.07, lambda: self.probe(rng))]
        if self.args.grpc_client:
            actions.append((0.05, lambda: self.grpc(rng)))
        total = sum(weight for weight, _ in actions)
        while time.time() < self.deadline:
            pick = rng.random() * total
            for weight, action in actions:
                pick -= weight
                if pick <= 0:
                    break
            try:
                action()
            except Exception as error:  # noqa: BLE001: every failure is a finding
                self.violate(f"client {index}: {type(error).__name__}: {error}")


def watch_health(soak, stop):
    while not stop.wait(0.5):
        start = time.time()
        try:
            conn = soak.connection(2)
            conn.request("GET", "/health")
            status = conn.getresponse().status
            conn.close()
        except OSError as error:
            status = type(error).__name__
        latency = time.time() - start
        soak.health.append((latency, status))
        if status != 200 or latency > 2:
            soak.violate(f"/health: {status} after {latency:.2f} s")


def replay(soak, must_match):
    """Sends finished completions again, one at a time. Returns {kind: [replayed, differing,
    positions of the first differing token]}, kind "greedy" or "sampled", or "after a cache hit"
    when either run restored a prefix-cache state: a MesaNet state kept at a finished request's
    end was solved by decode steps, the one a recompute gets by the prefill's solves, and the two
    agree only to rounding, so such pairs are reported, not required to match."""
    rng = random.Random(7)
    picks = rng.sample(soak.finished, min(len(soak.finished), soak.args.replays))
    out = {"greedy": [0, 0, []], "sampled": [0, 0, []], "after a cache hit": [0, 0, []]}
    for body, tokens, cached in picks:
        status, text = soak.post("/v1/completions", body)
        if status != 200:
            soak.violate(f"replay: HTTP {status}: {text[:200]!r}")
            continue
        reply = json.loads(text)
        again = reply["choices"][0].get("token_ids")
        cached_again = (reply["usage"].get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        kind = ("after a cache hit" if cached or cached_again
                else "greedy" if body["temperature"] == 0 else "sampled")
        tally = out[kind]
        tally[0] += 1
        if again != tokens:
            tally[1] += 1
            tally[2].append(next((i for i, (a, b) in enumerate(zip(again, tokens)) if a != b),
                                 min(len(again), len(tokens))))
            if must_match and kind != "after a cache hit":
                soak.violate(f"replay: seed {body['seed']} gave {again[:8]}... now, "
                             f"{tokens[:8]}... under load")
    return out


def metrics(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    values = {}
    for line in text.splitlines():
        match = re.match(r"^([a-z_]+)(\{[^}]*\})? ([0-9.e+-]+)$", line)
        if match:
            values[match.group(1) + (match.group(2) or "")] = float(match.group(3))
    return values


def total(values, name):
    return sum(v for k, v in values.items() if k == name or k.startswith(name + "{"))


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--clients", type=int, default=24)
    parser.add_argument("--model", default="assets/default-model")
    parser.add_argument("--server", default="build/server/ridgeserve")
    parser.add_argument("--grpc-client", default="build/tools/client/ridge_grpc_client")
    parser.add_argument("--http-port", type=int, default=8141)
    parser.add_argument("--grpc-port", type=int, default=9141)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-rss-growth", type=float, default=0.25)
    parser.add_argument("--server-args", default="", help="more flags for serve")
    parser.add_argument("--replays", type=int, default=300)
    args = parser.parse_args()
    command = [args.server, "serve", "--model", args.model, "--http-port", str(args.http_port),
               "--host", "127.0.0.1", "--threads", str(args.threads), "--slots", "16",
               "--max-waiting", "48", "--max-prompt-tokens", "2048"] + args.server_args.split()
    on_gpu = "cuda" in args.server_args
    if args.grpc_client:
        command += ["--grpc-port", str(args.grpc_port)]
    log = open("/tmp/ridge_soak_server.log", "w")
    env = dict(os.environ)
    if not on_gpu:
        env["OPENBLAS_CORETYPE"] = "Sandybridge"
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    for _ in range(600):
        try:
            conn = http.client.HTTPConnection("127.0.0.1", args.http_port, timeout=1)
            conn.request("GET", "/ready")
            if conn.getresponse().status == 200:
                break
        except OSError:
            time.sleep(0.2)
    else:
        sys.exit("server not ready (log: /tmp/ridge_soak_server.log)")
    soak = Soak(args)
    before = metrics(args.http_port)
    threads = [threading.Thread(target=soak.client, args=(i,)) for i in range(args.clients)]
    started = time.time()
    stop_watch = threading.Event()
    watcher = threading.Thread(target=watch_health, args=(soak, stop_watch))
    watcher.start()
    for thread in threads:
        thread.start()
    samples = []
    while any(thread.is_alive() for thread in threads):
        time.sleep(5)
        samples.append((time.time() - started, rss_kib(server.pid)))
    for thread in threads:
        thread.join()
    stop_watch.set()
    watcher.join()
    # Dropped streams are cancelled within a step; give the engine a moment to settle.
    settled = None
    for _ in range(60):
        after = metrics(args.http_port)
        settled = (total(after, "ridgeserve_requests_running"),
                   total(after, "ridgeserve_requests_waiting"),
                   total(after, "ridgeserve_state_slots_used"))
        if settled == (0, 0, 0):
            break
        time.sleep(0.5)
    if settled != (0, 0, 0):
        soak.violate(f"not idle after the soak: running, waiting, slots used = {settled}")
    counted = total(after, "ridgeserve_requests_total") - total(before, "ridgeserve_requests_total")
    if counted < soak.engine_finished:
        soak.violate(f"ridgeserve_requests_total grew by {counted:.0f}, clients saw "
                     f"{soak.engine_finished} requests finish")
    replays = replay(soak, must_match=not on_gpu)
    if server.poll() is not None:
        soak.violate(f"server exited with {server.returncode}")
    warm = [rss for t, rss in samples if t >= min(60, args.minutes * 60 / 4)]
    growth = (warm[-1] - warm[0]) / warm[0] if len(warm) >= 2 and warm[0] > 0 else 0.0
    if growth > args.max_rss_growth:
        soak.violate(f"resident memory grew {growth * 100:.0f}% after the warm-up "
                     f"({warm[0]} -> {warm[-1]} KiB)")
    server.terminate()
    code = server.wait(timeout=60)
    if code != 0:
        soak.violate(f"server exited with {code} on SIGTERM")

    print(f"soak: {args.minutes:g} min, {args.clients} clients, {sum(soak.outcomes.values())} "
          f"calls, {soak.engine_finished} engine requests finished "
          f"({counted:.0f} counted by the server)")
    for (kind, outcome), count in sorted(soak.outcomes.items(), key=str):
        print(f"  {kind:16s} {str(outcome):10s} {count}")
    health = [latency for latency, _ in soak.health]
    if health:
        print(f"  /health watcher: {len(health)} probes, max {max(health) * 1000:.0f} ms, "
              f"{sum(1 for _, st in soak.health if st != 200)} failed")
    for kind, (replayed, differing, firsts) in replays.items():
        where = (f"; the first differing token at position {sorted(firsts)[len(firsts) // 2]} "
                 f"(median)" if firsts else "")
        print(f"  replayed {replayed} {kind} completions alone: {replayed - differing} gave the "
              f"same token ids{where}")
    if samples:
        print(f"  resident memory: {samples[0][1]} KiB at {samples[0][0]:.0f} s, "
              f"{max(r for _, r in samples)} KiB at most, {samples[-1][1]} KiB at the end "
              f"(growth after warm-up {growth * 100:.1f}%)")
    if soak.violations:
        print(f"{len(soak.violations)} violation(s):")
        for violation in soak.violations:
            print("  " + violation)
        sys.exit(1)
    print("nothing lost")


if __name__ == "__main__":
    main()
