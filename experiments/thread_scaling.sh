#!/usr/bin/env bash
# Thread scaling of training and of the runtime's batched work on a many-core
# machine (experiments/thread_scaling.md). For each thread count T:
#   shamn --threads T machine --json        the machine's limits on T threads,
#   a --profile training run of CONFIG       steps scaled so each run is short
#                                            (metrics.jsonl, the profile table),
#   bench --prompt-tokens 512 and --streams 64, eval on held-out windows
#                                            (int8 export of CONFIG's init).
# Every training run starts from the same seed on the same tokens at a constant
# learning rate (so the step count does not change the schedule), so the loss
# and gradient norm of each step must be bitwise the same at every T:
# the script prints the distinct (step, loss, grad_norm) sequences it saw
# (one means thread-count independent).
# SKIP_INFER=1 leaves the runtime's runs out.
# Usage: [SHAMN=./build/shamn] [SKIP_INFER=1] experiments/thread_scaling.sh CONFIG OUT "1 2 4 8 16" STEPS_AT_1 [--set KEY=VALUE ...]
#   STEPS_AT_1: steps of the 1-thread run; a run at T threads takes
#   STEPS_AT_1 + log2(T) steps (at least 3, so steps 2.. give a median).
set -euo pipefail
config=$1 out=$2 threads=$3 steps1=$4
shift 4
shamn=${SHAMN:-./build/shamn}
mkdir -p "$out"
echo "host: $(nproc) cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
vocab=$(sed -n 's/^vocab_size *= *\([0-9]*\).*/\1/p' "$config" | head -1)
synth=$out/synth_$vocab
[ -f "$synth/train.bin" ] ||
  "$shamn" synthetic --out "$synth" --vocab "$vocab" --successors 64 --tokens 8000000 > /dev/null
data=(--set "data.train_path=\"$synth/train.bin\"" --set "data.val_path=\"$synth/val.bin\"" --set 'data.tokenizer=""')

# The runtime's model: the initial weights of CONFIG's [model] as written, in
# int8 (speed does not depend on training).
if [ -z "${SKIP_INFER:-}" ]; then
  "$shamn" init "$config" -o "$out/init.h5" --seed 1 > /dev/null
  "$shamn" export "$out/init.h5" --quant int8 --no-tokenizer -o "$out/model.shq" > /dev/null
fi

for t in $threads; do
  log2=0
  for ((x = t; x > 1; x /= 2)); do log2=$((log2 + 1)); done
  steps=$((steps1 + log2))
  ((steps < 3)) && steps=3
  "$shamn" --threads "$t" machine --json > "$out/machine_t$t.json"
  run_dir=$out/train_t$t
  rm -rf "$run_dir"
  start=$(date +%s%N)
  "$shamn" --threads "$t" train "$config" "${data[@]}" --set train.max_steps="$steps" \
    --set optim.warmup_steps=1 --set optim.lr=3e-4 --set optim.min_lr=3e-4 --set train.eval_every=1000000 --set train.eval_batches=1 \
    --set train.checkpoint_every=1000000 --set log.every=1 --set 'log.progress="never"' \
    --set "train.out_dir=\"$run_dir\"" "$@" --profile --machine "$out/machine_t$t.json" > "$run_dir.txt" 2>&1
  end=$(date +%s%N)
  echo "train t=$t: $steps steps, $(grep -o 'median [0-9]* tok/s' "$run_dir.txt"), $(grep '^step:' "$run_dir.txt"), wall $(((end - start) / 1000000)) ms"
  [ -n "${SKIP_INFER:-}" ] && continue
  "$shamn" --threads "$t" bench "$out/model.shq" --prompt-tokens 512 --decode-tokens 64 --repeats 3 --json \
    > "$out/bench_t$t.json"
  "$shamn" --threads "$t" bench "$out/model.shq" --prompt-tokens 16 --decode-tokens 32 --repeats 3 --streams 64 \
    --json > "$out/streams64_t$t.json"
  "$shamn" --threads "$t" eval "$out/model.shq" --data "$synth/val.bin" --max-windows 32 > "$out/eval_t$t.json"
  echo "infer t=$t: $(cat "$out/bench_t$t.json") | streams 64: $(cat "$out/streams64_t$t.json") | eval: $(cat "$out/eval_t$t.json")"
done

# Thread-count independence: the (step, loss, grad_norm) rows of every run.
for t in $threads; do
  grep -o '"step":[0-9]*\|"loss":[^,]*\|"grad_norm":[^,}]*' "$out/train_t$t/metrics.jsonl" | tr '\n' ' ' |
    sed 's/"step"/\n"step"/g' | head -n 4 > "$out/losses_t$t.txt"
done
echo "distinct loss sequences over the first 3 steps (1 = the same bits at every thread count):"
for t in $threads; do md5sum < "$out/losses_t$t.txt"; done | sort | uniq -c
