#!/usr/bin/env python3
"""Load on `shamn serve`: C concurrent clients, each sending streamed
completions back to back for a fixed time, for each C in a list. Per C it
reports generated tokens/s over the whole server, requests/s, and the p50/p99
of each request's latency (arrival to last token) and time to first token.

The server runs with --max-batch at least the largest C, so every client is
in the running batch (no queueing); its figures are then comparable with
`shamn bench --streams C --temperature 0.8` (the same decode steps and draws
without HTTP), which the script also runs, in the same session, for the ratio
server / bench. (Before stop 51 bench decoded greedily, about 9% faster at 64
streams than drawing at these settings.)

With --client PATH (build/experiments/bench/serve_load_client) the load comes
from that C++ program instead of Python threads: a few microseconds of CPU a
token instead of tens, so on a small machine the server keeps more of it.
--no-stream (with --client) sends whole-body requests (no first-token time).
With --max-batch below the largest C, the rest of the clients wait in the queue
(--max-queue is then C), and latency includes that wait. --stream-interval N
passes the server's option on (an event every N tokens after the first).
--adapter NAME=FILE (repeatable) serves LoRA adapters: request i picks
adapter i mod count by its "model" field, and bench gets the same adapters
(stream b runs adapter b mod count), so a batch mixes them in both.

Usage: serve_load.py SHAMN MODEL.shq [--clients 1,4,16,64] [--seconds 20]
       [--max-tokens 64] [--threads 2] [--client PATH] [--no-stream] [--max-batch N]
       [--stream-interval N] [--adapter NAME=FILE ...]
"""
import argparse
import http.client
import json
import statistics
import subprocess
import sys
import threading
import time

parser = argparse.ArgumentParser()
parser.add_argument("shamn")
parser.add_argument("model")
parser.add_argument("--clients", default="1,4,16,64")
parser.add_argument("--seconds", type=float, default=20)
parser.add_argument("--max-tokens", type=int, default=64)
parser.add_argument("--threads", type=int, default=2)
parser.add_argument("--client", help="the C++ load client (serve_load_client); default: Python threads")
parser.add_argument("--max-batch", type=int, help="the server's --max-batch (default: the largest C)")
parser.add_argument("--stream-interval", type=int, default=1, help="the server's --stream-interval")
parser.add_argument("--no-stream", action="store_true", help="with --client: whole-body requests")
parser.add_argument("--adapter", action="append", default=[], help="NAME=FILE: a LoRA adapter (Python clients)")
args = parser.parse_args()
if args.adapter and args.client:
    parser.error("--adapter runs with the Python clients (the C++ client sends no model field)")
adapter_names = [a.split("=", 1)[0] for a in args.adapter]
clients = [int(c) for c in args.clients.split(",")]
PROMPTS = ["The jury said", "It was a cold", "In the morning the", "He asked whether", "The committee"]


def quantile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * (len(values) - 1) + 0.5))] if values else float("nan")


def one_request(port, i):
    """(latency s, first token s, tokens) of one streamed completion."""
    body = {"prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": args.max_tokens, "temperature": 0.8,
            "seed": i, "stream": True}
    if adapter_names:
        body["model"] = adapter_names[i % len(adapter_names)]
    start = time.monotonic()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    c.request("POST", "/v1/completions", body=json.dumps(body))
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"request {i} answered {r.status}: {r.read().decode(errors='replace')}")
    first = None
    for raw in r:
        if raw.startswith(b"data: ") and first is None and not raw.startswith(b"data: [DONE]"):
            first = time.monotonic() - start
    c.close()
    return time.monotonic() - start, first, args.max_tokens


def load(port, n_clients):
    results, errors, lock = [], [], threading.Lock()
    stop_at = time.monotonic() + args.seconds

    def client(k):
        i = k
        while time.monotonic() < stop_at:
            try:
                r = one_request(port, i)
            except Exception as e:  # a thread's exception would end only that thread
                with lock:
                    errors.append(str(e))
                return
            with lock:
                results.append(r)
            i += n_clients

    start = time.monotonic()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(n_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - start
    if errors:
        sys.exit(f"serve_load: {len(errors)} of {n_clients} clients failed; the first: {errors[0]}")
    tokens = sum(r[2] for r in results)
    return {"clients": n_clients, "requests": len(results), "tok_s": tokens / wall, "req_s": len(results) / wall,
            "latency_p50": quantile([r[0] for r in results], 0.5), "latency_p99": quantile([r[0] for r in results], 0.99),
            "first_p50": quantile([r[1] for r in results], 0.5), "first_p99": quantile([r[1] for r in results], 0.99)}


def load_cpp(port, n_clients):
    # Exit status 1 means some requests failed: the JSON still holds the rest.
    out = subprocess.run([args.client, "--port", str(port), "--clients", str(n_clients), "--seconds",
                          str(args.seconds), "--max-tokens", str(args.max_tokens)] +
                         (["--no-stream"] if args.no_stream else []),
                         capture_output=True, text=True).stdout
    r = json.loads(out)
    for key in ("latency_p50", "latency_p99", "first_p50", "first_p99"):
        r[key] = float("nan") if r[key] is None else r[key]
    if r["failed"] or r["short_finish"]:
        print(f"note: {r['failed']} requests failed, {r['short_finish']} ended by a stop string "
              "(neither counted as tokens)")
    return r


def bench(streams):
    # The clients' sampling (temperature 0.8, the server's top-k 40 and top-p
    # 0.95), so the ratio leaves out what the draws cost.
    out = subprocess.run([args.shamn, "--threads", str(args.threads), "bench", args.model, "--prompt-tokens", "4",
                          "--decode-tokens", str(args.max_tokens), "--repeats", "3", "--streams", str(streams),
                          "--temperature", "0.8", "--top-k", "40", "--top-p", "0.95", "--json"]
                         + [x for a in args.adapter for x in ("--adapter", a.split("=", 1)[1])],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["decode_tok_s"]


max_batch = args.max_batch or max(clients)
server = subprocess.Popen([args.shamn, "--threads", str(args.threads), "serve", args.model, "--port", "0",
                           "--max-batch", str(max_batch), "--max-queue", str(max(clients))]
                          # Only when asked: binaries before stop 52 have no such option.
                          + (["--stream-interval", str(args.stream_interval)] if args.stream_interval != 1 else [])
                          + [x for a in args.adapter for x in ("--adapter", a)],
                          stdout=subprocess.PIPE, text=True)
port = int(server.stdout.readline().split("127.0.0.1:")[1].split()[0])
print(f"| clients | requests | server tok/s | bench --streams tok/s | server / bench | req/s | latency p50 | p99 | first token p50 | p99 |")
print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
try:
    for c in clients:
        r = load_cpp(port, c) if args.client else load(port, c)
        b = bench(min(c, max_batch))
        print(f"| {c} | {r['requests']} | {r['tok_s']:,.0f} | {b:,.0f} | {r['tok_s'] / b:.2f} | {r['req_s']:.1f} | "
              f"{r['latency_p50'] * 1e3:.0f} ms | {r['latency_p99'] * 1e3:.0f} ms | "
              f"{r['first_p50'] * 1e3:.1f} ms | {r['first_p99'] * 1e3:.1f} ms |", flush=True)
finally:
    server.terminate()
    server.wait()
