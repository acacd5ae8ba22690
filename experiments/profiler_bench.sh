#!/usr/bin/env bash
# The cost of the profiler on `shamn train`: the same run with --profile off and
# on (and, given BASE=path/to/shamn built without the profiler, that binary),
# interleaved so all variants see the same machine. Each run's figure is the
# median tokens/s of its steps 2..N (metrics.jsonl; step 1 is warm-up). The
# script prints every run's figure, the median per variant, and the median over
# rounds of each variant's time per step relative to the reference run of the
# same round (base, else off): runs of one round are seconds apart, so load
# from other processes that drifts over minutes cancels out.
# Data: a synthetic token file with the config's vocab, no val file.
# Usage: [BASE=... [CONTROL=1]] [SHAMN=./build/shamn] experiments/profiler_bench.sh CONFIG STEPS REPEATS [THREADS]
set -euo pipefail
config=$1 steps=$2 repeats=$3 threads=${4:-2}
shamn=${SHAMN:-./build/shamn}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
vocab=$(sed -n 's/^vocab_size *= *\([0-9]*\).*/\1/p' "$config" | head -1)
"$shamn" synthetic --out "$work/data" --vocab "$vocab" --successors 64 --tokens 2000000 > /dev/null
variants=(off on)
[ -n "${BASE:-}" ] && variants=(base off on)
# CONTROL=1: BASE against itself, the noise floor of this machine right now.
[ -n "${CONTROL:-}" ] && variants=(base base2)
echo "config $config, $steps steps, $repeats repeats, $threads threads; load average $(cut -d' ' -f1-3 /proc/loadavg)"
run() {  # run VARIANT REPEAT
  local bin=$shamn flags=()
  case $1 in
    base | base2) bin=$BASE ;;
    on) flags=(--profile) ;;
  esac
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
rates = {v: [float(l) for l in open(f"{work}/{v}.rates")] for v in variants}
pairs = [(v, variants[0]) for v in variants[1:]] + ([("on", "off")] if "base" in variants and "on" in variants else [])
for v, ref in pairs:
    rel = [100 * (a / b - 1) for a, b in zip(rates[ref], rates[v])]
    print(f"{v:4s} vs {ref}: median {statistics.median(rel):+.2f}% time per step; rounds: " +
          " ".join(f"{x:+.1f}" for x in rel))
PY
