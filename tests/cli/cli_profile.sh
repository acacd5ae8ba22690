#!/usr/bin/env bash
# --profile end to end: `shamn train` prints the table and writes a Chrome trace
# that parses as JSON and holds the expected events (forward and backward ops
# and layers, optimizer, data; complete events properly nested per thread, for
# the steps after the warm-up step; the table without that step unless
# --profile-warmup 0); `eval` and `bench` print the table without
# breaking their JSON on stdout; bad flags and paths exit non-zero.
# Usage: cli_profile.sh SHAMN_BINARY CONFIG WORKDIR
set -euo pipefail
shamn=$1 config=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
"$shamn" synthetic --out "$work/data" --vocab 64 --successors 4 --tokens 100000 > /dev/null
train() {  # train OUT_DIR STEPS [FLAGS...]
  local out=$1 steps=$2
  shift 2
  "$shamn" --threads 2 train "$config" --set "data.train_path=\"$work/data/train.bin\"" \
    --set "data.val_path=\"$work/data/val.bin\"" --set "train.out_dir=\"$out\"" \
    --set train.max_steps="$steps" --set optim.warmup_steps=1 --set train.eval_every=3 "$@"
}

# Without --profile: no table, no trace.
train "$work/plain" 2 > "$work/plain.txt"
if grep -q "% wall" "$work/plain.txt"; then echo "a table without --profile"; exit 1; fi
[ ! -e "$work/plain/profile.json" ]

train "$work/run" 6 --profile > "$work/train.txt"
grep -q "^name  *category  *calls  *total ms  *self ms  *% wall$" "$work/train.txt"
grep -q "^profile trace: $work/run/profile.json (.* events, steps 2-4;" "$work/train.txt"
# The table leaves out the warm-up step (--profile-warmup, 1 by default), or keeps it with 0.
grep -q "^profile: .* ms wall (steps 2-6; the first 1, .* ms, left out as warm-up);" "$work/train.txt"
grep -Eq "^train_step +step +5 " "$work/train.txt"

# A trace of one step after the warm-up, to a chosen path.
train "$work/run1" 3 --profile --profile-steps 1 --profile-trace "$work/one_step.json" --profile-warmup 0 \
  > "$work/train1.txt"
grep -q "^profile: .* ms wall (steps 1-3);" "$work/train1.txt"
grep -Eq "^train_step +step +3 " "$work/train1.txt"
[ ! -e "$work/run1/profile.json" ]

# A checkpoint and a model file for eval and bench.
"$shamn" export "$work/run/best.h5" --no-tokenizer --quant int8 -o "$work/m.shq" > /dev/null
"$shamn" eval "$work/run/best.h5" --data "$work/data/val.bin" --seq-len 32 --max-windows 5 --profile \
  --profile-trace "$work/eval_h5.json" > "$work/eval_h5.out" 2> "$work/eval_h5.err"
"$shamn" eval "$work/m.shq" --data "$work/data/val.bin" --seq-len 32 --max-windows 5 --profile \
  --profile-trace "$work/eval_shq.json" > "$work/eval_shq.out" 2> "$work/eval_shq.err"
"$shamn" bench "$work/m.shq" --json --repeats 3 --prompt-tokens 16 --decode-tokens 4 --profile \
  --profile-trace "$work/bench.json" > "$work/bench.out" 2> "$work/bench.err"
"$shamn" bench "$work/m.shq" --repeats 2 --prompt-tokens 16 --decode-tokens 4 --profile \
  --profile-trace "$work/bench_text.json" > "$work/bench_text.out"
for f in eval_h5.err eval_shq.err bench.err bench_text.out; do
  grep -q "% wall" "$work/$f" || { echo "no profile table in $f"; exit 1; }
done
grep -q "^model_losses  *eval " "$work/eval_shq.err"
grep -q "^decode_token  *step " "$work/bench.err"
# The warm-up run (--warmup, 1 by default) is left out: 3 repeats, 3 prefills.
grep -Eq "^prefill +step +3 " "$work/bench.err"

/usr/bin/python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]

def load_trace(path):
    trace = json.load(open(path))
    events = trace["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    spans = [e for e in events if e["ph"] == "X"]
    assert spans, path
    by_thread = {}
    for e in spans:
        assert e["pid"] == 1 and e["tid"] in names, (path, e)
        assert e["ts"] >= 0 and e["dur"] >= 0, (path, e)
        by_thread.setdefault(e["tid"], []).append(e)
    # Per thread, two events either nest or do not overlap (what Perfetto needs
    # to draw them as a stack). ts/dur are microseconds with ns precision.
    for tid, evs in by_thread.items():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in evs:
            start, end = round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000)
            while stack and stack[-1] <= start:
                stack.pop()
            assert not stack or end <= stack[-1], (path, tid, e)
            stack.append(end)
    return trace, spans, names

def kinds(spans):
    return {(e["name"], e["cat"]) for e in spans}

trace, spans, names = load_trace(f"{w}/run/profile.json")
assert trace["otherData"]["first_traced_step"] == 2 and trace["otherData"]["last_traced_step"] == 4, trace["otherData"]
k = kinds(spans)
expected = {("train_step", "step"), ("forward", "forward"), ("backward", "backward"),
            ("block_sparse_linear", "forward"), ("block_sparse_linear", "backward"),
            ("hash_head_cross_entropy", "forward"), ("hash_head_cross_entropy", "backward"),
            ("layers.0.moe", "forward"), ("layers.0.moe", "backward"),
            ("layers.1.memory", "forward"), ("layers.1.memory", "backward"),
            ("adamw_step", "optimizer"), ("clip_grad_norm", "optimizer"), ("zero_grad", "optimizer"),
            ("batch_wait", "data"), ("batch_prefetch", "data"), ("evaluate", "eval"), ("checkpoint", "io")}
assert expected <= k, expected - k
steps = [e for e in spans if e["name"] == "train_step"]
assert len(steps) == 3, len(steps)
assert "main" in names.values() and "batch prefetch" in names.values(), names
prefetch_tids = {t for t, n in names.items() if n == "batch prefetch"}
assert all(e["tid"] in prefetch_tids for e in spans if e["name"] == "batch_prefetch")

trace, spans, _ = load_trace(f"{w}/one_step.json")
assert trace["otherData"]["first_traced_step"] == 2 and trace["otherData"]["last_traced_step"] == 2
assert len([e for e in spans if e["name"] == "train_step"]) == 1

# eval and bench: stdout is still exactly one JSON object.
for name in ("eval_h5", "eval_shq", "bench"):
    json.loads(open(f"{w}/{name}.out").read())
_, spans, _ = load_trace(f"{w}/eval_h5.json")
assert {("eval_window", "eval"), ("model_logits", "eval"), ("layers.0.mixer", "forward"),
        ("block_sparse_linear", "forward")} <= kinds(spans), kinds(spans)
assert not any(e["cat"] == "backward" for e in spans)
_, spans, _ = load_trace(f"{w}/eval_shq.json")
assert {("eval_window", "eval"), ("embed", "infer"), ("layers.0.mixer", "infer"), ("layers.1.memory", "infer"),
        ("layers.1.moe", "infer"), ("head", "infer")} <= kinds(spans), kinds(spans)
trace, spans, _ = load_trace(f"{w}/bench.json")
assert {("prefill", "step"), ("decode_token", "step"), ("layers.0.moe", "infer")} <= kinds(spans)
# Each layer's ops, nested in the layer's span.
ops = {("mixer.norm", "infer"), ("mixer.conv", "infer"), ("mixer.out", "infer"),
       ("memory.query", "infer"), ("memory.keys", "infer"), ("memory.select", "infer"),
       ("memory.values", "infer"), ("moe.route", "infer"), ("moe.dispatch", "infer"), ("moe.up", "infer"),
       ("moe.gelu", "infer"), ("moe.quantise", "infer"), ("moe.down", "infer"), ("moe.combine", "infer")}
assert ops <= kinds(spans), ops - kinds(spans)
assert trace["otherData"]["last_traced_step"] == 3
PY

# Bad input: the profile flags need --profile; a trace path that cannot be written is named.
status=0
"$shamn" eval "$work/m.shq" --data "$work/data/val.bin" --profile-steps 2 > /dev/null 2>&1 || status=$?
[ "$status" -ne 0 ]
status=0
"$shamn" eval "$work/m.shq" --data "$work/data/val.bin" --seq-len 32 --max-windows 2 --profile \
  --profile-trace "$work/no/such/dir/t.json" > /dev/null 2> "$work/bad.err" || status=$?
[ "$status" -eq 1 ]
grep -qF "$work/no/such/dir/t.json" "$work/bad.err"
echo "cli_profile: ok"
