#!/usr/bin/env bash
# Quality cost of train.precision = "bf16": the Brown small config trained with
# f32 and with bf16 products for each seed, in turn in this one script, and
# each run's final validation perplexity (and median tokens/s) side by side.
# Usage: [STEPS=1000] experiments/bf16_quality.sh DATA_DIR OUT_DIR [THREADS] [SEEDS...]
# DATA_DIR holds the README's data/brown files (train.bin, val.bin,
# tokenizer.bpe); repo root, after building into ./build.
set -euo pipefail
data=$1
out=$2
threads=${3:-2}
shift $(($# < 3 ? $# : 3))
seeds=("$@")
[ ${#seeds[@]} -gt 0 ] || seeds=(1 2 3)
steps=${STEPS:-1000}
shamn=${SHAMN:-./build/shamn}
mkdir -p "$out"
echo "configs/small.toml, $steps steps, $threads threads, seeds ${seeds[*]}"
for seed in "${seeds[@]}"; do
  for p in f32 bf16; do
    run="$out/seed$seed-$p"
    [ -f "$run/metrics.jsonl" ] && grep -q val_ppl "$run/metrics.jsonl" ||
      "$shamn" --threads "$threads" train configs/small.toml \
        --set "data.train_path=\"$data/train.bin\"" --set "data.val_path=\"$data/val.bin\"" \
        --set "data.tokenizer=\"$data/tokenizer.bpe\"" --set "train.seed=$seed" \
        --set "train.precision=\"$p\"" --set "train.max_steps=$steps" \
        --set "train.eval_every=$((steps / 4))" --set "train.checkpoint_every=$steps" \
        --set "train.out_dir=\"$run\"" --set 'log.progress="never"' > "$run.log" 2>&1
    /usr/bin/python3 - "$run/metrics.jsonl" "$seed" "$p" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
val = [r for r in rows if "val_ppl" in r][-1]
rates = [r["tokens_per_s"] for r in rows if "tokens_per_s" in r][1:]
print(json.dumps({"seed": int(sys.argv[2]), "precision": sys.argv[3], "step": val["step"],
                  "val_loss": round(val["val_loss"], 5), "val_ppl": round(val["val_ppl"], 3),
                  "tokens_per_s": round(statistics.median(rates), 1)}))
PY
  done
done | tee "$out/rows.jsonl"
/usr/bin/python3 - "$out/rows.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {(r["seed"], r["precision"]): r for r in rows}
seeds = sorted({r["seed"] for r in rows})
for p in ("f32", "bf16"):
    ppl = [by[s, p]["val_ppl"] for s in seeds]
    print(f"{p}: val ppl " + " / ".join(f"{x:.2f}" for x in ppl)
          + f" (mean {statistics.mean(ppl):.2f}, sd {statistics.stdev(ppl) if len(ppl) > 1 else 0:.2f})")
diffs = [by[s, "bf16"]["val_ppl"] / by[s, "f32"]["val_ppl"] - 1 for s in seeds]
print("bf16 against f32 per seed: " + " ".join(f"{100 * d:+.2f}%" for d in diffs)
      + f", mean {100 * statistics.mean(diffs):+.2f}%")
PY
