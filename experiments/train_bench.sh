#!/usr/bin/env bash
# `shamn train` end to end (data loader, forward, backward, clipping, AdamW,
# metrics) on a config at batch B x seq T (environment; default 8 x 512), next to the PyTorch reference's full
# training step on the same model, back to back in this one script so both see
# the same machine. shamn's figure is the median tokens/s of steps 2..N from the
# run's metrics.jsonl (step 1 includes warm-up); the reference prints its own
# median. Data: a synthetic token file (`shamn synthetic`) with the config's vocab.
# Usage: [B=8 T=512] experiments/train_bench.sh [CONFIG] [STEPS] [THREADS...]   (repo root,
# after building into ./build; the reference needs /usr/bin/python3 with python3-torch).
# SHAMN=path/to/shamn runs another binary (e.g. a copy of an earlier build, for A/B).
set -euo pipefail
config=${1:-configs/default.toml}
steps=${2:-8}
shift $(($# < 2 ? $# : 2))
threads=("$@")
[ ${#threads[@]} -gt 0 ] || threads=(1 2)
B=${B:-8}
T=${T:-512}
shamn=${SHAMN:-./build/shamn}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
vocab=$(sed -n 's/^vocab_size *= *\([0-9]*\).*/\1/p' "$config" | head -1)
"$shamn" synthetic --out "$work/data" --vocab "$vocab" --successors 64 --tokens 2000000 > /dev/null
echo "config $config, batch $B x seq $T, $steps steps"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for t in "${threads[@]}"; do
  "$shamn" --threads "$t" train "$config" \
    --set "data.train_path=\"$work/data/train.bin\"" --set 'data.val_path=""' \
    --set train.batch_size=$B --set train.seq_len=$T --set train.grad_accum=1 \
    --set "train.max_steps=$steps" \
    --set optim.warmup_steps=0 --set train.checkpoint_every=0 --set "train.out_dir=\"$work/run$t\"" \
    --set 'log.progress="never"' > "$work/log$t"
  /usr/bin/python3 - "$work/run$t/metrics.jsonl" "$t" "$(grep -o 'first step after [0-9.]* s' "$work/log$t")" \
    "$(grep -o 'peak RSS.*' "$work/log$t")" <<'PY'
import json, statistics, sys
rates = [json.loads(l)["tokens_per_s"] for l in open(sys.argv[1]) if '"loss"' in l][1:]
print(json.dumps({"impl": "shamn train", "threads": int(sys.argv[2]),
                  "tokens_per_s": round(statistics.median(rates), 1), "steps": len(rates),
                  "first_step": sys.argv[3], "memory": sys.argv[4]}))
PY
done | tee "$work/rows"
ts=$(IFS=,; echo "${threads[*]}")
/usr/bin/python3 experiments/reference/shamn_ref.py bench --config "$config" --batch $B --seq $T \
  --threads "$ts" --steps 5 --warmup 1 | tee -a "$work/rows"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 - "$work/rows" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
ours = {r["threads"]: r["tokens_per_s"] for r in rows if r.get("impl") == "shamn train"}
ref = {r["threads"]: r["tokens_per_s"] for r in rows if r.get("impl") != "shamn train"}
for t in sorted(ours):
    if t in ref:
        print(f"{t} thread(s): shamn train {ours[t]:.0f} tok/s, PyTorch {ref[t]:.0f} tok/s: {ours[t] / ref[t]:.2f}x")
if len(ours) > 1:
    lo, hi = min(ours), max(ours)
    print(f"shamn train speedup {lo} -> {hi} threads: {ours[hi] / ours[lo]:.2f}x")
PY
