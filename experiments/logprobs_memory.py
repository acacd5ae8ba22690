#!/usr/bin/env python3
"""What bounds `shamn serve`'s memory under many scoring clients at once
(experiments/serving.md, stop 86): C clients each send one prompt of P random
token ids with echo, logprobs K and max_tokens 0 (a scored prompt, as
lm-evaluation-harness sends it, with alternatives), and retry a 429 after a
short pause as its clients do. Every response's logprobs are built in memory,
so the server's peak RSS grows with how many are answered at once. Rounds
alternate a server with the default --max-logprob-values-in-flight (2^22)
and one with no effective bound (2^40); each round reports the server's peak
RSS (VmHWM), the wall time for all C requests, and the 429s retried.

The model is configs/tiny.toml's shape (8,192 tokens), untrained: the memory
a value takes does not depend on the weights.

Usage: logprobs_memory.py SHAMN WORKDIR [--rounds 2] [--clients 80]
       [--prompt-tokens 8191] [--logprobs 20] [--threads 2]
"""
import argparse
import http.client
import json
import os
import random
import statistics
import subprocess
import threading
import time

parser = argparse.ArgumentParser()
parser.add_argument("shamn")
parser.add_argument("work")
parser.add_argument("--rounds", type=int, default=2)
parser.add_argument("--clients", type=int, default=80)
parser.add_argument("--prompt-tokens", type=int, default=8191)
parser.add_argument("--logprobs", type=int, default=20)
parser.add_argument("--threads", type=int, default=2)
args = parser.parse_args()
os.makedirs(args.work, exist_ok=True)
here = os.path.dirname(os.path.abspath(__file__))


def run(*a):
    return subprocess.run([args.shamn, *a], check=True, capture_output=True, text=True).stdout


config = os.path.join(here, "..", "configs", "tiny.toml")
run("tokenizer", "train", "--input", os.path.join(here, "..", "README.md"), "--vocab", "512", "-o",
    f"{args.work}/tok.bpe")
run("init", config, "-o", f"{args.work}/model.h5", "--seed", "1")
model = f"{args.work}/model.shq"
run("export", f"{args.work}/model.h5", "--quant", "int8", "--tokenizer", f"{args.work}/tok.bpe", "-o", model)
rng = random.Random(3)
prompts = [[rng.randrange(8192) for _ in range(args.prompt_tokens)] for _ in range(args.clients)]


def one_round(bound):
    server = subprocess.Popen([args.shamn, "--threads", str(args.threads), "serve", model, "--port", "0",
                               "--max-batch", "16", "--max-queue", "64",
                               "--max-logprob-values-in-flight", str(bound)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    port = int(server.stdout.readline().split("127.0.0.1:")[1].split()[0])
    retries = [0] * args.clients
    failures = []

    def client(i):
        body = json.dumps({"prompt": prompts[i], "echo": True, "logprobs": args.logprobs, "max_tokens": 0})
        while True:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
            c.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
            r = c.getresponse()
            payload = r.read()
            c.close()
            if r.status == 429:
                retries[i] += 1
                time.sleep(0.05)
                continue
            if r.status != 200 or len(json.loads(payload)["choices"][0]["logprobs"]["tokens"]) != len(prompts[i]):
                failures.append((r.status, payload[:200]))
            return

    start = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    with open(f"/proc/{server.pid}/status") as f:
        peak_kb = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    server.terminate()
    server.wait(timeout=60)
    if failures:
        raise SystemExit(f"failed requests: {failures[:3]}")
    return peak_kb / 1024, wall, sum(retries)


results = {"bounded": [], "unbounded": []}
for r in range(args.rounds):
    for name, bound in (("bounded", 1 << 22), ("unbounded", 1 << 40)):
        mb, wall, retried = one_round(bound)
        results[name].append((mb, wall, retried))
        print(json.dumps({"round": r, "server": name, "peak_rss_mb": round(mb, 1), "wall_s": round(wall, 2),
                          "retried_429": retried}), flush=True)
for name, rows in results.items():
    print(f"{name}: peak RSS median {statistics.median(m for m, _, _ in rows):.0f} MB, "
          f"wall median {statistics.median(w for _, w, _ in rows):.1f} s, "
          f"429s retried median {statistics.median(t for _, _, t in rows):.0f}")
