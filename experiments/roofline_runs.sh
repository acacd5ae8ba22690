#!/usr/bin/env bash
# The roofline tables of experiments/roofline.md: this machine's limits once
# (shamn machine --json, on THREADS threads), then RUNS short training runs of a
# config with --profile against those limits, one after another. Each run's
# table goes to OUT/NAME_rR.txt; the script prints each run's step against the
# sum of its bounds, its median tok/s and the load average before and after, so
# the median run can be picked. The evaluation at the last step is cut to one
# batch (train.eval_batches = 1): the forward op rows hold it beside the steps'.
# Data: default and any config whose data is missing get synthetic tokens of the
# config's vocabulary (random successors: the speed does not depend on them).
# Usage: [SHAMN=./build/shamn] experiments/roofline_runs.sh CONFIG THREADS STEPS RUNS OUT [--set KEY=VALUE ...]
set -euo pipefail
config=$1 threads=$2 steps=$3 runs=$4 out=$5
shift 5
shamn=${SHAMN:-./build/shamn}
name=$(basename "$config" .toml)_t$threads
mkdir -p "$out"
"$shamn" --threads "$threads" machine --json > "$out/machine_t$threads.json"
"$shamn" --threads "$threads" machine > "$out/machine_t$threads.txt"
train_path=$(sed -n 's/^train_path *= *"\(.*\)".*/\1/p' "$config")
val_path=$(sed -n 's/^val_path *= *"\(.*\)".*/\1/p' "$config")
data=()
if [ ! -f "$train_path" ] || [ ! -f "$val_path" ]; then
  vocab=$(sed -n 's/^vocab_size *= *\([0-9]*\).*/\1/p' "$config" | head -1)
  [ -f "$out/synth_$vocab/train.bin" ] ||
    "$shamn" synthetic --out "$out/synth_$vocab" --vocab "$vocab" --successors 64 --tokens 3000000 > /dev/null
  data=(--set "data.train_path=\"$out/synth_$vocab/train.bin\"" --set "data.val_path=\"$out/synth_$vocab/val.bin\""
        --set 'data.tokenizer=""')
fi
for r in $(seq 1 "$runs"); do
  run_dir="$out/${name}_r$r"
  rm -rf "$run_dir"
  before=$(cut -d' ' -f1 /proc/loadavg)
  "$shamn" --threads "$threads" train "$config" "${data[@]}" --set train.max_steps="$steps" \
    --set optim.warmup_steps=1 --set train.eval_every=1000000 --set train.eval_batches=1 \
    --set train.checkpoint_every=1000000 --set "train.out_dir=\"$run_dir\"" "$@" \
    --profile --machine "$out/machine_t$threads.json" > "$run_dir.txt" 2>&1
  echo "$name run $r: $(grep '^step:' "$run_dir.txt") | $(grep -o 'median [0-9]* tok/s' "$run_dir.txt") | load $before -> $(cut -d' ' -f1 /proc/loadavg)"
done
