#!/usr/bin/env bash
# LoRA on Brown (issue 16, experiments/lora.md). A small.toml base is trained
# on every genre but science fiction (category m, the smallest: 6 documents),
# then adapted to science fiction's training paragraphs: a full fine-tune and
# rank 4, 8 and 32 adapters, the same steps, batch and learning-rate schedule
# for each (the adapters at 5x the full fine-tune's rate, the usual LoRA
# practice). Each run keeps its best checkpoint on science fiction's held-out
# paragraphs. Then, as f32 and int8 model files: the held-out loss of the
# base, the full fine-tune and each adapter; and the runtime's decode and
# batched throughput with no adapter, one, and four mixed in one batch.
# One JSON line per measurement goes to WORKDIR/results.jsonl.
# FT_SEED (default: the config's) seeds the fine-tunes alone (an adapter's A and
# the batches): other seeds over one base come from a WORKDIR that links the
# first one's data, tokenizer, base/ and base-*.shq.
# Usage: [FT_SEED=N] experiments/lora_bench.sh SHAMN WORKDIR [BASE_STEPS FT_STEPS ROUNDS]
set -euo pipefail
shamn=$(realpath "$1")
work=$2 base_steps=${3:-600} ft_steps=${4:-60} rounds=${5:-5}
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$work"
cd "$work"
out=results.jsonl
: > "$out"

[ -f rest.txt ] || bash "$here/data/fetch_brown.sh" rest.txt '^c[a-ln-r]'
[ -f scifi.txt ] || bash "$here/data/fetch_brown.sh" scifi.txt '^cm'
[ -f tok.bpe ] || "$shamn" tokenizer train --input rest.txt --vocab 8192 -o tok.bpe > /dev/null
[ -f rest/train.bin ] || "$shamn" prepare --input rest.txt --tokenizer tok.bpe --out rest > /dev/null
[ -f scifi/train.bin ] || "$shamn" prepare --input scifi.txt --tokenizer tok.bpe --out scifi --val-fraction 0.2 > /dev/null

data() {  # the token files of a directory
  echo --set "data.train_path=\"$1/train.bin\"" --set "data.val_path=\"$1/val.bin\"" \
    --set "data.tokenizer=\"$work/tok.bpe\""
}

# 1. The base: every genre but science fiction.
if [ ! -f base/best.h5 ]; then
  # shellcheck disable=SC2046
  "$shamn" train "$here/configs/small.toml" $(data rest) --set "train.out_dir=\"base\"" \
    --set train.max_steps="$base_steps" --set train.eval_every=100 --set train.checkpoint_every=100 \
    > base.log 2>&1
fi

# 2. Adapting to science fiction: small batches (its training text is ~12k
# tokens), evaluation every 5 steps on its held-out paragraphs.
adapt() {  # name, then --set overrides
  local name=$1
  shift
  [ -f "$name/best.h5" ] && return
  # shellcheck disable=SC2046
  "$shamn" train "$here/configs/small.toml" $(data scifi) --set "train.out_dir=\"$name\"" \
    --set "train.init_from=\"base/best.h5\"" --set train.max_steps="$ft_steps" --set train.batch_size=8 \
    --set train.seq_len=128 --set train.eval_every=5 --set train.eval_batches=2 \
    --set train.checkpoint_every="$ft_steps" --set optim.warmup_steps=5 --set optim.weight_decay=0.0 \
    ${FT_SEED:+--set train.seed="$FT_SEED"} "$@" \
    > "$name.log" 2>&1
}
adapt full --set optim.lr=2e-4 --set optim.min_lr=2e-5
targets='["layers.*.mixer.out", "layers.*.memory.query", "layers.*.moe.experts.*.up", "layers.*.moe.experts.*.down"]'
for r in 4 8 32; do
  adapt "lora$r" --set optim.lr=1e-3 --set optim.min_lr=1e-4 --set lora.rank="$r" \
    --set lora.alpha="$((2 * r)).0" --set "lora.targets=$targets"
done
# Rank 8 on the dense-side matrices alone (mixers' outputs and the memory
# query): the cheap end of the runtime's cost.
# The dense side only (the mixers' output projections and the memory query).
for r in 4 8 32; do
  adapt "lora${r}mq" --set optim.lr=1e-3 --set optim.min_lr=1e-4 --set lora.rank="$r" \
    --set lora.alpha="$((2 * r)).0" --set 'lora.targets=["layers.*.mixer.out", "layers.*.memory.query"]'
done
for run in full lora4 lora8 lora32 lora4mq lora8mq lora32mq; do
  python3 - "$run" "$run/metrics.jsonl" "$run.log" >> "$out" <<'PY'
import json, re, sys, statistics
name, metrics, log = sys.argv[1:]
rows = [json.loads(l) for l in open(metrics)]
train = [r for r in rows if "tokens_per_s" in r]
val = [r["val_loss"] for r in rows if "val_loss" in r]
text = open(log).read()
rss = re.findall(r"peak RSS ([0-9.]+) MiB", text)
lora = re.findall(r"LoRA: ([0-9]+) adapter parameters", text)
model = re.findall(r"model: ([0-9]+) parameters", text)
print(json.dumps({"run": name, "tokens_per_s_median": statistics.median(r["tokens_per_s"] for r in train[1:] or train),
                  "best_val_loss": min(val), "peak_rss_mib": float(rss[-1]) if rss else None,
                  "trainable": int((lora or model)[-1])}))
PY
done

# 3. Model and adapter files, f32 and int8.
for q in f32 int8; do
  [ -f "base-$q.shq" ] || "$shamn" export base/best.h5 --tokenizer tok.bpe --quant "$q" -o "base-$q.shq" > /dev/null
  [ -f "full-$q.shq" ] || "$shamn" export full/best.h5 --tokenizer tok.bpe --quant "$q" -o "full-$q.shq" > /dev/null
  for r in 4 8 32 4mq 8mq 32mq; do
    [ -f "lora$r-$q.lora" ] ||
      "$shamn" export "lora$r/best.h5" --base base/best.h5 --quant "$q" -o "lora$r-$q.lora" > /dev/null
  done
done

# 3b. No-op adapters, for the runtime's cost alone: the same ranks and targets
# after one step at a learning rate of 1e-30, so B is ~1e-30 and the model
# computes the base's exact logits (`bench` decodes the same tokens, by its
# CRC). A trained adapter also moves the activations, so the tokens' routes to
# the experts and the memory's slots, and with them the base's own work.
noop() {  # name, rank, targets
  [ -f "$1/best.h5" ] && return
  # shellcheck disable=SC2046
  "$shamn" train "$here/configs/small.toml" $(data scifi) --set "train.out_dir=\"$1\"" \
    --set "train.init_from=\"base/best.h5\"" --set train.max_steps=1 --set train.batch_size=8 \
    --set train.seq_len=128 --set train.eval_every=1000 --set train.checkpoint_every=1 \
    --set optim.lr=1e-30 --set optim.min_lr=1e-31 --set optim.warmup_steps=0 --set optim.weight_decay=0.0 \
    --set lora.rank="$2" --set lora.alpha="$((2 * $2)).0" --set "lora.targets=$3" > "$1.log" 2>&1
}
for r in 4 8 32; do
  noop "noop$r" "$r" "$targets"
  noop "noop${r}mq" "$r" '["layers.*.mixer.out", "layers.*.memory.query"]'
  for q in f32 int8; do
    for t in "$r" "${r}mq"; do
      [ -f "noop$t-$q.lora" ] ||
        "$shamn" export "noop$t/best.h5" --base base/best.h5 --quant "$q" -o "noop$t-$q.lora" > /dev/null
    done
  done
done

# 4. Held-out science fiction, as the runtime sees it.
ev() {  # tag, then eval arguments
  local tag=$1
  shift
  echo "{\"eval\":\"$tag\",\"run\":$("$shamn" eval "$@" --data scifi/val.bin --seq-len 128)}" >> "$out"
}
for q in f32 int8; do
  ev "base-$q" "base-$q.shq"
  ev "full-$q" "full-$q.shq"
  for r in 4 8 32 4mq 8mq 32mq; do ev "lora$r-$q" "base-$q.shq" --adapter "lora$r-$q.lora"; done
done

# 5. The runtime's cost of adapters on the int8 base, interleaved per round:
# decode (1 stream) and 16 streams, with no adapter, one (rank 8 and 32), and
# four mixed in one batch (ranks 4, 8, 32 and 8 again).
bench() {  # tag, then bench arguments
  local tag=$1
  shift
  echo "{\"bench\":\"$tag\",\"round\":$round,\"run\":$("$shamn" --threads 1 bench base-int8.shq --json \
    --prompt-tokens 128 --decode-tokens 128 --repeats 3 "$@")}" >> "$out"
}
for round in $(seq 1 "$rounds"); do
  for streams in 1 16; do
    bench "none-s$streams" --streams "$streams"
    bench "r8-s$streams" --streams "$streams" --adapter lora8-int8.lora
    bench "r32-s$streams" --streams "$streams" --adapter lora32-int8.lora
    bench "r8mq-s$streams" --streams "$streams" --adapter lora8mq-int8.lora
    bench "mixed4-s$streams" --streams "$streams" --adapter lora4-int8.lora --adapter lora8-int8.lora \
      --adapter lora32-int8.lora --adapter lora8-f32.lora
  done
done
ls -l base/best.h5 full/best.h5 lora*/best.h5 ./*.shq ./*.lora > sizes.txt
echo "done: $out"
