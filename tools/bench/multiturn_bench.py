#!/usr/bin/env python3
"""Multi-turn chat benchmark for ridgeserve: how much of each turn's prompt a prefix cache serves.

Standard library only. N simulated users (--users, one thread each) hold M-turn conversations
(--turns), sequential within a user, against ridgeserve's OpenAI-compatible HTTP API:

  turn 1 prompt   = system prompt (S tokens; one for all users with --shared-system, else one
                    per user) + user message 1 (U tokens)
  turn t+1 prompt = turn t's prompt + the model's answer to it (A generated tokens: max_tokens=A,
                    ignore_eos, temperature 0) + separator + user message t+1 (U tokens)

S, U and A come from --system-tokens, --user-tokens, --answer-tokens, each drawn per message with
--jitter (0.25: uniformly within +-25%); everything is seeded (--seed), so a run is repeatable.

--mode tokens (default): POST /v1/completions with "prompt" as token ids drawn uniformly from
  --token-range LO,HI (HI exclusive; the default fits the bundled 4096-id model) and
  "return_token_ids": the answer is appended as the ids the server generated. The separator
  (--separator-ids, default none) is a fixed id sequence put before every user message after the
  first one, standing for a turn marker; e.g. "--separator-ids 2,1" is <|im_end|><|im_start|> in
  assets/default-model's vocabulary.
--mode chat: POST /v1/chat/completions with system/user/assistant messages of random words (S and
  U count words there, not tokens); the answer is appended as text and the server's chat template
  renders the conversation. The prompt's token ids come from POST /tokenize (untimed).

Each request streams with usage and records prompt_tokens, cached tokens (usage.
prompt_tokens_details.cached_tokens, 0 when absent), TTFT (client clock: request sent -> first
chunk carrying a token) and total time. "Reusable" tokens: the prompt's longest common prefix
with the previous turn's prompt + answer ids (in tokens mode: prompt_tokens minus separator and
new user message); for turn 1, 0, or with --shared-system its common prefix with another user's
turn-1 prompt sent earlier (the system prompt). An exact-position prefix cache can serve at most
the reusable tokens; "cached/reusable" says how much of that it did.

Examples (--launch starts the command on a free port, waits for /health and /ready, runs,
then stops it with SIGTERM and waits):

  python3 tools/bench/multiturn_bench.py --url http://127.0.0.1:8000
  python3 tools/bench/multiturn_bench.py --launch \\
      "build/server/ridgeserve serve --model assets/default-model --http-port {port} --slots 8" \\
      --users 4 --turns 6 --shared-system --json /tmp/multiturn.json
  # the same workload twice: as given and with the flag appended, side by side with ratios
  python3 tools/bench/multiturn_bench.py --launch "..." --compare-flag "--no-prefix-cache"

Exits 2, printing the status and body, when the server answers an error or cannot be reached.
"""
import argparse
import http.client
import json
import random
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

WORDS = ("river stone light garden morning letter window silver answer market winter voice "
         "paper table simple early open quiet round green small story house road field carry "
         "bring follow remember number thousand people little great water always between").split()


class BenchError(Exception):
    """A failure the user must see: the run stops and the script exits 2."""


class Client:
    def __init__(self, url, api_key, timeout):
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise BenchError(f"--url must look like http://HOST:PORT, got {url!r}")
        self.url, self.parsed, self.timeout = url.rstrip("/"), parsed, timeout
        self.headers = {"Content-Type": "application/json"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"

    def _connect(self, timeout=None):
        cls = http.client.HTTPSConnection if self.parsed.scheme == "https" else http.client.HTTPConnection
        return cls(self.parsed.hostname, self.parsed.port, timeout=timeout or self.timeout)

    def _send(self, method, path, body=None, timeout=None):
        connection = self._connect(timeout)
        try:
            connection.request(method, path, body=None if body is None else json.dumps(body),
                               headers=self.headers)
            return connection, connection.getresponse()
        except (OSError, http.client.HTTPException) as error:
            connection.close()
            raise BenchError(f"cannot reach the server at {self.url} ({method} {path}): {error}")

    def status(self, path):
        """GET path's HTTP status, or None when nothing answers."""
        try:
            connection, response = self._send("GET", path, timeout=5)
            response.read()
            connection.close()
            return response.status
        except (BenchError, OSError, http.client.HTTPException):
            return None

    def post_json(self, path, body):
        connection, response = self._send("POST", path, body)
        data = response.read()
        connection.close()
        if response.status != 200:
            raise BenchError(f"POST {path}: HTTP {response.status}: {data.decode(errors='replace')}")
        return json.loads(data)

    def stream(self, path, body):
        """Streams one completion: {ttft, total, ids, text, usage}; times on the client clock."""
        start = time.perf_counter()
        connection, response = self._send("POST", path, body)
        if response.status != 200:
            data = response.read().decode(errors="replace")
            connection.close()
            raise BenchError(f"POST {path}: HTTP {response.status}: {data}")
        ttft, ids, text, usage = None, [], [], None
        try:
            for raw in response:
                line = raw.decode("utf-8", errors="replace").strip()
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                if payload == "[DONE]":
                    break
                chunk = json.loads(payload)
                if "error" in chunk:
                    raise BenchError(f"POST {path}: error in the stream: {payload}")
                for choice in chunk.get("choices") or []:
                    new_ids = choice.get("token_ids") or []
                    new_text = choice.get("text") or (choice.get("delta") or {}).get("content") or ""
                    if (new_ids or new_text) and ttft is None:
                        ttft = time.perf_counter() - start
                    ids += new_ids
                    text.append(new_text)
                if chunk.get("usage"):
                    usage = chunk["usage"]
        except (OSError, http.client.HTTPException) as error:
            raise BenchError(f"POST {path}: the stream broke off: {error}")
        finally:
            connection.close()
        if usage is None:
            raise BenchError(f"POST {path}: the stream ended without a usage chunk")
        return {"ttft": ttft, "total": time.perf_counter() - start, "ids": ids,
                "text": "".join(text), "usage": usage}


def jittered(rng, n, jitter):
    return max(1, round(n * (1.0 + rng.uniform(-jitter, jitter)))) if jitter > 0 else n


def common_prefix(a, b):
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class SharedState:
    """What all user threads see: turn-1 prompts already sent, records, the first error."""

    def __init__(self):
        self.lock = threading.Lock()
        self.first_prompts, self.records, self.error = [], [], None
        self.stop = threading.Event()


def make_text(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


def make_system(args, rng):
    n = jittered(rng, args.system_tokens, args.jitter)
    if args.mode == "chat":
        return make_text(rng, n)
    return [rng.randrange(*args.token_range) for _ in range(n)]


def run_user(args, client, user, shared_system, state):
    """One conversation: M turns, each waiting for the previous answer."""
    rng = random.Random(f"{args.seed}-user-{user}")
    system = shared_system if shared_system is not None else make_system(args, rng)
    if args.stagger > 0:
        time.sleep(user * args.stagger)
    history = [] if args.mode == "tokens" else [{"role": "system", "content": system}]
    seen = []  # token ids the server processed for this conversation so far: prompt + answer
    for turn in range(1, args.turns + 1):
        if state.stop.is_set():
            return
        n_user = jittered(rng, args.user_tokens, args.jitter)
        answer_tokens = jittered(rng, args.answer_tokens, args.jitter)
        common = {"max_tokens": answer_tokens, "temperature": 0, "ignore_eos": True,
                  "stream": True, "stream_options": {"include_usage": True},
                  "return_token_ids": True}
        if args.mode == "tokens":
            if turn == 1:
                history = list(system)
            else:
                history += args.separator_ids
            history += [rng.randrange(*args.token_range) for _ in range(n_user)]
            prompt_ids, path, body = list(history), "/v1/completions", dict(common, prompt=history)
        else:
            history.append({"role": "user", "content": make_text(rng, n_user)})
            prompt_ids = client.post_json("/tokenize", {"messages": history})["tokens"]
            path, body = "/v1/chat/completions", dict(common, messages=history)
        if turn > 1:
            reusable = common_prefix(seen, prompt_ids)
        else:
            with state.lock:
                earlier = list(state.first_prompts)
                state.first_prompts.append(prompt_ids)
            reusable = max((common_prefix(p, prompt_ids) for p in earlier), default=0) \
                if args.shared_system else 0
        reply = client.stream(path, body)
        usage = reply["usage"]
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
        record = {"user": user, "turn": turn, "prompt_tokens": usage["prompt_tokens"],
                  "completion_tokens": usage["completion_tokens"], "cached_tokens": cached,
                  "reusable_tokens": reusable, "ttft_s": reply["ttft"], "total_s": reply["total"]}
        with state.lock:
            state.records.append(record)
        seen = prompt_ids + reply["ids"]
        if args.mode == "tokens":
            history += reply["ids"]
        else:
            history.append({"role": "assistant", "content": reply["text"]})


def run_workload(args, client):
    """Runs every conversation at once; returns the records and the wall time."""
    state = SharedState()
    shared = make_system(args, random.Random(f"{args.seed}-system")) if args.shared_system else None

    def worker(user):
        try:
            run_user(args, client, user, shared, state)
        except Exception as error:  # the server's error, a malformed answer or a bug: stop all
            if not isinstance(error, BenchError):
                error = BenchError(f"user {user}: {type(error).__name__}: {error}")
            with state.lock:
                state.error = state.error or error
            state.stop.set()

    threads = [threading.Thread(target=worker, args=(u,), daemon=True) for u in range(args.users)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if state.error:
        raise state.error
    return state.records, time.perf_counter() - start


def percentile(values, q):
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q / 100.0 * (len(ordered) - 1)))))]


def ratio(a, b):
    return a / b if a is not None and b else None


def summarize(records, wall):
    turns = []
    for turn in sorted({r["turn"] for r in records}):
        rs = [r for r in records if r["turn"] == turn]
        ttfts = [r["ttft_s"] for r in rs if r["ttft_s"] is not None]
        reusable, cached = sum(r["reusable_tokens"] for r in rs), sum(r["cached_tokens"] for r in rs)
        turns.append({"turn": turn, "requests": len(rs),
                      "mean_prompt_tokens": sum(r["prompt_tokens"] for r in rs) / len(rs),
                      "mean_reusable_tokens": reusable / len(rs),
                      "mean_cached_tokens": cached / len(rs),
                      "cached_over_reusable": ratio(cached, reusable),
                      "ttft_p50_s": percentile(ttfts, 50), "ttft_p90_s": percentile(ttfts, 90),
                      "ttft_mean_s": sum(ttfts) / len(ttfts) if ttfts else None})
    prompt = sum(r["prompt_tokens"] for r in records)
    cached = sum(r["cached_tokens"] for r in records)
    reusable = sum(r["reusable_tokens"] for r in records)
    generated = sum(r["completion_tokens"] for r in records)
    totals = {"requests": len(records), "prompt_tokens": prompt, "cached_tokens": cached,
              "computed_prompt_tokens": prompt - cached, "reusable_tokens": reusable,
              "cached_over_reusable": ratio(cached, reusable),
              "ttft_p50_last_over_first": ratio(turns[-1]["ttft_p50_s"], turns[0]["ttft_p50_s"]),
              "wall_s": wall, "generated_tokens": generated, "generated_tok_per_s": generated / wall}
    return {"turns": turns, "totals": totals, "requests": records}


def fmt(value, spec="{:.1f}", scale=1.0):
    return "-" if value is None else spec.format(value * scale)


def print_summary(title, summary):
    print(f"\n== {title}")
    print("turn  reqs  prompt  reusable  cached  cached/reusable  TTFT p50    p90   mean (ms)")
    for t in summary["turns"]:
        print(f"{t['turn']:>4} {t['requests']:>5} {t['mean_prompt_tokens']:>7.1f} "
              f"{t['mean_reusable_tokens']:>9.1f} {t['mean_cached_tokens']:>7.1f} "
              f"{fmt(t['cached_over_reusable'], '{:.1%}'):>16} {fmt(t['ttft_p50_s'], scale=1e3):>9} "
              f"{fmt(t['ttft_p90_s'], scale=1e3):>6} {fmt(t['ttft_mean_s'], scale=1e3):>6}")
    s = summary["totals"]
    print(f"prompt tokens sent {s['prompt_tokens']}, computed {s['computed_prompt_tokens']} "
          f"(cached {s['cached_tokens']}); reusable {s['reusable_tokens']}, "
          f"cached/reusable {fmt(s['cached_over_reusable'], '{:.1%}')}")
    print(f"TTFT p50 last turn / turn 1: {fmt(s['ttft_p50_last_over_first'], '{:.2f}')}; "
          f"wall {s['wall_s']:.1f} s; {s['generated_tokens']} tokens generated, "
          f"{s['generated_tok_per_s']:.1f} tok/s")


def print_comparison(label_a, a, label_b, b):
    ta, tb = a["totals"], b["totals"]
    rows = [("prompt tokens sent", ta["prompt_tokens"], tb["prompt_tokens"], "{:.0f}"),
            ("cached tokens", ta["cached_tokens"], tb["cached_tokens"], "{:.0f}"),
            ("computed prompt tokens", ta["computed_prompt_tokens"], tb["computed_prompt_tokens"], "{:.0f}"),
            ("cached/reusable", ta["cached_over_reusable"], tb["cached_over_reusable"], "{:.1%}"),
            ("TTFT p50 turn 1 (ms)", a["turns"][0]["ttft_p50_s"], b["turns"][0]["ttft_p50_s"], "{:.1f}"),
            (f"TTFT p50 turn {a['turns'][-1]['turn']} (ms)", a["turns"][-1]["ttft_p50_s"],
             b["turns"][-1]["ttft_p50_s"], "{:.1f}"),
            ("wall (s)", ta["wall_s"], tb["wall_s"], "{:.1f}"),
            ("generated tok/s", ta["generated_tok_per_s"], tb["generated_tok_per_s"], "{:.1f}")]
    print(f"\n== comparison: A = {label_a}, B = {label_b}")
    print(f"{'':<26}{'A':>12}{'B':>12}{'B/A':>8}")
    for name, va, vb, spec in rows:
        scale = 1e3 if "(ms)" in name else 1.0
        print(f"{name:<26}{fmt(va, spec, scale):>12}{fmt(vb, spec, scale):>12}"
              f"{fmt(ratio(vb, va), '{:.2f}'):>8}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log_tail(path, lines=25):
    with open(path, errors="replace") as f:
        return "".join(f.readlines()[-lines:])


def start_server(template, extra, args):
    """Starts the --launch command on a free port; returns (process, client, log path)."""
    port = free_port()
    argv = shlex.split(template.replace("{port}", str(port))) + extra
    log = tempfile.NamedTemporaryFile(prefix="multiturn_server_", suffix=".log", delete=False)
    print(f"launching: {shlex.join(argv)}  (log: {log.name})", flush=True)
    try:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    except OSError as error:
        raise BenchError(f"cannot start {argv[0]!r}: {error}")
    finally:
        log.close()
    client = Client(f"http://127.0.0.1:{port}", args.api_key, args.timeout)
    deadline = time.monotonic() + args.launch_timeout
    try:
        for path in ("/health", "/ready"):
            while client.status(path) != 200:
                if process.poll() is not None:
                    raise BenchError(f"the server exited with code {process.returncode} before "
                                     f"{path} answered 200; its log ends:\n{log_tail(log.name)}")
                if time.monotonic() > deadline:
                    raise BenchError(f"{path} did not answer 200 within {args.launch_timeout:.0f}"
                                     f" s; the log ends:\n{log_tail(log.name)}")
                time.sleep(0.2)
    except BaseException:  # a timeout or Ctrl-C: leave no server behind
        stop_server(process)
        raise
    return process, client, log.name


def stop_server(process):
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def launched_run(args, extra):
    process, client, log = start_server(args.launch, extra, args)
    try:
        records, wall = run_workload(args, client)
    except BenchError as error:
        raise BenchError(f"{error}\n(server log: {log})")
    finally:
        stop_server(process)
    return summarize(records, wall)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", help="a running server (default http://127.0.0.1:8000)")
    p.add_argument("--launch", help="server command with {port}; started and stopped here")
    p.add_argument("--compare-flag", help="with --launch: run again with this appended, compare")
    p.add_argument("--launch-timeout", type=float, default=300.0, help="seconds to wait for /ready")
    p.add_argument("--api-key", help="sent as 'Authorization: Bearer KEY'")
    p.add_argument("--mode", choices=("tokens", "chat"), default="tokens")
    p.add_argument("--users", type=int, default=4, help="concurrent conversations (N)")
    p.add_argument("--turns", type=int, default=6, help="turns per conversation (M)")
    p.add_argument("--system-tokens", type=int, default=200, help="S (words in chat mode)")
    p.add_argument("--user-tokens", type=int, default=40, help="U (words in chat mode)")
    p.add_argument("--answer-tokens", type=int, default=24, help="A: max_tokens of each answer")
    p.add_argument("--jitter", type=float, default=0.0, help="0.25: lengths vary by +-25%%")
    p.add_argument("--shared-system", action="store_true", help="one system prompt for all users")
    p.add_argument("--token-range", default="100,4000", help="LO,HI: prompt ids in [LO, HI)")
    p.add_argument("--separator-ids", default="", help="ids put before each later user message")
    p.add_argument("--stagger", type=float, default=0.0, help="user i starts i*STAGGER s late")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per request")
    p.add_argument("--json", help="write the configuration, tables and every request here")
    argv = sys.argv[1:]  # "--compare-flag --no-x": argparse would take --no-x for an option
    if "--compare-flag" in argv[:-1]:
        i = argv.index("--compare-flag")
        argv[i:i + 2] = [f"--compare-flag={argv[i + 1]}"]
    args = p.parse_args(argv)
    try:
        args.token_range = tuple(int(x) for x in args.token_range.split(","))
        args.separator_ids = [int(x) for x in args.separator_ids.split(",") if x.strip()]
    except ValueError:
        p.error("--token-range takes LO,HI and --separator-ids a comma-separated list of ids")
    if len(args.token_range) != 2 or not 0 <= args.token_range[0] < args.token_range[1]:
        p.error("--token-range takes LO,HI with 0 <= LO < HI")
    if min(args.users, args.turns, args.system_tokens, args.user_tokens, args.answer_tokens) < 1:
        p.error("--users, --turns and the lengths must be >= 1")
    if not 0 <= args.jitter < 1:
        p.error("--jitter must be in [0, 1)")
    if args.url and args.launch:
        p.error("give --url or --launch, not both")
    if args.launch and "{port}" not in args.launch:
        p.error("the --launch command must contain {port}")
    if args.compare_flag and not args.launch:
        p.error("--compare-flag needs --launch")
    return args


def main():
    args = parse_args()
    config = {k: v for k, v in vars(args).items() if k != "api_key"}
    print(f"{args.users} users x {args.turns} turns, mode {args.mode}, S={args.system_tokens} "
          f"U={args.user_tokens} A={args.answer_tokens} jitter={args.jitter} "
          f"{'shared' if args.shared_system else 'per-user'} system prompt", flush=True)
    try:
        if not args.launch:
            client = Client(args.url or "http://127.0.0.1:8000", args.api_key, args.timeout)
            summary = summarize(*run_workload(args, client))
            print_summary(client.url, summary)
            output = {"config": config, **summary}
        else:
            runs = [("as given", [])]
            if args.compare_flag:
                runs.append((f"with {args.compare_flag}", shlex.split(args.compare_flag)))
            results = []
            for label, extra in runs:
                results.append((label, launched_run(args, extra)))
                print_summary(label, results[-1][1])
            if len(results) == 2:
                print_comparison(results[0][0], results[0][1], results[1][0], results[1][1])
            output = {"config": config, "runs": [dict(label=l, **s) for l, s in results]}
    except BenchError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(output, f, indent=1)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
