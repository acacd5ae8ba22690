#!/usr/bin/env python3
"""What `logprobs` and `echo` cost `shamn serve`, in interleaved rounds on one
server (experiments/serving.md, stop 85):

- scoring: W windows of T + 1 random token ids, each one request as
  lm-evaluation-harness sends it (the ids as the prompt, echo, logprobs 1,
  max_tokens 0), C clients at once; against `shamn eval` on a token file of
  the same windows (its fused loss path, no logits kept), tokens scored a
  second, and the mean loss of both (they must agree);
- decode: C clients each asking for M greedy tokens after a short prompt,
  without logprobs and with logprobs 5: generated tokens a second.

The model is configs/small.toml's shape with the default's 32,000-token
vocabulary (what the log-softmax and top-k passes cost grows with it),
untrained: the costs do not depend on the weights' values.

Usage: logprobs_bench.py SHAMN WORKDIR [--rounds 5] [--threads 2] [--clients 8]
       [--windows 32] [--seq-len 256] [--decode-tokens 64]
"""
import argparse
import http.client
import json
import os
import random
import statistics
import struct
import subprocess
import threading
import time

parser = argparse.ArgumentParser()
parser.add_argument("shamn")
parser.add_argument("work")
parser.add_argument("--rounds", type=int, default=5)
parser.add_argument("--threads", type=int, default=2)
parser.add_argument("--clients", type=int, default=8)
parser.add_argument("--windows", type=int, default=32)
parser.add_argument("--seq-len", type=int, default=256)
parser.add_argument("--decode-tokens", type=int, default=64)
args = parser.parse_args()
os.makedirs(args.work, exist_ok=True)
here = os.path.dirname(os.path.abspath(__file__))
V = 32000


def run(*a):
    return subprocess.run([args.shamn, *a], check=True, capture_output=True, text=True).stdout


# The model: small's shape, a 32,000-token vocabulary, a tokenizer from the README.
with open(os.path.join(here, "..", "configs", "small.toml")) as f, open(f"{args.work}/model.toml", "w") as out:
    out.write("".join(f"vocab_size = {V}\n" if line.startswith("vocab_size") else line for line in f))
run("tokenizer", "train", "--input", os.path.join(here, "..", "README.md"), "--vocab", "512", "-o",
    f"{args.work}/tok.bpe")
run("init", f"{args.work}/model.toml", "-o", f"{args.work}/model.h5", "--seed", "1")
model = f"{args.work}/model.shq"
run("export", f"{args.work}/model.h5", "--quant", "int8", "--tokenizer", f"{args.work}/tok.bpe", "-o", model)

# W windows of T + 1 ids; the token file holds them back to back, each window's
# last token the next one's first, as eval cuts its windows.
T, W = args.seq_len, args.windows
rng = random.Random(7)
ids = [rng.randrange(V) for _ in range(W * T + 1)]
windows = [ids[w * T:(w + 1) * T + 1] for w in range(W)]
with open(f"{args.work}/windows.bin", "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(ids), *([0] * 253)))
    f.write(struct.pack(f"<{len(ids)}H", *ids))

server = subprocess.Popen([args.shamn, "--threads", str(args.threads), "serve", model, "--port", "0",
                           "--max-batch", str(args.clients), "--max-tokens-limit", "100000"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
line = server.stdout.readline()
port = int(line.split("127.0.0.1:")[1].split()[0])


def post(body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    payload = json.loads(r.read())
    c.close()
    if r.status != 200:
        raise SystemExit(f"HTTP {r.status}: {payload}")
    return payload


def in_clients(bodies):
    """Sends the bodies from C threads, each taking the next; returns the responses and the seconds."""
    out, lock, nxt = [None] * len(bodies), threading.Lock(), [0]

    def client():
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= len(bodies):
                return
            out[i] = post(bodies[i])

    threads = [threading.Thread(target=client) for _ in range(args.clients)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out, time.monotonic() - t0


def score_server():
    bodies = [{"prompt": w, "max_tokens": 0, "echo": True, "logprobs": 1, "temperature": 0} for w in windows]
    out, seconds = in_clients(bodies)
    logprobs = [v for r in out for v in r["choices"][0]["logprobs"]["token_logprobs"][1:]]
    return W * T / seconds, -sum(logprobs) / len(logprobs)


def score_eval():
    t0 = time.monotonic()
    r = json.loads(run("--threads", str(args.threads), "eval", model, "--data", f"{args.work}/windows.bin",
                       "--seq-len", str(T), "--max-windows", str(W)))
    return W * T / (time.monotonic() - t0), r["loss"]


def decode(logprobs):
    bodies = [{"prompt": [rng.randrange(V) for _ in range(8)], "max_tokens": args.decode_tokens,
               "temperature": 0, **({"logprobs": logprobs} if logprobs is not None else {})}
              for _ in range(2 * args.clients)]
    out, seconds = in_clients(bodies)
    return sum(r["usage"]["completion_tokens"] for r in out) / seconds


ratios = {"score": [], "decode": []}
for k in range(args.rounds):
    served, served_loss = score_server()
    evaluated, eval_loss = score_eval()
    plain, scored = decode(None), decode(5)
    ratios["score"].append(served / evaluated)
    ratios["decode"].append(scored / plain)
    print(f"round {k + 1}: scoring {served:,.0f} tok/s served (loss {served_loss:.5f}) / {evaluated:,.0f} eval "
          f"(loss {eval_loss:.5f}) = {served / evaluated:.3f}; decode {scored:,.0f} tok/s with logprobs 5 / "
          f"{plain:,.0f} without = {scored / plain:.3f}", flush=True)
    if abs(served_loss - eval_loss) > 1e-4 * max(1.0, eval_loss):
        raise SystemExit("the served and evaluated losses differ")
server.terminate()
server.wait()
print(f"median of {args.rounds} rounds ({args.clients} clients, {args.threads} threads, T {T}, {W} windows): "
      f"scoring served / eval {statistics.median(ratios['score']):.3f}, "
      f"decode with logprobs 5 / without {statistics.median(ratios['decode']):.3f}")
