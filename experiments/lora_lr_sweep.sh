#!/usr/bin/env bash
# Learning rate against rank for the science-fiction fine-tunes of
# experiments/lora_bench.sh (experiments/lora.md): its adapters (alpha = 2 x
# rank, so alpha / rank is 2 at every rank) and its full fine-tune, each at
# several learning rates and seeds, the same 60 steps and schedule otherwise.
# Each run's best checkpoint is exported as f32 and evaluated by the runtime on
# the held-out paragraphs; one JSON line a run goes to OUT/runs.jsonl (rank 0 =
# the full fine-tune), then a table of mean (sd) perplexity. RANKS picks the
# runs (0 = the full fine-tune); ALPHA is lora.alpha as a Python expression of
# the rank r (5.657 * r ** 0.5 keeps rank 8's alpha / rank and scales the rest
# as rsLoRA's alpha / sqrt(rank) does).
# Usage: [RANKS="0 4 8 32"] [ALPHA="2 * r"] experiments/lora_lr_sweep.sh SHAMN BENCH_WORKDIR OUT [SEEDS...]
# BENCH_WORKDIR is a finished lora_bench.sh directory (its base, data, tokenizer).
set -euo pipefail
shamn=$(realpath "$1")
bench=$(realpath "$2")
out=$3
shift 3
seeds=("$@")
[ ${#seeds[@]} -gt 0 ] || seeds=(1 2 3)
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
cd "$out"
targets='["layers.*.mixer.out", "layers.*.memory.query", "layers.*.moe.experts.*.up", "layers.*.moe.experts.*.down"]'

fine_tune() {  # name, lr, seed, then --set overrides
  local name=$1 lr=$2 seed=$3
  shift 3
  [ -f "$name/best.h5" ] && return
  "$shamn" train "$here/configs/small.toml" --set "data.train_path=\"$bench/scifi/train.bin\"" \
    --set "data.val_path=\"$bench/scifi/val.bin\"" --set "data.tokenizer=\"$bench/tok.bpe\"" \
    --set "train.out_dir=\"$name\"" --set "train.init_from=\"$bench/base/best.h5\"" --set train.max_steps=60 \
    --set train.batch_size=8 --set train.seq_len=128 --set train.eval_every=5 --set train.eval_batches=2 \
    --set train.checkpoint_every=60 --set optim.warmup_steps=5 --set optim.weight_decay=0.0 \
    --set "optim.lr=$lr" --set "optim.min_lr=$(python3 -c "print($lr / 10)")" --set "train.seed=$seed" "$@" \
    > "$name.log" 2>&1
}
record() {  # rank, lr, seed, then eval arguments
  local rank=$1 lr=$2 seed=$3
  shift 3
  local ppl
  ppl=$("$shamn" eval "$@" --data "$bench/scifi/val.bin" --seq-len 128 |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["perplexity"])')
  echo "{\"rank\":$rank,\"lr\":$lr,\"seed\":$seed,\"ppl\":$ppl}" >> runs.jsonl
}

: > runs.jsonl
for seed in "${seeds[@]}"; do
  for r in ${RANKS:-0 4 8 32}; do
    if [ "$r" = 0 ]; then
      for lr in 5e-5 1e-4 2e-4 4e-4 8e-4; do
        name=s$seed-full-lr$lr
        fine_tune "$name" "$lr" "$seed"
        [ -f "$name.shq" ] ||
          "$shamn" export "$name/best.h5" --tokenizer "$bench/tok.bpe" --quant f32 -o "$name.shq" > /dev/null
        record 0 "$lr" "$seed" "$name.shq"
      done
      continue
    fi
    alpha=$(python3 -c "r = $r; print(float(${ALPHA:-2 * r}))")
    for lr in 2.5e-4 5e-4 1e-3 2e-3; do
      name=s$seed-r$r-lr$lr
      fine_tune "$name" "$lr" "$seed" --set lora.rank="$r" --set lora.alpha="$alpha" --set "lora.targets=$targets"
      [ -f "$name.lora" ] ||
        "$shamn" export "$name/best.h5" --base "$bench/base/best.h5" --quant f32 -o "$name.lora" > /dev/null
      record "$r" "$lr" "$seed" "$bench/base-f32.shq" --adapter "$name.lora"
    done
  done
done
python3 - runs.jsonl <<'PY'
import json, statistics, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
print("held-out perplexity, mean (sd) over seeds; rank 0 = full fine-tune\n")
print("| rank | lr | perplexity | seeds |")
print("| ---: | ---: | ---: | --- |")
for rank in sorted({r["rank"] for r in runs}):
    for lr in sorted({r["lr"] for r in runs if r["rank"] == rank}):
        ppl = [r["ppl"] for r in runs if r["rank"] == rank and r["lr"] == lr]
        sd = statistics.stdev(ppl) if len(ppl) > 1 else 0.0
        print(f"| {rank} | {lr:g} | {statistics.mean(ppl):.1f} ({sd:.1f}) | {' / '.join(f'{p:.1f}' for p in ppl)} |")
PY
