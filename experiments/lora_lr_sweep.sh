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
# as rsLoRA's alpha / sqrt(rank) does). LRS replaces the adapters' learning
# rates; DROPOUTS lists lora.dropout values to train each adapter at; STEPS
# replaces the 60 steps of every run.
# Usage: [RANKS="0 4 8 32"] [ALPHA="2 * r"] [LRS="2.5e-4 5e-4 1e-3 2e-3"] [DROPOUTS="0"] [STEPS=60]
#        experiments/lora_lr_sweep.sh SHAMN BENCH_WORKDIR OUT [SEEDS...]
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
steps=${STEPS:-60}
suffix=""  # run names as before at 60 steps
[ "$steps" = 60 ] || suffix=-n$steps
targets='["layers.*.mixer.out", "layers.*.memory.query", "layers.*.moe.experts.*.up", "layers.*.moe.experts.*.down"]'

fine_tune() {  # name, lr, seed, then --set overrides
  local name=$1 lr=$2 seed=$3
  shift 3
  [ -f "$name/best.h5" ] && return
  "$shamn" train "$here/configs/small.toml" --set "data.train_path=\"$bench/scifi/train.bin\"" \
    --set "data.val_path=\"$bench/scifi/val.bin\"" --set "data.tokenizer=\"$bench/tok.bpe\"" \
    --set "train.out_dir=\"$name\"" --set "train.init_from=\"$bench/base/best.h5\"" --set "train.max_steps=$steps" \
    --set train.batch_size=8 --set train.seq_len=128 --set train.eval_every=5 --set train.eval_batches=2 \
    --set "train.checkpoint_every=$steps" --set optim.warmup_steps=5 --set optim.weight_decay=0.0 \
    --set "optim.lr=$lr" --set "optim.min_lr=$(python3 -c "print($lr / 10)")" --set "train.seed=$seed" "$@" \
    > "$name.log" 2>&1
}
record() {  # rank, lr, seed, dropout, then eval arguments
  local rank=$1 lr=$2 seed=$3 dropout=$4
  shift 4
  local ppl
  ppl=$("$shamn" eval "$@" --data "$bench/scifi/val.bin" --seq-len 128 |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["perplexity"])')
  echo "{\"rank\":$rank,\"lr\":$lr,\"seed\":$seed,\"dropout\":$dropout,\"ppl\":$ppl}" >> runs.jsonl
}

: > runs.jsonl
for seed in "${seeds[@]}"; do
  for r in ${RANKS:-0 4 8 32}; do
    if [ "$r" = 0 ]; then
      for lr in 5e-5 1e-4 2e-4 4e-4 8e-4; do
        name=s$seed-full-lr$lr$suffix
        fine_tune "$name" "$lr" "$seed"
        [ -f "$name.shq" ] ||
          "$shamn" export "$name/best.h5" --tokenizer "$bench/tok.bpe" --quant f32 -o "$name.shq" > /dev/null
        record 0 "$lr" "$seed" 0 "$name.shq"
      done
      continue
    fi
    alpha=$(python3 -c "r = $r; print(float(${ALPHA:-2 * r}))")
    for lr in ${LRS:-2.5e-4 5e-4 1e-3 2e-3}; do
      for d in ${DROPOUTS:-0}; do
        name=s$seed-r$r-lr$lr$suffix
        [ "$d" = 0 ] || name=$name-d$d
        fine_tune "$name" "$lr" "$seed" --set lora.rank="$r" --set lora.alpha="$alpha" \
          --set "lora.targets=$targets" --set "lora.dropout=$(python3 -c "print(float($d))")"
        [ -f "$name.lora" ] ||
          "$shamn" export "$name/best.h5" --base "$bench/base/best.h5" --quant f32 -o "$name.lora" > /dev/null
        record "$r" "$lr" "$seed" "$d" "$bench/base-f32.shq" --adapter "$name.lora"
      done
    done
  done
done
python3 - runs.jsonl <<'PY'
import json, statistics, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
print("held-out perplexity, mean (sd) over seeds; rank 0 = full fine-tune\n")
print("| rank | lr | lora.dropout | perplexity | seeds |")
print("| ---: | ---: | ---: | ---: | --- |")
for key in sorted({(r["rank"], r["lr"], r.get("dropout", 0)) for r in runs}):
    ppl = [r["ppl"] for r in runs if (r["rank"], r["lr"], r.get("dropout", 0)) == key]
    sd = statistics.stdev(ppl) if len(ppl) > 1 else 0.0
    rank, lr, dropout = key
    print(f"| {rank} | {lr:g} | {dropout:g} | {statistics.mean(ppl):.1f} ({sd:.1f}) | {' / '.join(f'{p:.1f}' for p in ppl)} |")
PY
