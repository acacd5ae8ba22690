#!/usr/bin/env bash
# Quality of the two weight-init schemes (train.init, layers/README.md): a config
# trained from each scheme's init per seed, and each run's final validation
# perplexity side by side. Jobs are SEED/SCHEME pairs run in turn, so two
# invocations with different jobs can share the cores as lanes; with no jobs it
# prints the table of the runs OUT_DIR holds.
# Usage: [STEPS=1000] [CONFIG=configs/small.toml] [THREADS=1] [INIT_STD=0.02]
#        experiments/init_quality.sh DATA_DIR OUT_DIR [SEED/SCHEME...]
# DATA_DIR holds the README's data/brown files (train.bin, val.bin,
# tokenizer.bpe); repo root, after building into ./build.
set -euo pipefail
data=$1
out=$2
shift 2
steps=${STEPS:-1000}
config=${CONFIG:-configs/small.toml}
threads=${THREADS:-1}
init_std=${INIT_STD:-0.02}
shamn=${SHAMN:-./build/shamn}
mkdir -p "$out"
for job in "$@"; do
  seed=${job%/*}
  scheme=${job#*/}
  run="$out/seed$seed-$scheme"
  [ -f "$run/metrics.jsonl" ] && grep -q val_ppl "$run/metrics.jsonl" && continue
  "$shamn" --threads "$threads" train "$config" \
    --set "data.train_path=\"$data/train.bin\"" --set "data.val_path=\"$data/val.bin\"" \
    --set "data.tokenizer=\"$data/tokenizer.bpe\"" --set "train.seed=$seed" \
    --set "train.init=\"$scheme\"" --set "train.init_std=$init_std" --set "train.max_steps=$steps" \
    --set "train.eval_every=$((steps / 4))" --set "train.checkpoint_every=$steps" \
    --set "train.out_dir=\"$run\"" --set 'log.progress="never"' > "$run.log" 2>&1
done
[ $# -gt 0 ] && exit 0
/usr/bin/python3 - "$out" "$config" "$steps" <<'PY'
import glob, json, os, statistics, sys
out, config, steps = sys.argv[1:]
runs = {}
for path in glob.glob(os.path.join(out, "seed*-*/metrics.jsonl")):
    seed, scheme = os.path.basename(os.path.dirname(path))[4:].split("-", 1)
    evals = [r for r in map(json.loads, open(path)) if "val_ppl" in r]
    if evals:
        runs[int(seed), scheme] = {r["step"]: r["val_ppl"] for r in evals}
seeds = sorted({s for s, _ in runs})
schemes = [x for x in ("normal", "fan_in") if any(k[1] == x for k in runs)]
print(f"{config}, {steps} steps: validation perplexity by seed and scheme\n")
print("| seed | step | " + " | ".join(schemes) + " | normal vs fan_in |")
print("| ---: | ---: |" + " ---: |" * (len(schemes) + 1))
final = {x: [] for x in schemes}
for s in seeds:
    steps_seen = sorted(set().union(*(runs.get((s, x), {}).keys() for x in schemes)))
    for step in steps_seen:
        vals = [runs.get((s, x), {}).get(step) for x in schemes]
        ratio = (f"{100 * (vals[0] / vals[1] - 1):+.2f}%"
                 if len(vals) == 2 and None not in vals else "")
        print(f"| {s} | {step} | " + " | ".join("" if v is None else f"{v:.2f}" for v in vals)
              + f" | {ratio} |")
    for x in schemes:
        if (s, x) in runs:
            final[x].append(runs[s, x][max(runs[s, x])])
cells = [f"{statistics.mean(v):.2f} (sd {statistics.stdev(v) if len(v) > 1 else 0:.2f})" for v in final.values()]
ratio = ""
if len(schemes) == 2 and final["normal"] and len(final["normal"]) == len(final["fan_in"]):
    ratio = f"{100 * (statistics.mean(final['normal']) / statistics.mean(final['fan_in']) - 1):+.2f}%"
print(f"| mean of {len(seeds)} | final | " + " | ".join(cells) + f" | {ratio} |")
PY
