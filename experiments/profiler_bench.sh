#!/usr/bin/env bash
# The cost of the profiler on `shamn train`: the same run with --profile off and
# on (and, given BASE=path/to/shamn built without the profiler, that binary),
# interleaved so all variants see the same machine. Each run's figure is the
# median tokens/s of its steps 2..N (metrics.jsonl; step 1 is warm-up); the
# script prints every run's figure and, per variant, the median over repeats.
# Data: a synthetic token file with the config's vocab, no val file.
# Usage: [BASE=...] [SHAMN=./build/shamn] experiments/profiler_bench.sh CONFIG STEPS REPEATS [THREADS]
set -euo pipefail
config=$1 steps=$2 repeats=$3 threads=${4:-2}
shamn=${SHAMN:-./build/shamn}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
vocab=$(sed -n 's/^vocab_size *= *\([0-9]*\).*/\1/p' "$config" | head -1)
"$shamn" synthetic --out "$work/data" --vocab "$vocab" --successors 64 --tokens 2000000 > /dev/null
variants=(off on)
[ -n "${BASE:-}" ] && variants=(base off on)
echo "config $config, $steps steps, $repeats repeats, $threads threads; load average $(cut -d' ' -f1-3 /proc/loadavg)"
run() {  # run VARIANT REPEAT
  local bin=$shamn flags=()
  [ "$1" = base ] && bin=$BASE
  [ "$1" = on ] && flags=(--profile)
  local out="$work/$1_$2"
  "$bin" --threads "$threads" train "$config" \
    --set "data.train_path=\"$work/data/train.bin\"" --set 'data.val_path=""' \
    --set "train.max_steps=$steps" --set optim.warmup_steps=0 --set train.checkpoint_every=0 \
    --set "train.out_dir=\"$out\"" --set 'log.progress="never"' "${flags[@]}" > "$out.log"
  /usr/bin/python3 - "$out/metrics.jsonl" <<'PY' >> "$work/$1.rates"
import json, statistics, sys
rates = [json.loads(l)["tokens_per_s"] for l in open(sys.argv[1]) if '"loss"' in l][1:]
print(statistics.median(rates))
PY
}
for r in $(seq 1 "$repeats"); do
  for v in "${variants[@]}"; do run "$v" "$r"; done
done
/usr/bin/python3 - "$work" "${variants[@]}" <<'PY'
import statistics, sys
work, variants = sys.argv[1], sys.argv[2:]
med = {}
for v in variants:
    rates = [float(l) for l in open(f"{work}/{v}.rates")]
    med[v] = statistics.median(rates)
    print(f"{v:4s} median {med[v]:10.1f} tok/s   runs: " + " ".join(f"{x:.0f}" for x in rates))
ref = med.get("base", med["off"])
for v in variants:
    print(f"{v:4s} vs {'base' if 'base' in med else 'off'}: {100 * (ref / med[v] - 1):+.2f}% time per step")
PY
