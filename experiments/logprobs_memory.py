#!/usr/bin/env python3
"""What bounds `shamn serve`'s memory under many scoring clients at once
(experiments/serving.md, stop 86): C clients each send one prompt of P random
token ids with echo, logprobs K and max_tokens 0 (a scored prompt, as
lm-evaluation-harness sends it, with alternatives), and retry a 429 after a
short pause as its clients do. Every response's logprobs are built in memory,
so the server's peak RSS grows with how many are answered at once. Rounds
alternate servers with each of --bounds as --max-logprob-values-in-flight
(by default 2^20, the default 2^24, and 2^40: no effective bound); each round
reports the server's peak RSS (VmHWM), the wall time for all C requests, and
the 429s retried.

The model is configs/tiny.toml's shape (8,192 tokens), untrained: the memory
a value takes does not depend on the weights.

With --read-delay S each client waits S seconds before reading its answer,
so that finished responses wait in the server, as for slow readers.

With --training-heap the servers keep freed memory as `shamn train` does (each
of glibc's arenas up to 256 MiB), as `serve` did before stop 86.

Usage: logprobs_memory.py SHAMN WORKDIR [--rounds 2] [--clients 80]
       [--prompt-tokens 8191] [--logprobs 20] [--threads 2] [--max-batch 64]
       [--bounds B1,B2,...] [--read-delay S] [--training-heap]
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
parser.add_argument("--max-batch", type=int, default=64)
parser.add_argument("--bounds", default=f"{1 << 20},{1 << 24},{1 << 40}",
                    help="--max-logprob-values-in-flight of each server, in turn")
parser.add_argument("--read-delay", type=float, default=0,
                    help="seconds each client waits after sending before it reads (a slow reader)")
parser.add_argument("--training-heap", action="store_true",
                    help="the servers keep freed memory as training does (256 MiB an arena), as before stop 86")
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


# The allocator's variables, when set, replace shamn's own settings (core/heap_policy.h).
server_env = dict(os.environ)
if args.training_heap:
    server_env.update(MALLOC_MMAP_THRESHOLD_=str(32 << 20), MALLOC_TRIM_THRESHOLD_=str(256 << 20))


def one_round(bound):
    server = subprocess.Popen([args.shamn, "--threads", str(args.threads), "serve", model, "--port", "0",
                               "--max-batch", str(args.max_batch), "--max-queue", "64",
                               "--max-logprob-values-in-flight", str(bound)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=server_env)
    port = int(server.stdout.readline().split("127.0.0.1:")[1].split()[0])
    retries = [0] * args.clients
    failures = []

    def client(i):
        body = json.dumps({"prompt": prompts[i], "echo": True, "logprobs": args.logprobs, "max_tokens": 0})
        while True:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
            c.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
            time.sleep(args.read_delay)
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

    # The values held, as the server's gauge gives them, sampled while the clients run.
    most_held = [0]
    done = threading.Event()

    def sample():
        while not done.is_set():
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
            c.request("GET", "/metrics")
            for line in c.getresponse().read().decode().splitlines():
                if line.startswith("shamn_logprob_values_in_flight "):
                    most_held[0] = max(most_held[0], int(float(line.split()[1])))
            c.close()
            time.sleep(0.02)

    start = time.perf_counter()
    sampler = threading.Thread(target=sample)
    sampler.start()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    done.set()
    sampler.join()
    with open(f"/proc/{server.pid}/status") as f:
        peak_kb = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    server.terminate()
    server.wait(timeout=60)
    if failures:
        raise SystemExit(f"failed requests: {failures[:3]}")
    return peak_kb / 1024, wall, sum(retries), most_held[0]


bounds = [int(b) for b in args.bounds.split(",")]
results = {b: [] for b in bounds}
for r in range(args.rounds):
    for bound in bounds:
        mb, wall, retried, held = one_round(bound)
        results[bound].append((mb, wall, retried))
        print(json.dumps({"round": r, "bound": bound, "peak_rss_mb": round(mb, 1), "wall_s": round(wall, 2),
                          "retried_429": retried, "most_values_held": held}), flush=True)
for name, rows in results.items():
    print(f"--max-logprob-values-in-flight {name}: peak RSS median {statistics.median(m for m, _, _ in rows):.0f} MB, "
          f"wall median {statistics.median(w for _, w, _ in rows):.1f} s, "
          f"429s retried median {statistics.median(t for _, _, t in rows):.0f}")
