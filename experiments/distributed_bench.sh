#!/usr/bin/env bash
# One process with 2 threads against 2 MPI ranks with 1 thread each, the
# gradient exchange overlapped with the backward pass (the default) and not
# (train.overlap_exchange = false), on the same config, in alternating rounds
# (this machine is shared and noisy: the ratios within each round, then medians). Both runs take 2 micro-batches of B windows per step
# (train.grad_accum = 2), so they train bitwise the same model (checked: the
# losses and gradient norms of every step must match). Per run: the median
# tokens/s of steps 2..N (metrics.jsonl; step 1 includes warm-up and first-touch
# page faults) and, for the 2-rank run, rank 0's time per traced step (the
# --profile trace of steps 2-4) in sum_gradients (the transfer and the adds, or
# with overlap what is left of them after the backward pass) and wait_for_ranks
# (the lead of the slower rank; with overlap it is inside sum_gradients).
# Usage: experiments/distributed_bench.sh CONFIG B STEPS PAIRS   (repo root, after
# building ./build with MPI; needs mpirun; STEPS >= 4). SHAMN=path picks another binary.
set -euo pipefail
config=$1 B=$2 steps=$3 pairs=$4
shamn=$(realpath "${SHAMN:-./build/shamn}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
vocab=$(sed -n 's/^vocab_size *= *\([0-9]*\).*/\1/p' "$config" | head -1)
"$shamn" synthetic --out "$work/data" --vocab "$vocab" --successors 64 --tokens 4000000 > /dev/null
sets=(--set "data.train_path=\"$work/data/train.bin\"" --set "data.val_path=\"$work/data/val.bin\""
      --set train.max_steps="$steps" --set train.grad_accum=2 --set train.batch_size="$B"
      --set optim.warmup_steps=2 --set train.eval_every=100000 --set train.eval_batches=2
      --set train.checkpoint_every=100000 --set log.every=1 --set 'log.progress="never"' --profile)

# median tokens/s of steps 2.. of a run; then, from its trace (steps 2-4, after
# the warm-up step), ms per step of sum_gradients and wait_for_ranks (0 for one
# process).
summarise() {
  python3 - "$1/metrics.jsonl" "$1/profile.json" << 'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
tps = [r["tokens_per_s"] for r in rows if "tokens_per_s" in r and r["step"] >= 2]
trace = json.load(open(sys.argv[2]))
events = trace["traceEvents"] if isinstance(trace, dict) else trace
steps = sum(1 for e in events if e.get("name") == "train_step")
ms = {"sum_gradients": 0.0, "wait_for_ranks": 0.0}
for e in events:
    if e.get("name") in ms:
        ms[e["name"]] += e["dur"] / 1000 / steps
print(f"{statistics.median(tps):.0f} {ms['sum_gradients']:.1f} {ms['wait_for_ranks']:.1f}")
EOF
}

echo "config $config, 2 micro-batches of $B windows per step, $steps steps, $pairs pairs"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-5s %10s %10s %10s %8s %8s %10s %10s %10s\n" round "1x2 tok/s" "2x1 tok/s" "plain" ratio \
  overlap "sum ms" "plain sum" "plain wait"
ratios=() gains=()
losses() { python3 -c 'import json,sys; [print(r["step"], r["loss"], r["grad_norm"]) for r in map(json.loads, open(sys.argv[1])) if "grad_norm" in r]' "$1/metrics.jsonl"; }
for p in $(seq "$pairs"); do
  "$shamn" --threads 2 train "$config" "${sets[@]}" --set "train.out_dir=\"$work/one\"" > "$work/one.log" 2>&1
  read -r one _ _ <<< "$(summarise "$work/one")"
  for mode in two plain; do
    overlap=true
    [ $mode = plain ] && overlap=false
    mpirun --oversubscribe --bind-to none -np 2 "$shamn" --threads 1 train "$config" "${sets[@]}" \
      --set "train.out_dir=\"$work/$mode\"" --set train.overlap_exchange=$overlap > "$work/$mode.log" 2>&1
    [ "$(losses "$work/one")" = "$(losses "$work/$mode")" ] || { echo "the $mode run's losses differ"; exit 1; }
  done
  read -r two sum _ <<< "$(summarise "$work/two")"
  read -r plain psum pwait <<< "$(summarise "$work/plain")"
  ratio=$(python3 -c "print(f'{$two / $one:.3f}')")
  gain=$(python3 -c "print(f'{$two / $plain:.3f}')")
  ratios+=("$ratio") gains+=("$gain")
  printf "%-5s %10s %10s %10s %8s %8s %10s %10s %10s\n" "$p" "$one" "$two" "$plain" "$ratio" "$gain" "$sum" "$psum" "$pwait"
  rm -rf "$work/one" "$work/two" "$work/plain"
done
med() { printf '%s\n' "$@" | python3 -c 'import sys, statistics; print(statistics.median(float(x) for x in sys.stdin))'; }
echo "median ratio 2x1 (overlapped) / 1x2: $(med "${ratios[@]}")"
echo "median ratio 2x1 overlapped / 2x1 plain: $(med "${gains[@]}")"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
