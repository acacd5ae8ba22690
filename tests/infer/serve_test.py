#!/usr/bin/env python3
"""`shamn serve` end to end, on loopback ports the server picks itself:

- concurrent clients (plain and streaming, greedy and sampled) get exactly the
  text `shamn generate` prints for the same prompt, seed and sampling;
- a stop string ends the text before it; /health and /metrics answer;
- lm-evaluation-harness's requests: its remote tokenizer (/tokenize,
  /detokenize, /tokenizer_info) and a batch of prompts scored with echo and
  logprobs, whose mean loss is `shamn eval`'s on the same tokens;
- malformed requests get HTTP 400 (404, 413) with a JSON error, raw garbage and
  half-sent requests are survived;
- a client that disconnects (streaming or not) cancels its request;
- LoRA: an adapter fine-tuned and exported through the CLI; requests with
  different adapters (and none) in one batch get generate --adapter's text;
  with a draft model too (greedy: the text of generate --adapter alone);
- a model error mid-request (injected at a named fault site) ends it with
  finish_reason "error" and its message in the response and the log;
- a full batch and queue answer 429; a request past the time limit ends with
  finish_reason "time_limit";
- SIGTERM stops the server with status 0.

Nothing waits on a timer to decide an outcome: where the test must observe the
server's state (a request queued, a cancellation counted) it polls /metrics
until the state is reached, with a generous deadline only against a hang.

Usage: serve_test.py SHAMN_BINARY CONFIG WORKDIR
"""
import atexit
import http.client
import json
import math
import os
import re
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time

shamn, config, work = sys.argv[1], sys.argv[2], sys.argv[3]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
DEADLINE = 120  # seconds: only a hung server takes this long
START = time.monotonic()


def say(message):
    print(f"[{time.monotonic() - START:6.1f} s] {message}", flush=True)


def fail(message):
    print("FAIL:", message)
    sys.exit(1)


def run(*args):
    return subprocess.run([shamn, *args], check=True, capture_output=True).stdout


# A tiny model with a tokenizer, as tests/infer/cli_infer.sh builds it.
with open(f"{work}/text.txt", "w") as f:
    for i in range(1, 201):
        f.write(f"Story {i}: the cat sat on the mat and the dog ran {i * 7} times.\n\n")
run("tokenizer", "train", "--input", f"{work}/text.txt", "--vocab", "320", "-o", f"{work}/tok.bpe")
# The model's vocabulary is the tokenizer's, so every sampled id is text.
with open(config) as f, open(f"{work}/model.toml", "w") as out:
    out.write("".join("vocab_size = 320\n" if line.startswith("vocab_size") else line for line in f))
run("init", f"{work}/model.toml", "-o", f"{work}/model.h5", "--seed", "3")
run("export", f"{work}/model.h5", "--quant", "int8", "--tokenizer", f"{work}/tok.bpe", "-o", f"{work}/m.shq")
model = f"{work}/m.shq"
# A draft for speculative decoding: the same shape from another seed, so it is often wrong.
run("init", f"{work}/model.toml", "-o", f"{work}/draft.h5", "--seed", "9")
run("export", f"{work}/draft.h5", "--quant", "int8", "--tokenizer", f"{work}/tok.bpe", "-o", f"{work}/d.shq")


def generate(prompt, max_tokens, temperature, top_k, top_p, seed, *extra):
    out = run("--threads", "1", "generate", model, "--prompt", prompt, "--max-tokens", str(max_tokens),
              "--temperature", str(temperature), "--top-k", str(top_k), "--top-p", str(top_p),
              "--seed", str(seed), *extra)
    assert out.startswith(prompt.encode()) and out.endswith(b"\n"), out
    return out[len(prompt.encode()):-1].decode("utf-8", errors="replace")


class Server:
    def __init__(self, *flags, env=None):
        self.proc = subprocess.Popen([shamn, "--threads", "2", "serve", model, "--port", "0", *flags],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        atexit.register(self.proc.kill)  # a failed check must not leave a server behind
        line = self.proc.stdout.readline()
        if "listening on http://127.0.0.1:" not in line:
            fail(f"the server did not start: {line!r} {self.proc.stderr.read()}")
        self.port = int(line.split("127.0.0.1:")[1].split()[0])

    def request(self, method, path, body=None, raw=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=DEADLINE)
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        c.request(method, path, body=data, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        payload = r.read().decode("utf-8", errors="replace")
        c.close()
        return r.status, payload

    def complete(self, body):
        status, payload = self.request("POST", "/v1/completions", body)
        if status != 200:
            fail(f"{body}: HTTP {status} {payload}")
        return json.loads(payload)

    def stream(self, body):
        """The text of every event, the last event's finish reason, and whether [DONE] came."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=DEADLINE)
        c.request("POST", "/v1/completions", body=json.dumps({**body, "stream": True}))
        r = c.getresponse()
        if r.status != 200 or not r.getheader("Content-Type", "").startswith("text/event-stream"):
            fail(f"stream: HTTP {r.status} {r.getheader('Content-Type')}")
        text, finish, done = "", None, False
        self.events = 0  # with text or the finish reason
        self.usage = None
        for raw in r:
            line = raw.decode().rstrip("\n")
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                done = True
                break
            event = json.loads(line[6:])
            if not event["choices"]:  # stream_options.include_usage's last event
                self.usage = event["usage"]
                continue
            self.events += 1
            text += event["choices"][0]["text"]
            finish = event["choices"][0]["finish_reason"] or finish
        c.close()
        return text, finish, done

    def metric(self, name):
        _, payload = self.request("GET", "/metrics")
        for line in payload.splitlines():
            if line.split(" ")[0] == name:
                return float(line.split(" ")[-1])
        fail(f"no metric {name} in {payload}")

    def wait_for(self, name, at_least):
        end = time.time() + DEADLINE
        while self.metric(name) < at_least:
            if time.time() > end:
                fail(f"{name} never reached {at_least}")
            time.sleep(0.02)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            out, err = self.proc.communicate(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            fail("the server did not stop on SIGTERM")
        if self.proc.returncode != 0 or "stopped" not in out:
            fail(f"the server exited {self.proc.returncode}: {out} {err}")
        return err


server = Server("--max-batch", "4", "--max-queue", "16", "--max-tokens-limit", "100000000")

# ---- health and the same text as generate, from concurrent clients ----
status, payload = server.request("GET", "/health")
if status != 200 or json.loads(payload)["status"] != "ok":
    fail(f"/health: {status} {payload}")
status, payload = server.request("GET", "/v1/models")
if status != 200 or [m["id"] for m in json.loads(payload)["data"]] != ["m.shq"]:
    fail(f"/v1/models without adapters: {status} {payload}")

cases = [("the cat", 40, 0.8, 40, 0.95, seed) for seed in range(1, 7)] + [
    ("the dog ran", 30, 0, 40, 0.95, 1), ("Story 3:", 50, 1.2, 0, 0.9, 11), ("mat", 1, 0.8, 40, 0.95, 2),
    ("the", 0, 0.8, 40, 0.95, 2)]
expected = [generate(*c) for c in cases]
results = [None] * (2 * len(cases))


def client(i):
    prompt, n, temp, k, p, seed = cases[i % len(cases)]
    body = {"prompt": prompt, "max_tokens": n, "temperature": temp, "top_k": k, "top_p": p, "seed": seed}
    if i < len(cases):
        r = server.complete(body)
        results[i] = (r["choices"][0]["text"], r["choices"][0]["finish_reason"], r["usage"]["completion_tokens"])
    else:
        text, finish, done = server.stream(body)
        results[i] = (text, finish, n if done else -1)


threads = [threading.Thread(target=client, args=(i,)) for i in range(len(results))]
for t in threads:
    t.start()
for t in threads:
    t.join()
for i, (text, finish, tokens) in enumerate(results):
    c = cases[i % len(cases)]
    kind = "plain" if i < len(cases) else "streamed"
    if text != expected[i % len(cases)]:
        fail(f"{kind} {c}: {text!r} differs from generate's {expected[i % len(cases)]!r}")
    if finish != "length" or tokens != c[1]:
        fail(f"{kind} {c}: finish {finish}, {tokens} tokens")
say(f"{len(results)} concurrent clients, plain and streamed: the text of shamn generate")

# ---- stop strings ----
# The longest text of the cases above, cut at a piece of its second half.
case = max(range(len(cases)), key=lambda i: len(expected[i]))
full, (prompt, n, temp, k, p, seed) = expected[case], cases[case]
if len(full) < 8:
    fail(f"the model generates too little text to test stop strings: {full!r}")
stop = full[len(full) // 2:len(full) // 2 + 3]
body = {"prompt": prompt, "max_tokens": n, "temperature": temp, "top_k": k, "top_p": p, "seed": seed}
r = server.complete({**body, "stop": ["\u2603", stop]})
cut = full[:full.index(stop)]
if r["choices"][0]["text"] != cut or r["choices"][0]["finish_reason"] != "stop":
    fail(f"stop {stop!r}: {r['choices'][0]} (expected {cut!r})")
text, finish, done = server.stream({**body, "stop": stop})
if text != cut or finish != "stop" or not done:
    fail(f"streamed stop {stop!r}: {text!r} {finish}")
say("stop strings: the text ends before the first one")

# ---- no-op values of controls the server does not apply; the usage event of a stream ----
r = server.complete({**body, "frequency_penalty": 0, "presence_penalty": 0.0, "logit_bias": {}, "suffix": ""})
if r["choices"][0]["text"] != full:
    fail(f"no-op penalties, logit_bias and suffix changed the text: {r['choices'][0]['text']!r}")
text, finish, done = server.stream({**body, "stream_options": {"include_usage": True}})
want_usage = {"prompt_tokens": r["usage"]["prompt_tokens"], "completion_tokens": n, "total_tokens":
              r["usage"]["prompt_tokens"] + n}
if text != full or not done or server.usage != want_usage:
    fail(f"include_usage: {server.usage} (expected {want_usage}), done {done}")
server.stream(body)
if server.usage is not None:
    fail(f"a stream without include_usage sent its usage: {server.usage}")
say("no-op penalties, logit_bias and suffix accepted; include_usage ends a stream with the usage")

# ---- penalties and logit_bias: generate's text with the same flags, not the text without ----
status, payload = server.request("POST", "/tokenize", {"prompt": full})
banned = json.loads(payload)["tokens"][0]
want = generate(prompt, n, temp, k, p, seed, "--frequency-penalty", "1.5", "--presence-penalty", "0.5",
                "--logit-bias", f"{banned}=-100")
r = server.complete({**body, "frequency_penalty": 1.5, "presence_penalty": 0.5, "logit_bias": {str(banned): -100}})
if r["choices"][0]["text"] != want or want == full:
    fail(f"penalties and logit_bias: {r['choices'][0]['text']!r}, generate's {want!r}, without them {full!r}")
say("frequency_penalty, presence_penalty and logit_bias: the text of generate with the same flags")

# ---- n: each prompt's j-th completion is generate's with seed + j ----
r = server.complete({"prompt": ["the cat", "the dog ran"], "n": 2, "max_tokens": 12, "temperature": 0.9, "seed": 5})
want = [generate(pr, 12, 0.9, 40, 0.95, s) for pr in ("the cat", "the dog ran") for s in (5, 6)]
got = [c["text"] for c in sorted(r["choices"], key=lambda c: c["index"])]
prompt_ids = [json.loads(server.request("POST", "/tokenize", {"prompt": pr})[1])["tokens"]
              for pr in ("the cat", "the dog ran")]
if got != want or r["usage"]["completion_tokens"] != 48 or \
        r["usage"]["prompt_tokens"] != sum(len(i) for i in prompt_ids):  # each prompt once, as vLLM counts
    fail(f"n 2 of 2 prompts: {got} (expected {want}), usage {r['usage']}")
say("n 2 of 2 prompts: four choices, each generate's text for its prompt and seed")

# ---- best_of: the n of best_of candidates with the highest mean log-probability a token ----
# The candidates are n = best_of's choices (generate's text for seed + j), scored by their logprobs;
# a stop string makes their lengths differ, so that the mean and the sum rank them apart.
ask = {"prompt": ["the cat", "the dog ran"], "max_tokens": 10, "temperature": 1.5, "top_k": 0, "top_p": 1.0,
       "stop": ["e"]}


def mean_logprob(c):  # OpenAI's rule; a candidate with no token scored ranks last
    lp = c["logprobs"]["token_logprobs"]
    return statistics.fmean(lp) if lp and c["finish_reason"] in ("length", "stop") else -math.inf


def ranked_candidates(seed):
    """Each prompt's 4 candidates, ranked by the mean (stable: earlier first on ties) and by the sum."""
    r = server.complete({**ask, "seed": seed, "n": 4, "logprobs": 0})
    every = sorted(r["choices"], key=lambda c: c["index"])
    groups = [every[4 * p:4 * p + 4] for p in range(2)]
    by_mean = [sorted(g, key=lambda c: -mean_logprob(c)) for g in groups]
    by_sum = [sorted(g, key=lambda c: -sum(c["logprobs"]["token_logprobs"])) for g in groups]
    return every, r["usage"], by_mean, by_sum


# The first seed whose two rules pick different texts (the model and seeds are fixed: found the same each run).
for seed in range(21, 81):
    every, usage, by_mean, by_sum = ranked_candidates(seed)
    if [c["text"] for g in by_mean for c in g[:2]] != [c["text"] for g in by_sum for c in g[:2]]:
        break
else:
    fail("no seed in [21, 80] gives candidates that the mean and the sum rank apart")
best = server.complete({**ask, "seed": seed, "n": 2, "best_of": 4})
want = [c["text"] for g in by_mean for c in g[:2]]
got = [c["text"] for c in best["choices"]]
if got != want or [c["index"] for c in best["choices"]] != [0, 1, 2, 3] or \
        any(c["logprobs"] is not None for c in best["choices"]) or len(set(c["text"] for c in every)) < 6:
    fail(f"best_of 4, n 2, seed {seed}: {best['choices']} (expected the texts {want} of "
         f"{[c['text'] for c in every]})")
if best["usage"] != usage:  # the same candidates as n = 4 drew
    fail(f"best_of's usage counts every candidate's tokens: {best['usage']}, n = 4's {usage}")
shown = server.complete({**ask, "seed": seed, "prompt": "the cat", "n": 1, "best_of": 4, "logprobs": 2})["choices"]
if shown[0]["text"] != want[0] or len(shown[0]["logprobs"]["top_logprobs"][0]) < 2:
    fail(f"best_of with logprobs 2: {shown}")
say(f"best_of 4, n 2 of 2 prompts (seed {seed}, a stop string): each prompt's two candidates with the highest "
    "mean log-probability a token, likeliest first, not those with the highest sum")

# ---- an HTTP/1.0 client: no chunked encoding (it has none), the body read to the close ----
for streamed in (False, True):
    request = json.dumps({**body, "stream": streamed}).encode()
    s = socket.create_connection(("127.0.0.1", server.port), timeout=DEADLINE)
    s.sendall(b"POST /v1/completions HTTP/1.0\r\nContent-Length: %d\r\n\r\n" % len(request) + request)
    answer = b""
    while chunk := s.recv(65536):
        answer += chunk
    s.close()
    head, _, payload = answer.partition(b"\r\n\r\n")
    if b" 200 " not in head.split(b"\r\n")[0] or b"chunked" in head.lower():
        fail(f"HTTP/1.0 (stream {streamed}): {head!r}")
    if streamed:
        events = [json.loads(line[6:]) for line in payload.decode().split("\n\n") if line.startswith("data: {")]
        text = "".join(e["choices"][0]["text"] for e in events)
        if text != full or not payload.endswith(b"data: [DONE]\n\n"):
            fail(f"HTTP/1.0 stream: {payload[-200:]!r}")
    elif json.loads(payload)["choices"][0]["text"] != full:
        fail(f"HTTP/1.0: {payload[:300]!r}")
# Keeping the connection (Connection: Keep-Alive), it gets a Content-Length instead.
for streamed in (False, True):
    request = json.dumps({**body, "stream": streamed}).encode()
    s = socket.create_connection(("127.0.0.1", server.port), timeout=DEADLINE)
    s.sendall(b"POST /v1/completions HTTP/1.0\r\nConnection: Keep-Alive\r\nContent-Length: %d\r\n\r\n"
              % len(request) + request)
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += s.recv(65536)
    head, _, payload = answer.partition(b"\r\n\r\n")
    length = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
    if not length or b"chunked" in head.lower():
        fail(f"HTTP/1.0 keep-alive (stream {streamed}): {head!r}")
    while len(payload) < int(length.group(1)):
        payload += s.recv(65536)
    s.close()
    text = ("".join(json.loads(line[6:])["choices"][0]["text"] for line in payload.decode().split("\n\n")
                    if line.startswith("data: {")) if streamed else json.loads(payload)["choices"][0]["text"])
    if text != full or (streamed and not payload.endswith(b"data: [DONE]\n\n")):
        fail(f"HTTP/1.0 keep-alive (stream {streamed}): {payload[:300]!r}")
say("an HTTP/1.0 client gets an unchunked body, read to the close or, keeping the connection, by its length")

# ---- lm-evaluation-harness's local-completions with the server's tokenizer ----
# It finds /tokenizer_info and /tokenize, tokenizes context and continuation
# there, and scores them in one request: echo, logprobs 1, max_tokens 1, the
# prompts as token ids, a batch of them; a continuation's log-likelihood is the
# sum of token_logprobs[ctxlen:-1], and it is greedy where each token's logprob
# is the largest of its top_logprobs.
status, payload = server.request("GET", "/tokenizer_info")
if status != 200 or "eos_token" not in json.loads(payload):
    fail(f"/tokenizer_info: {status} {payload}")
pairs = [("Story 12: the cat", " sat on the mat"), ("the dog ran", " 84 times."), ("mat", " and")]
scored = []
for context, continuation in pairs:
    ids = []
    for text in (context, continuation):
        status, payload = server.request("POST", "/tokenize", {"prompt": text, "add_special_tokens": False})
        tokens = json.loads(payload)["tokens"] if status == 200 else fail(f"/tokenize: {status} {payload}")
        status, payload = server.request("POST", "/detokenize", {"tokens": tokens})
        if status != 200 or json.loads(payload)["prompt"] != text:
            fail(f"/detokenize of /tokenize's {tokens}: {status} {payload} (expected {text!r})")
        ids.append(tokens)
    scored.append((ids[0] + ids[1], len(ids[0])))
r = server.complete({"model": "m.shq", "prompt": [ids for ids, _ in scored], "temperature": 0, "max_tokens": 1,
                     "logprobs": 1, "seed": 1234, "echo": True})
choices = sorted(r["choices"], key=lambda c: c["index"])
if [c["index"] for c in choices] != [0, 1, 2] or r["usage"]["prompt_tokens"] != sum(len(i) for i, _ in scored):
    fail(f"a batch of 3 scored prompts: {r}")
for (ids, ctxlen), (context, continuation), c in zip(scored, pairs, choices):
    lp = c["logprobs"]
    if len(lp["token_logprobs"]) != len(ids) + 1 or lp["token_logprobs"][0] is not None or \
            lp["top_logprobs"][0] is not None or not c["text"].startswith(context + continuation):
        fail(f"echo with logprobs of {ids}: {c}")
    if "".join(lp["tokens"]) != c["text"] or lp["text_offset"][ctxlen] != len(context):
        fail(f"tokens and text_offset of {ids}: {lp}")
    for value, top in zip(lp["token_logprobs"][1:], lp["top_logprobs"][1:]):
        if not value <= 0 or not 1 <= len(top) <= 2 or value > max(top.values()) + 1e-6:
            fail(f"a token's logprob {value} against its top {top}")
    # The generated token is greedy: its logprob is its top one's.
    if lp["token_logprobs"][-1] != max(lp["top_logprobs"][-1].values()):
        fail(f"the greedy token's logprob is not the largest: {lp['top_logprobs'][-1]}")
    loglikelihood = sum(lp["token_logprobs"][ctxlen:-1])
    # The same prompt's loss by `shamn eval` on a token file of exactly its tokens
    # (one window of T = len(ids) - 1 predictions): minus the mean of its logprobs.
    with open(f"{work}/scored.bin", "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(ids), *([0] * 253)))
        f.write(struct.pack(f"<{len(ids)}H", *ids))
    evaluated = json.loads(run("--threads", "1", "eval", model, "--data", f"{work}/scored.bin", "--seq-len",
                               str(len(ids) - 1)))
    mean = -sum(lp["token_logprobs"][1:-1]) / (len(ids) - 1)
    if abs(mean - evaluated["loss"]) > 1e-4 * max(1.0, evaluated["loss"]):
        fail(f"scored prompt {ids}: mean loss {mean} against shamn eval's {evaluated['loss']}")
    say(f"lm-eval's request for {context!r} + {continuation!r}: log-likelihood {loglikelihood:.4f}, "
        f"mean loss {mean:.5f} = shamn eval's {evaluated['loss']:.5f}")
# text_offset counts characters, as clients index the text: each token found at its offset.
r = server.complete({"prompt": "h\u00e9llo w\u00f6rld ok", "max_tokens": 3, "logprobs": 0, "echo": True,
                     "temperature": 0})
c = r["choices"][0]
for name, offset in zip(c["logprobs"]["tokens"], c["logprobs"]["text_offset"]):
    if not name.startswith("bytes:") and c["text"][offset:offset + len(name)] != name:
        fail(f"token {name!r} is not at text_offset {offset} of {c['text']!r}")
if not all(o <= len(c["text"]) for o in c["logprobs"]["text_offset"]):
    fail(f"a text_offset past the text: {c}")
# A prompt that ends inside a character (H, then two of the euro sign's three
# bytes) whose first generated token (byte 0xac, forced) completes it: counted
# as the whole text decodes, "H\u20ac\ufffd" (the second 0xac stands alone).
r = server.complete({"prompt": [72, 226, 130], "max_tokens": 2, "logprobs": 0, "echo": True, "temperature": 0,
                     "logit_bias": {"172": 100}})
c = r["choices"][0]
if c["text"] != "H\u20ac\ufffd" or c["logprobs"]["text_offset"] != [0, 1, 2, 2, 2]:
    fail(f"offsets across a character the prompt cuts: {c['text']!r} {c['logprobs']['text_offset']}")
# Only the prompt scored (max_tokens 0), streamed: the echo and its logprobs arrive, and nothing more.
text, finish, done = server.stream({"prompt": "the cat", "max_tokens": 0, "echo": True, "logprobs": 0})
if text != "the cat" or finish != "length" or not done:
    fail(f"a streamed prompt scored alone: {text!r} {finish} {done}")
say("lm-eval's remote tokenizer and loglikelihood requests answered; prompt losses equal shamn eval's")

# ---- malformed requests ----
bad = [
    (b"{", 400), (b"", 400), (b"[]", 400), (b'"prompt"', 400), (b"\xff\xfe", 400),
    (json.dumps({}), 400), (json.dumps({"prompt": 5}), 400), (json.dumps({"prompt": ""}), 400),
    (json.dumps({"prompt": "a", "max_tokens": -1}), 400), (json.dumps({"prompt": "a", "max_tokens": 1e9}), 400),
    (json.dumps({"prompt": "a", "max_tokens": "5"}), 400), (json.dumps({"prompt": "a", "max_tokens": 10**30}), 400),
    (json.dumps({"prompt": "a", "temperature": -1}), 400), (json.dumps({"prompt": "a", "temperature": "hot"}), 400),
    (json.dumps({"prompt": "a", "top_p": 0}), 400), (json.dumps({"prompt": "a", "top_p": 1.5}), 400),
    (json.dumps({"prompt": "a", "top_k": -3}), 400), (json.dumps({"prompt": "a", "seed": -1}), 400),
    (json.dumps({"prompt": "a", "stop": 5}), 400), (json.dumps({"prompt": "a", "stop": ["a"] * 5}), 400),
    (json.dumps({"prompt": "a", "stop": [""]}), 400), (json.dumps({"prompt": "a", "stream": "yes"}), 400),
    (json.dumps({"prompt": "a", "n": 65}), 400), (json.dumps({"prompt": "a", "n": 2, "best_of": 1}), 400),
    (json.dumps({"prompt": "a", "best_of": 2, "stream": True}), 400), (json.dumps({"prompt": "a", "best_of": 65}), 400), (json.dumps({"prompt": "a", "logprobs": 21}), 400),
    (json.dumps({"prompt": "a", "echo": "yes"}), 400), (json.dumps({"prompt": "a" * 100000}), 400),
    (json.dumps({"prompt": [1, 320]}), 400), (json.dumps({"prompt": [[1], []]}), 400),
    (json.dumps({"prompt": ["a", "b"], "stream": True}), 400), (json.dumps({"prompt": ["a"] * 65}), 400),
    (json.dumps({"prompt": "a", "presence_penalty": "1"}), 400),
    (json.dumps({"prompt": "a", "frequency_penalty": 3}), 400),
    (json.dumps({"prompt": "a", "logit_bias": {"320": -100}}), 400),
    (json.dumps({"prompt": "a", "logit_bias": {"4": 200}}), 400),
    (json.dumps({"prompt": "a", "logit_bias": {"05": 1, "5": 2}}), 400),
    (json.dumps({"prompt": ["a"] * 21}), 400),  # more completions than --max-batch + --max-queue hold
    (json.dumps({"prompt": [[1] * 8000] * 8, "echo": True, "logprobs": 20, "max_tokens": 0}), 400),
    (json.dumps({"prompt": "a", "logit_bias": []}), 400), (json.dumps({"prompt": "a", "suffix": " end"}), 400),
    (json.dumps({"prompt": "a", "stream_options": {"include_usage": True}}), 400),
    (json.dumps({"prompt": "a", "stream": True, "stream_options": {"include_usage": 1}}), 400),
    (json.dumps({"prompt": "a", "stream": True, "stream_options": True}), 400),
]
for body, want in bad:
    status, payload = server.request("POST", "/v1/completions", raw=body)
    try:
        message = json.loads(payload)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        fail(f"{body[:60]!r}: not a JSON error: {payload[:200]!r}")
    if status != want or not message:
        fail(f"{body[:60]!r}: HTTP {status} {payload[:200]} (expected {want})")
# A body over 1 MiB.
s = socket.create_connection(("127.0.0.1", server.port), timeout=DEADLINE)
size = (1 << 20) + 1
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % size + b"x" * size)
answer = b""
while b"}" not in answer:
    chunk = s.recv(4096)
    if not chunk:
        break
    answer += chunk
s.close()
if not answer.startswith(b"HTTP/1.1 413") or b'"error"' not in answer:
    fail(f"a body over 1 MiB: {answer[:300]!r}")
status, payload = server.request("GET", "/v1/nothing")
if status != 404 or "error" not in json.loads(payload):
    fail(f"unknown endpoint: {status} {payload}")
for junk in (b"\x00\x01\x02garbage\r\n\r\n", b"POST /v1/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"pro",
             b"GET / HTTP/1.1\r\n" + b"X: " + b"y" * 100000 + b"\r\n\r\n"):
    s = socket.create_connection(("127.0.0.1", server.port), timeout=DEADLINE)
    s.sendall(junk)
    s.close()
if server.request("GET", "/health")[0] != 200:
    fail("the server did not survive malformed input")
say(f"{len(bad) + 2} malformed requests refused with a JSON error; raw garbage survived")

# ---- a client that disconnects cancels its request ----
cancelled = server.metric('shamn_requests_finished_total{reason="cancelled"}')
s = socket.create_connection(("127.0.0.1", server.port), timeout=DEADLINE)
body = json.dumps({"prompt": "the cat", "max_tokens": 100000000, "stream": True}).encode()
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
          + str(len(body)).encode() + b"\r\n\r\n" + body)
got = b""
while got.count(b"data: ") < 2:
    chunk = s.recv(4096)
    if not chunk:
        fail("the stream ended early")
    got += chunk
s.close()
server.wait_for('shamn_requests_finished_total{reason="cancelled"}', cancelled + 1)
s = socket.create_connection(("127.0.0.1", server.port), timeout=DEADLINE)
body = json.dumps({"prompt": "the dog", "max_tokens": 100000000}).encode()
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + str(len(body)).encode()
          + b"\r\n\r\n" + body)
server.wait_for("shamn_running_streams", 1)
s.close()
server.wait_for('shamn_requests_finished_total{reason="cancelled"}', cancelled + 2)
say("disconnected clients (streaming and not): their requests cancelled")

# ---- --stream-interval: an event every N tokens after the first, the same text ----
spaced = Server("--stream-interval", "8", "--max-batch", "4", "--allow-origin", "http://localhost:3000")
for c, want in list(zip(cases, expected))[:2] + list(zip(cases, expected))[7:8]:
    prompt, n, temp, k, p, seed = c
    text, finish, done = spaced.stream({"prompt": prompt, "max_tokens": n, "temperature": temp, "top_k": k,
                                        "top_p": p, "seed": seed})
    if text != want or finish != "length" or not done:
        fail(f"--stream-interval 8 {c}: {text!r} {finish} differs from generate's {want!r}")
    # The first token's event, one for each 8 more, and the end's.
    if not 1 <= spaced.events <= 2 + (n - 1) // 8:
        fail(f"--stream-interval 8 {c}: {spaced.events} events for {n} tokens")


def cors(srv, method, path, origin, body=None):
    """The status and the Access-Control-Allow-Origin header of a request from `origin`."""
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=DEADLINE)
    c.request(method, path, body=body, headers={"Origin": origin, "Content-Type": "application/json"})
    r = c.getresponse()
    r.read()
    c.close()
    return r.status, r.getheader("Access-Control-Allow-Origin"), r.getheader("Access-Control-Allow-Methods")


page = "http://localhost:3000"
short = json.dumps({"prompt": "the", "max_tokens": 2})
for srv, origin, want in ((spaced, page, (204, page, "GET, POST, OPTIONS")), (spaced, "http://evil.example", (204, None,
                          "GET, POST, OPTIONS")), (server, page, (404, None, None))):
    got = cors(srv, "OPTIONS", "/v1/completions", origin)
    if got != want:
        fail(f"CORS preflight from {origin} (--allow-origin {srv is spaced}): {got}, expected {want}")
c = http.client.HTTPConnection("127.0.0.1", spaced.port, timeout=DEADLINE)
c.request("OPTIONS", "/v1/completions", headers={"Origin": page, "Access-Control-Request-Method": "POST",
                                                 "Access-Control-Request-Headers": "content-type,x-stainless-os"})
r = c.getresponse()
r.read()
c.close()
if r.status != 204 or r.getheader("Access-Control-Allow-Headers") != "content-type,x-stainless-os":
    fail(f"CORS preflight asking for its headers: {r.status} {r.getheader('Access-Control-Allow-Headers')}")
for srv, origin, want in ((spaced, page, page), (spaced, "http://evil.example", None), (server, page, None)):
    for method, path, body in (("POST", "/v1/completions", short), ("GET", "/v1/models", None),
                               ("GET", "/v1/nothing", None)):
        got = cors(srv, method, path, origin, body)[1]
        if got != want:
            fail(f"CORS {method} {path} from {origin} (--allow-origin {srv is spaced}): {got}, expected {want}")
spaced.stop()
server.stop()
for origin in ("localhost:3000", "http://a.example/", "http://a\r\nX-Evil: 1"):
    refused = subprocess.run([shamn, "serve", model, "--allow-origin", origin], capture_output=True, text=True,
                             timeout=DEADLINE)
    if refused.returncode == 0 or "is not an origin" not in refused.stderr:
        fail(f"--allow-origin {origin!r}: exit {refused.returncode}, {refused.stderr!r}")
say("--allow-origin: preflight and answers carry the origin it names, no other; none without it")
refused = subprocess.run([shamn, "serve", model, "--stream-interval", "0"], capture_output=True, text=True,
                         timeout=DEADLINE)
if refused.returncode == 0 or "--stream-interval 0 must lie in [1, 1024]" not in refused.stderr:
    fail(f"--stream-interval 0: exit {refused.returncode}, {refused.stderr!r}")
say("--stream-interval 8: at most one event in 8 tokens after the first, generate's text; 0 is refused")

# ---- a model error mid-request (the fault tool's serve.step: the 3rd batched step's forward fails) ----
# Steps 1 and 2 give two tokens; the request then ends with finish_reason
# "error", its message beside the choices (whole or in the last event) and in
# the server's log; the fault strikes once, and the next request runs.
for streamed in (False, True):
    faulty = Server(env={**os.environ, "SHAMN_FAULT": "serve.step:3:eio"})
    body = {"prompt": "the cat", "max_tokens": 10, "temperature": 0, "stream": streamed}
    status, payload = faulty.request("POST", "/v1/completions", body)
    last = (json.loads(payload) if not streamed else
            [json.loads(e[6:]) for e in payload.split("\n\n") if e.startswith("data: {")][-1])
    if status != 200 or last["choices"][0]["finish_reason"] != "error" or \
            "SHAMN_FAULT serve.step" not in last.get("error", {}).get("message", ""):
        fail(f"a failed step (stream {streamed}): {status} {payload[-400:]}")
    if not streamed and last["usage"]["completion_tokens"] != 2:
        fail(f"a failed step: {last['usage']} (2 tokens before it)")
    if faulty.complete({**body, "stream": False})["choices"][0]["finish_reason"] != "length":
        fail("the request after a failed step did not run")
    log = faulty.stop()
    if "cmpl-1 (choice 0) failed: the model's forward failed (SHAMN_FAULT serve.step)" not in log:
        fail(f"a failed step is not in the server's log: {log!r}")
say("a model error mid-request: finish_reason error, its message in the response and the log; the next runs")

# ---- speculative decoding: the text of generate --draft ----
drafted = Server("--draft", f"{work}/d.shq", "--draft-tokens", "3", "--max-batch", "2")
spec_cases = cases[:3] + cases[6:8]
spec_expected = [generate(*c, "--draft", f"{work}/d.shq", "--draft-tokens", "3") for c in spec_cases]
spec_results = [None] * len(spec_cases)


def spec_client(i):
    prompt, n, temp, k, p, seed = spec_cases[i]
    r = drafted.complete({"prompt": prompt, "max_tokens": n, "temperature": temp, "top_k": k, "top_p": p,
                          "seed": seed})
    spec_results[i] = r["choices"][0]["text"]


threads = [threading.Thread(target=spec_client, args=(i,)) for i in range(len(spec_cases))]
for t in threads:
    t.start()
for t in threads:
    t.join()
for c, got, want in zip(spec_cases, spec_results, spec_expected):
    if got != want:
        fail(f"--draft {c}: {got!r} differs from generate --draft's {want!r}")
# What speculative decoding cannot give is refused as the client's error, naming it.
for extra in ({"logprobs": 1}, {"presence_penalty": 0.5}, {"logit_bias": {"5": 1}}):
    status, payload = drafted.request("POST", "/v1/completions", {"prompt": "the", "max_tokens": 2, **extra})
    if status != 400 or "not available with a draft model" not in json.loads(payload)["error"]["message"]:
        fail(f"--draft server given {extra}: {status} {payload}")
status, payload = drafted.request("POST", "/v1/completions", {"prompt": "the", "max_tokens": 2, "best_of": 2})
if status != 400 or "speculative decoding (--draft) does not keep" not in json.loads(payload)["error"]["message"]:
    fail(f"--draft server given best_of 2: {status} {payload}")
drafted.stop()
bad = subprocess.run([shamn, "serve", model, "--draft", f"{work}/model.h5"], capture_output=True, text=True)
if bad.returncode != 1 or not bad.stderr.startswith("shamn: error:"):
    fail(f"serve with a checkpoint as draft: {bad.returncode} {bad.stderr}")
say(f"--draft: {len(spec_cases)} concurrent requests get the text of generate --draft; a bad draft is refused")

# ---- LoRA adapters: fine-tune, export, serve several in one batch ----
run("prepare", "--input", f"{work}/text.txt", "--tokenizer", f"{work}/tok.bpe", "--out", f"{work}/data")
run("train", f"{work}/model.toml", "--set", f'data.train_path="{work}/data/train.bin"',
    "--set", f'data.val_path="{work}/data/val.bin"', "--set", f'data.tokenizer="{work}/tok.bpe"',
    "--set", f'train.init_from="{work}/model.h5"', "--set", f'train.out_dir="{work}/lora"',
    "--set", "train.max_steps=4", "--set", "train.checkpoint_every=4", "--set", "train.eval_every=4",
    "--set", "train.eval_batches=1", "--set", "train.batch_size=2", "--set", "train.seq_len=32",
    "--set", "optim.lr=0.05", "--set", "optim.warmup_steps=0",
    "--set", "lora.rank=4", "--set", "lora.alpha=8.0",
    "--set", 'lora.targets=["layers.*.mixer.out", "layers.*.moe.experts.*.up", "layers.*.moe.router_expert"]')
adapter_ckpt = sorted(p for p in os.listdir(f"{work}/lora") if p.startswith("ckpt_"))[-1]
adapter_ckpt = f"{work}/lora/{adapter_ckpt}"
run("export", adapter_ckpt, "--base", f"{work}/model.h5", "--quant", "int8", "-o", f"{work}/a8.shq")
run("export", adapter_ckpt, "--base", f"{work}/model.h5", "--quant", "f32", "-o", f"{work}/a32.shq")
for args, why in (([adapter_ckpt, "-o", f"{work}/x.shq"], "pass the checkpoint it was trained on with --base"),
                  ([adapter_ckpt, "--base", f"{work}/draft.h5", "-o", f"{work}/x.shq"], "trained on another base"),
                  ([f"{work}/model.h5", "--base", f"{work}/model.h5", "-o", f"{work}/x.shq"], "is a whole model")):
    bad = subprocess.run([shamn, "export", *args], capture_output=True, text=True)
    if bad.returncode != 1 or why not in bad.stderr or os.path.exists(f"{work}/x.shq"):
        fail(f"export {args}: {bad.returncode} {bad.stderr}")
losses = [json.loads(run("eval", model, "--data", f"{work}/data/val.bin", "--seq-len", "32", "--max-windows", "4",
                         *extra))["loss"] for extra in ([], ["--adapter", f"{work}/a8.shq"])]
if losses[0] == losses[1]:
    fail(f"eval --adapter gives the base's loss {losses[0]}: the adapter is not applied")
adapted = Server("--max-batch", "4", "--adapter", f"ft8={work}/a8.shq", "--adapter", f"ft32={work}/a32.shq")
lora_cases = [("the cat", 30, 0, 40, 0.95, 1, "ft8"), ("the dog ran", 25, 0.9, 40, 0.95, 4, "ft32"),
              ("Story 3:", 20, 0, 40, 0.95, 1, None), ("mat", 30, 0.8, 0, 0.9, 6, "ft8"),
              ("the cat", 30, 0, 40, 0.95, 1, "ft32")]
lora_expected = [generate(*c[:6], *(["--adapter", f"{work}/a{c[6][2:]}.shq"] if c[6] else [])) for c in lora_cases]
lora_results = [None] * len(lora_cases)


def lora_client(i):
    prompt, n, temp, k, p, seed, name = lora_cases[i]
    body = {"prompt": prompt, "max_tokens": n, "temperature": temp, "top_k": k, "top_p": p, "seed": seed}
    if name:
        body["adapter"] = name
    lora_results[i] = adapted.complete(body)["choices"][0]["text"]


threads = [threading.Thread(target=lora_client, args=(i,)) for i in range(len(lora_cases))]
for t in threads:
    t.start()
for t in threads:
    t.join()
for c, got, want in zip(lora_cases, lora_results, lora_expected):
    if got != want:
        fail(f"adapter {c}: {got!r} differs from generate --adapter's {want!r}")
# /v1/models lists the adapters; "model" picks one as "adapter" does, and the
# response names the adapter that ran; the model file's name is the base.
status, payload = adapted.request("GET", "/v1/models")
listed = json.loads(payload)["data"] if status == 200 else []
if [(m["id"], m.get("parent"), m.get("root"), m.get("lora")) for m in listed] != [
        ("m.shq", None, None, None), ("ft32", "m.shq", f"{work}/a32.shq", {"rank": 4, "alpha": 8.0, "rslora": False}),
        ("ft8", "m.shq", f"{work}/a8.shq", {"rank": 4, "alpha": 8.0, "rslora": False})]:
    fail(f"/v1/models with adapters: {status} {payload}")
for i, model_field, ran in ((0, "ft8", "ft8"), (4, "ft32", "ft32"), (2, "m.shq", "m.shq")):
    prompt, n, temp, k, p, seed, _ = lora_cases[i]
    r = adapted.complete({"prompt": prompt, "max_tokens": n, "temperature": temp, "top_k": k, "top_p": p,
                          "seed": seed, "model": model_field})
    if r["choices"][0]["text"] != lora_expected[i] or r["model"] != ran:
        fail(f"model {model_field!r}: {r['model']} {r['choices'][0]['text']!r}, want {ran} {lora_expected[i]!r}")
# Accepted requests by adapter: for each, 2 naming it in "adapter" and 1 in "model".
for name, want in (("ft8", 3), ("ft32", 3)):
    if adapted.metric(f'shamn_adapter_requests_total{{adapter="{name}"}}') != want:
        fail(f"shamn_adapter_requests_total for {name}: {adapted.request('GET', '/metrics')[1]}")
for body, why in (({"prompt": "the", "adapter": "nope"}, "unknown adapter 'nope'; this server has ft32, ft8"),
                  ({"prompt": "the", "adapter": 3}, "adapter must be the name"),
                  ({"prompt": "the", "model": "ft8", "adapter": "ft32"},
                   "model names the adapter 'ft8' but adapter names 'ft32'"),
                  ({"prompt": "the", "model": 3}, "model must be a string"),
                  ({"prompt": "the", "model": "gpt-3.5-turbo-instruct"},
                   "the model 'gpt-3.5-turbo-instruct' does not exist; this server has 'm.shq' and the adapters "
                   "ft32, ft8")):
    status, payload = adapted.request("POST", "/v1/completions", body)
    if (status != (404 if "does not exist" in why or "unknown adapter" in why else 400)
            or why not in json.loads(payload)["error"]["message"]):
        fail(f"adapter request {body}: {status} {payload}")
adapted.stop()
bad = subprocess.run([shamn, "serve", model, "--adapter", f"x={work}/m.shq"], capture_output=True, text=True)
if bad.returncode != 1 or "is not a LoRA adapter file" not in bad.stderr:
    fail(f"serve with a model as adapter: {bad.returncode} {bad.stderr}")
bad = subprocess.run([shamn, "serve", model, "--port", "0", "--max-adapters", "1", "--adapter", f"a={work}/a8.shq",
                      "--adapter", f"b={work}/a8.shq"], capture_output=True, text=True, timeout=DEADLINE)
if bad.returncode != 1 or "holds the most adapters it may already (--max-adapters = 1)" not in bad.stderr:
    fail(f"serve with more adapters than --max-adapters: {bad.returncode} {bad.stderr}")
for spec in (f'a"b={work}/a8.shq', f"={work}/a8.shq", "ft8=", f"x y={work}/a8.shq"):
    bad = subprocess.run([shamn, "serve", model, "--port", "0", "--adapter", spec], capture_output=True, text=True,
                         timeout=DEADLINE)
    if bad.returncode != 1 or "must be NAME=FILE" not in bad.stderr:
        fail(f"serve --adapter {spec!r}: {bad.returncode} {bad.stderr}")
say(f"LoRA: fine-tuned, exported (int8, f32, bad bases refused), {len(lora_cases)} requests with two adapters "
    "and none in one batch get the text of generate --adapter; /v1/models lists them, \"model\" picks one, "
    "/metrics counts each, names that are not plain are refused")

# ---- adapters loaded and unloaded while serving (--allow-adapter-loading) ----
live = Server("--max-batch", "4", "--allow-adapter-loading", "--max-tokens-limit", "100000000")


def post(path, body):
    status, payload = live.request("POST", path, body)
    return status, json.loads(payload)


a8 = f"{work}/a8.shq"
if post("/v1/load_lora_adapter", {"lora_name": "ft8", "lora_path": a8}) != (200, {"lora_name": "ft8",
                                                                               "status": "loaded"}):
    fail("load_lora_adapter ft8")
if [m["id"] for m in json.loads(live.request("GET", "/v1/models")[1])["data"]] != ["m.shq", "ft8"]:
    fail(f"/v1/models after a load: {live.request('GET', '/v1/models')}")
prompt, n, temp, k, p, seed, _ = lora_cases[0]
ft8_body = {"prompt": prompt, "max_tokens": n, "temperature": temp, "top_k": k, "top_p": p, "seed": seed,
            "adapter": "ft8"}
if live.complete(ft8_body)["choices"][0]["text"] != lora_expected[0]:
    fail("a loaded adapter's request differs from generate --adapter's text")
for path, body, want_status, why in (
        ("load", {"lora_name": "ft8", "lora_path": a8}, 400, "lora_name: an adapter named 'ft8' is loaded already"),
        ("load", {"lora_name": "ft8", "lora_path": model}, 400, "lora_name: an adapter named 'ft8' is loaded"),
        ("load", {"lora_name": "m", "lora_path": model}, 400, "is not a LoRA adapter file"),
        ("load", {"lora_name": "a b", "lora_path": a8}, 400, "lora_name: the adapter name 'a b' must be 1 to 64"),
        ("load", {"lora_name": "m.shq", "lora_path": a8}, 400,
         "lora_name: the adapter name 'm.shq' is the model's"),
        ("load", {"lora_name": "x", "lora_path": f"{work}/absent.shq"}, 400,
         f"cannot load lora_path '{work}/absent.shq' as adapter 'x'"),
        ("load", {"lora_name": "x"}, 400, "lora_path is required"),
        ("unload", {"lora_path": a8}, 400, "lora_name is required"),
        ("unload", {"lora_name": "nope"}, 404, "no adapter named 'nope' is loaded; this server has ft8")):
    status, r = post(f"/v1/{path}_lora_adapter", body)
    if status != want_status or why not in r["error"]["message"]:
        fail(f"{path} {body}: {status} {r}")
# Unloaded once a request with it is accepted (the counter says so): the
# request ends with generate --adapter's text, new requests are refused, and
# the name can be loaded again.
long_args = ("the cat", 2000, 0, 40, 0.95, 1)
long_result = {}
long_thread = threading.Thread(target=lambda: long_result.update(r=live.complete(
    {"prompt": long_args[0], "max_tokens": long_args[1], "temperature": long_args[2], "top_k": long_args[3],
     "top_p": long_args[4], "seed": long_args[5], "adapter": "ft8"})))
long_thread.start()
live.wait_for('shamn_adapter_requests_total{adapter="ft8"}', 2)
if post("/v1/unload_lora_adapter", {"lora_name": "ft8"}) != (200, {"lora_name": "ft8", "status": "unloaded"}):
    fail("unload_lora_adapter ft8")
status, payload = live.request("POST", "/v1/completions", ft8_body)
if status != 404 or "unknown adapter 'ft8'; this server has none" not in payload:
    fail(f"a request for an unloaded adapter: {status} {payload}")
status, payload = live.request("POST", "/v1/completions", {"prompt": "the", "model": "ft8"})
if status != 404 or "the model 'ft8' does not exist" not in payload:
    fail(f"a request for an unloaded adapter by model: {status} {payload}")
long_thread.join()
if long_result["r"]["choices"][0]["text"] != generate(*long_args, "--adapter", a8):
    fail("a request whose adapter was unloaded while it ran differs from generate --adapter's text")
if post("/v1/load_lora_adapter", {"lora_name": "ft8", "lora_path": a8})[0] != 200:
    fail("loading ft8 again after its unload")
if live.complete(ft8_body)["choices"][0]["text"] != lora_expected[0]:
    fail("a reloaded adapter's request differs from generate --adapter's text")
if live.metric('shamn_adapter_requests_total{adapter="ft8"}') != 3:
    fail(f"shamn_adapter_requests_total after reloading: {live.request('GET', '/metrics')[1]}")
live.stop()
say("adapters loaded and unloaded while serving: generate --adapter's text, refusals named, an accepted request "
    "keeps its unloaded adapter")

# ---- an adapter with speculative decoding: the adapted target's text ----
spec_lora = Server("--draft", f"{work}/d.shq", "--draft-tokens", "3", "--adapter", f"ft8={work}/a8.shq")
for path in ("load", "unload"):  # off without --allow-adapter-loading
    status, payload = spec_lora.request("POST", f"/v1/{path}_lora_adapter", {"lora_name": "ft8", "lora_path": a8})
    if status != 403 or "--allow-adapter-loading" not in payload:
        fail(f"{path}_lora_adapter without --allow-adapter-loading: {status} {payload}")
for c in (("the cat", 30, 0, 40, 0.95, 1), ("mat", 25, 0.8, 40, 0.95, 6)):
    drafted_args = ("--adapter", f"{work}/a8.shq", "--draft", f"{work}/d.shq", "--draft-tokens", "3")
    want = generate(*c, *drafted_args)
    prompt, n, temp, k, p, seed = c
    got = spec_lora.complete({"prompt": prompt, "max_tokens": n, "temperature": temp, "top_k": k, "top_p": p,
                              "seed": seed, "adapter": "ft8"})["choices"][0]["text"]
    if got != want:
        fail(f"--draft with adapter {c}: {got!r} differs from generate's {want!r}")
    if temp == 0 and want != generate(*c, "--adapter", f"{work}/a8.shq"):
        fail(f"greedy generate --adapter --draft {c}: {want!r} differs from generate --adapter's")
spec_lora.stop()
say("--adapter with --draft: serve gives generate's text; greedy, that of generate --adapter alone; "
    "loading and unloading off without --allow-adapter-loading")

# ---- a full batch and queue: 429; the time limit ----
# No timer decides these: the first request runs until its client leaves, and the
# time limit is checked on a server of its own, on a request that cannot end sooner.
busy = Server("--max-batch", "1", "--max-queue", "1", "--max-tokens-limit", "100000000")
first = socket.create_connection(("127.0.0.1", busy.port), timeout=DEADLINE)
body = json.dumps({"prompt": "the cat", "max_tokens": 100000000, "stream": True}).encode()
first.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + str(len(body)).encode()
              + b"\r\n\r\n" + body)
busy.wait_for("shamn_running_streams", 1)
# Two completions where one queue place is free: refused whole, none left queued.
status, payload = busy.request("POST", "/v1/completions", {"prompt": "the", "n": 2, "max_tokens": 5})
if status != 429 or busy.metric("shamn_queue_depth") != 0 or busy.metric("shamn_requests_total") != 1:
    fail(f"n 2 with one place free: {status} {payload}; {busy.request('GET', '/metrics')[1]}")
second = {}
waiter = threading.Thread(target=lambda: second.update(
    r=busy.request("POST", "/v1/completions", {"prompt": "the dog", "max_tokens": 5})))
waiter.start()
busy.wait_for("shamn_queue_depth", 1)
status, payload = busy.request("POST", "/v1/completions", {"prompt": "the", "max_tokens": 5})
if status != 429 or "busy" not in json.loads(payload)["error"]["message"]:
    fail(f"a full server answered {status} {payload}")
first.close()  # cancels the first request: the queued one runs
waiter.join()
status, payload = second["r"]
if status != 200 or json.loads(payload)["choices"][0]["finish_reason"] != "length":
    fail(f"the queued request once the batch had room: {status} {payload[:300]}")
if busy.metric("shamn_requests_rejected_total") != 3:
    fail("the refusals were not counted, a completion each")
busy.stop()
# The logprobs values of the requests being answered, each at its most, are
# bounded server-wide: a scoring request past it waits (429); one without
# logprobs does not; the values are given back when a response ends.
scoring = Server("--max-tokens-limit", "100000000", "--max-logprob-values", "200000000",
                 "--max-logprob-values-in-flight", "200000001")
first = socket.create_connection(("127.0.0.1", scoring.port), timeout=DEADLINE)
body = json.dumps({"prompt": "the cat", "max_tokens": 100000000, "logprobs": 1, "stream": True}).encode()
first.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + str(len(body)).encode()
              + b"\r\n\r\n" + body)
scoring.wait_for("shamn_running_streams", 1)
if scoring.metric("shamn_logprob_values_in_flight") != 200000000:
    fail(f"the scoring request's values: {scoring.request('GET', '/metrics')[1]}")
status, payload = scoring.request("POST", "/v1/completions", {"prompt": "the", "max_tokens": 2, "logprobs": 0})
if status != 429 or "--max-logprob-values-in-flight" not in json.loads(payload)["error"]["message"]:
    fail(f"a scoring request past the server's logprobs bound: {status} {payload}")
if scoring.metric("shamn_requests_rejected_logprob_values_total") != 1:
    fail(f"the logprobs refusal was not counted: {scoring.request('GET', '/metrics')[1]}")
scoring.complete({"prompt": "the", "max_tokens": 2})
first.close()  # cancels it: its values are given back once its response ends
end = time.time() + DEADLINE
while scoring.metric("shamn_logprob_values_in_flight") != 0:
    if time.time() > end:
        fail("the cancelled request's logprobs values were never given back")
    time.sleep(0.05)
scoring.complete({"prompt": "the", "max_tokens": 2, "logprobs": 0})
scoring.stop()
refused = subprocess.run([shamn, "serve", model, "--max-logprob-values-in-flight", "5"], capture_output=True,
                         text=True, timeout=DEADLINE)
if refused.returncode != 1 or "must be >= --max-logprob-values" not in refused.stderr:
    fail(f"--max-logprob-values-in-flight under --max-logprob-values: {refused.returncode} {refused.stderr}")
limited = Server("--max-tokens-limit", "100000000", "--time-limit", "1")
status, payload = limited.request("POST", "/v1/completions", {"prompt": "the dog", "max_tokens": 100000000})
if status != 200 or json.loads(payload)["choices"][0]["finish_reason"] != "time_limit":
    fail(f"a request past the time limit: {status} {payload[:300]}")
# A client that sends its request a byte at a time (each byte restarts the read
# timeout) does not hold a stopping server open: it ends with status 0 all the
# same. (Its body, 1,000,000 bytes at two a second, would outlast DEADLINE.)
slow = socket.create_connection(("127.0.0.1", limited.port), timeout=DEADLINE)
slow.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n{\"pr")
trickling = threading.Event()


def trickle():
    while limited.proc.poll() is None:
        try:
            slow.sendall(b" ")
        except OSError:
            break
        trickling.set()
        time.sleep(0.5)


trickler = threading.Thread(target=trickle)
trickler.start()
trickling.wait(DEADLINE)
limited.stop()
trickler.join()
slow.close()
say("a server stopped while a client trickles its request in ends all the same, with status 0")
say("a full server answers 429, to a request of n 2 as a whole; so does scoring past --max-logprob-values-in-flight; "
    "a request past --time-limit ends with finish_reason time_limit")
say("SIGTERM: both servers stopped with status 0")
