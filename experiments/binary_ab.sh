#!/usr/bin/env bash
# Two shamn binaries in turn (A then B, B then A in the next batch size, for
# ROUNDS rounds) training CONFIG on synthetic tokens at each batch size in
# BATCHES: each run's median tok/s, the time to its first step and its peak RSS
# from its `done:` and `peak RSS` lines, and its first six losses, which must
# match between the binaries where the change is meant to move no bit.
# Usage: [BATCHES="96 8"] [STEPS=6] [ROUNDS=3] [THREADS=2] \
#   experiments/binary_ab.sh OLD_SHAMN NEW_SHAMN [CONFIG]   (from the repo root)
set -euo pipefail
old=$1
new=$2
config=${3:-configs/default.toml}
batches=${BATCHES:-96 8}
steps=${STEPS:-6}
rounds=${ROUNDS:-3}
threads=${THREADS:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
vocab=$(sed -n 's/^vocab_size *= *\([0-9]*\).*/\1/p' "$config" | head -1)
"$new" synthetic --out "$work/data" --vocab "$vocab" --successors 64 --tokens 3000000 > /dev/null
echo "config $config, $threads threads, $steps steps, load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

run() {  # binary batch tag
  local out="$work/$3"
  "$1" --threads "$threads" train "$config" --set "data.train_path=\"$work/data/train.bin\"" \
    --set "data.val_path=\"$work/data/val.bin\"" --set 'data.tokenizer=""' --set "train.batch_size=$2" \
    --set "train.max_steps=$steps" --set optim.warmup_steps=1 --set train.eval_every=1000000 \
    --set train.eval_batches=1 --set train.checkpoint_every=1000000 --set "train.out_dir=\"$out\"" > "$out.log" 2>&1
  echo "$3 batch $2: $(grep -o 'median [0-9]* tok/s | first step after [0-9.]* s' "$out.log") | $(grep -o 'peak RSS [0-9]* MiB' "$out.log") |" \
    "losses $(python3 -c 'import json, sys; print([json.loads(l).get("loss") for l in open(sys.argv[1])][:6])' \
      "$out/metrics.jsonl")"
}

for r in $(seq "$rounds"); do
  flip=0
  for b in $batches; do
    if [ $(((r + flip) % 2)) -eq 1 ]; then
      run "$old" "$b" "old_${b}_$r"
      run "$new" "$b" "new_${b}_$r"
    else
      run "$new" "$b" "new_${b}_$r"
      run "$old" "$b" "old_${b}_$r"
    fi
    flip=$((flip + 1))
  done
done
