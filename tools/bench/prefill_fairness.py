"""How long a 4-token request waits while a long prompt prefills (issue 32, item 1): starts
`serve` on the default model (CPU, 2 threads), sends a prompt of N token ids, and 2 s later a
4-token greedy request; prints both times.

    python3 tools/bench/prefill_fairness.py 16384
"""
import json, threading, time, urllib.request, subprocess, sys
server = subprocess.Popen(["build/server/ridgeserve", "serve", "--model", "assets/default-model", "--http-port", "8131", "--served-model-name", "m", "--threads", "2"], stderr=subprocess.DEVNULL)
for _ in range(200):
    try:
        urllib.request.urlopen("http://127.0.0.1:8131/health", timeout=1); break
    except Exception: time.sleep(0.3)
def post(body):
    req = urllib.request.Request("http://127.0.0.1:8131/v1/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=600).read())
long_done = {}
def long_req():
    t = time.time(); post({"model": "m", "prompt": [(i * 7 + 3) % 1000 + 5 for i in range(int(sys.argv[1]))], "max_tokens": 1}); long_done["s"] = time.time() - t
th = threading.Thread(target=long_req); th.start()
time.sleep(2.0)
t = time.time(); post({"model": "m", "prompt": [5, 6, 7, 8], "max_tokens": 4, "temperature": 0}); short = time.time() - t
print(f"short request while a {sys.argv[1]}-token prompt prefills: {short:.2f} s")
th.join(); print(f"long prompt: {long_done['s']:.1f} s")
server.terminate(); server.wait()
