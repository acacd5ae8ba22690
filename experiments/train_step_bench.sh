#!/usr/bin/env bash
# Training-step throughput (forward, backward, clipping, AdamW) of shamn and of
# the PyTorch reference on the same config, batch and thread counts, run back to
# back in this one script so both see the same machine. Prints each run's JSON
# line and then the ratios.
# Usage: experiments/train_step_bench.sh [CONFIG] [STEPS]   (from the repo root,
# after building into ./build; needs /usr/bin/python3 with python3-torch)
set -euo pipefail
config=${1:-configs/default.toml}
steps=${2:-5}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
./build/experiments/bench/bench_train_step "$config" --batch 8 --seq 512 --steps "$steps" \
  --warmup 1 --threads 1,2 | tee -a "$out"
/usr/bin/python3 experiments/reference/shamn_ref.py bench --config "$config" --batch 8 --seq 512 \
  --threads 1,2 --steps "$steps" --warmup 1 | tee -a "$out"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
def rate(impl, threads):
    for r in rows:
        if r.get("threads") == threads and (r.get("impl") == impl or (impl == "torch" and r.get("impl") != "shamn")):
            return r["tokens_per_s"]
s1, s2, t1, t2 = rate("shamn", 1), rate("shamn", 2), rate("torch", 1), rate("torch", 2)
print(f"shamn 2-thread speedup: {s2 / s1:.2f}x")
print(f"shamn / PyTorch at 1 thread: {s1 / t1:.2f}x; at 2 threads: {s2 / t2:.2f}x; "
      f"shamn 2 threads / PyTorch best: {s2 / max(t1, t2):.2f}x")
PY
