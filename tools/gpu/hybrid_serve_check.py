"""End-to-end check of `serve --device cuda` on a hybrid_qwen3 model, run on the GPU machine:
two servers on the same random weights (--load-format random, the same seed), one on the GPU and
one on the CPU; greedy completions over HTTP (token ids in and out) and over gRPC
(ridge_grpc_client) must agree; then a load of long streamed prompts against the GPU server, and
its /metrics must show KV blocks in use and the GKA solver series.

    python3 tools/gpu/hybrid_serve_check.py [--config tools/bench/configs/hybrid-small-8l.json]
        [--server ridgeserve] [--grpc-client ridge_grpc_client] [--clients 16] [--prompt-len 1500]

Exits non-zero on any disagreement or failure.
"""
import argparse
import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request


def post(port, body, stream=False):
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions",
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        response = urllib.request.urlopen(request, timeout=600)
    except urllib.error.HTTPError as error:
        raise RuntimeError(f"HTTP {error.code} from port {port}: {error.read().decode()[:300]}")
    with response:
        if not stream:
            return json.loads(response.read())
        tokens = []
        for line in response:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for choice in chunk.get("choices", []):
                tokens += choice.get("token_ids", [])
        return tokens


def wait_ready(port, process):
    for _ in range(600):
        if process.poll() is not None:
            raise RuntimeError(f"server on port {port} exited with {process.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return
        except Exception:
            time.sleep(0.5)
    raise RuntimeError(f"server on port {port} not ready")


def prompt(i, length, vocab=32000):
    return [(t * 7919 + i * 104729 + 3) % (vocab - 10) + 5 for t in range(length)]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="tools/bench/configs/hybrid-small-8l.json")
    parser.add_argument("--server", default="ridgeserve")
    parser.add_argument("--grpc-client", default="ridge_grpc_client")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--prompt-len", type=int, default=1500)
    parser.add_argument("--device", default="cuda", help="the first server's (cpu: a dry run)")
    args = parser.parse_args()
    common = ["serve", "--model", args.config, "--load-format", "random", "--slots", "32",
              "--host", "127.0.0.1", "--served-model-name", "m"]
    gpu = subprocess.Popen([args.server] + common + ["--device", args.device, "--http-port", "8101",
                                                     "--grpc-port", "9101"])
    cpu = subprocess.Popen([args.server] + common + ["--device", "cpu", "--http-port", "8102",
                                                     "--grpc-port", "9102", "--threads", "8"])
    failures = 0
    try:
        wait_ready(8101, gpu)
        wait_ready(8102, cpu)
        # Greedy agreement, HTTP: prompts across blocks (16) and chunk sizes. bf16 weights on the
        # GPU against fp32 on the CPU can swap two nearly equal logits of a random model; a
        # divergence counts as such a tie only where the CPU ranks the GPU's token within
        # tie_gap nats of its own pick.
        tie_gap = 0.1
        for i, length in enumerate([1, 7, 33, 130, 517, 1100]):
            body = {"model": "m", "prompt": prompt(i, length), "max_tokens": 12,
                    "temperature": 0, "return_token_ids": True}
            a = post(8101, body)["choices"][0]["token_ids"]
            cpu_choice = post(8102, dict(body, logprobs=5))["choices"][0]
            b = cpu_choice["token_ids"]
            same = 0
            while same < min(len(a), len(b)) and a[same] == b[same]:
                same += 1
            print(f"http prompt {length:5d}: gpu {a}\n                   cpu {b}  common prefix {same}")
            if same == len(b) == len(a):
                continue
            top = cpu_choice["logprobs"]["top_logprobs"][same]
            cpu_lp = cpu_choice["logprobs"]["token_logprobs"][same]
            gpu_lp = top.get(f"token_id:{a[same]}") if same < len(a) else None
            if gpu_lp is not None and cpu_lp - gpu_lp < tie_gap:
                print(f"  a tie at token {same}: the CPU's logprobs {cpu_lp:.4f} (its pick) and "
                      f"{gpu_lp:.4f} (the GPU's)")
            else:
                print(f"  DIVERGED at token {same}: CPU top logprobs {top}")
                failures += 1
        # gRPC.
        ids = ",".join(map(str, prompt(9, 200)))
        outs = []
        for port in (9101, 9102):
            run = subprocess.run([args.grpc_client, "--address", f"127.0.0.1:{port}",
                                  "--prompt-ids", ids, "--max-tokens", "12", "--temperature", "0"],
                                 capture_output=True, text=True, timeout=300)
            outs.append(run.stdout.strip())
            print(f"grpc {port}: rc {run.returncode} out {run.stdout.strip()!r} err {run.stderr.strip()[-200:]!r}")
            if run.returncode != 0:
                failures += 1
        if outs[0] != outs[1]:
            print("gRPC greedy outputs differ")
            failures += 1
        # Load: long prompts, streamed, all at once.
        results, errors = [], []

        def client(i):
            try:
                body = {"model": "m", "prompt": prompt(100 + i, args.prompt_len + 37 * i),
                        "max_tokens": 64, "temperature": 0.8, "seed": i, "stream": True,
                        "return_token_ids": True}
                results.append(len(post(8101, body, stream=True)))
            except Exception as error:  # noqa: BLE001
                errors.append(repr(error))

        start = time.time()
        threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
        for t in threads:
            t.start()
        most_blocks = 0  # KV blocks in use, polled while the clients run
        while any(t.is_alive() for t in threads):
            with urllib.request.urlopen("http://127.0.0.1:8101/metrics", timeout=10) as response:
                for line in response.read().decode().splitlines():
                    if line.startswith("ridgeserve_kv_blocks_used "):
                        most_blocks = max(most_blocks, float(line.split()[1]))
            time.sleep(0.05)
        for t in threads:
            t.join()
        print(f"most KV blocks in use during the load: {most_blocks:.0f}")
        if most_blocks <= 0:
            failures += 1
        seconds = time.time() - start
        prompt_tokens = sum(args.prompt_len + 37 * i for i in range(args.clients))
        print(f"load: {args.clients} streamed clients, {prompt_tokens} prompt tokens, "
              f"{sum(results)} generated tokens in {seconds:.2f} s, errors {errors}")
        if errors or len(results) != args.clients:
            failures += 1
        with urllib.request.urlopen("http://127.0.0.1:8101/metrics", timeout=10) as response:
            metrics = response.read().decode()
        wanted = ["ridgeserve_kv_blocks ", "kv_blocks_used", "solver_iterations", "gka"]
        for name in wanted:
            lines = [l for l in metrics.splitlines() if name in l and not l.startswith("#")]
            print(f"/metrics {name}: {len(lines)} series, e.g. {lines[:2]}")
            if not lines:
                failures += 1
    finally:
        for p in (gpu, cpu):
            p.terminate()
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
    print("FAILED" if failures else "PASSED", f"({failures} failures)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
