#!/usr/bin/env bash
# Quality of the two weight-init schemes (train.init, layers/README.md): a config
# trained from each scheme's init per seed, and each run's final validation
# perplexity side by side. Jobs are SEED/SCHEME pairs run in turn, so two
# invocations with different jobs can share the cores as lanes; with no jobs it
# prints the table of the runs OUT_DIR holds. SCHEME is normal, fan_in, or
# normal+res (normal with train.init_scale_residual = true).
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
  scale_residual=false
  if [ "$scheme" = normal+res ]; then scheme=normal; scale_residual=true; fi
  [ -f "$run/metrics.jsonl" ] && grep -q val_ppl "$run/metrics.jsonl" && continue
  "$shamn" --threads "$threads" train "$config" \
    --set "data.train_path=\"$data/train.bin\"" --set "data.val_path=\"$data/val.bin\"" \
    --set "data.tokenizer=\"$data/tokenizer.bpe\"" --set "train.seed=$seed" \
    --set "train.init=\"$scheme\"" --set "train.init_std=$init_std" \
    --set "train.init_scale_residual=$scale_residual" --set "train.max_steps=$steps" \
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
schemes = [x for x in ("normal", "fan_in", "normal+res") if any(k[1] == x for k in runs)]
pairs = [(a, b) for a, b in (("normal", "fan_in"), ("normal+res", "normal")) if a in schemes and b in schemes]
def change(a, b):
    return f"{100 * (a / b - 1):+.2f}%"
print(f"{config}, {steps} steps: validation perplexity by seed and scheme\n")
print("| seed | step | " + " | ".join(schemes) + "".join(f" | {a} vs {b}" for a, b in pairs) + " |")
print("| ---: | ---: |" + " ---: |" * (len(schemes) + len(pairs)))
final = {x: [] for x in schemes}
for s in seeds:
    steps_seen = sorted(set().union(*(runs.get((s, x), {}).keys() for x in schemes)))
    for step in steps_seen:
        vals = {x: runs.get((s, x), {}).get(step) for x in schemes}
        ratios = [change(vals[a], vals[b]) if vals[a] and vals[b] else "" for a, b in pairs]
        print(f"| {s} | {step} | " + " | ".join("" if v is None else f"{v:.2f}" for v in vals.values())
              + "".join(f" | {r}" for r in ratios) + " |")
    for x in schemes:
        if (s, x) in runs:
            final[x].append(runs[s, x][max(runs[s, x])])
cells = [f"{statistics.mean(v):.2f} (sd {statistics.stdev(v) if len(v) > 1 else 0:.2f})" for v in final.values()]
ratios = [change(statistics.mean(final[a]), statistics.mean(final[b]))
          if final[a] and len(final[a]) == len(final[b]) else "" for a, b in pairs]
print(f"| mean of {len(seeds)} | final | " + " | ".join(cells) + "".join(f" | {r}" for r in ratios) + " |")
PY
