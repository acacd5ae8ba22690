#!/usr/bin/env bash
# Training speed of every point of a sweep, measured alone: the sweep runs two
# points at a time and shares the machine with whatever else runs, so its
# train_tokens_per_s compares points only roughly. This reruns each point's
# seed-1 config for STEPS steps on THREADS threads, one run at a time, in ROUNDS
# interleaved rounds (every point once per round), and prints the median
# tokens/s per point and its ratio to the first point; then the same for int8
# decode (`shamn bench` of the point's model_int8.shq, where the sweep wrote one).
# Usage: [SHAMN=./build/shamn] [ROUNDS=3] [STEPS=40] [THREADS=1] sweep_speed.sh SWEEP_DIR
set -euo pipefail
shamn=${SHAMN:-./build/shamn} rounds=${ROUNDS:-3} steps=${STEPS:-40} threads=${THREADS:-1}
sweep=${1:?usage: $0 SWEEP_DIR}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
points=()
for d in "$sweep"/*seed=1; do [ -f "$d/config.toml" ] && points+=("$d"); done
[ ${#points[@]} -gt 0 ] || { echo "$0: no */config.toml with seed=1 under $sweep" >&2; exit 1; }
for r in $(seq "$rounds"); do
  for d in "${points[@]}"; do
    name=$(basename "$d")
    rm -rf "$tmp/run"
    line=$("$shamn" --threads "$threads" train "$d/config.toml" --set "train.max_steps=$steps" \
      --set "optim.warmup_steps=0" --set "train.checkpoint_every=0" --set "train.out_dir=\"$tmp/run\"" | grep '^done:')
    rate=$(sed -E 's/.*median ([0-9.]+) tok\/s.*/\1/' <<< "$line")
    echo "$r	$name	$rate" | tee -a "$tmp/rates.tsv" >&2
  done
  for d in "${points[@]}"; do
    [ -f "$d/model_int8.shq" ] || continue
    rate=$("$shamn" --threads "$threads" bench "$d/model_int8.shq" --json --repeats 3 |
      python3 -c 'import json, sys; print(json.load(sys.stdin)["decode_tok_s"])')
    echo "$r	$(basename "$d")	$rate" | tee -a "$tmp/decode.tsv" >&2
  done
done
table() {
  python3 - "$1" "$2" <<'PY'
import statistics, sys
rates = {}
for line in open(sys.argv[1]):
    _, name, rate = line.rstrip("\n").split("\t")
    rates.setdefault(name, []).append(float(rate))
first = None
print(f"\n| point | {sys.argv[2]} (median) | rounds | vs first |\n| --- | ---: | --- | ---: |")
for name, v in rates.items():
    m = statistics.median(v)
    first = first or m
    print(f"| {name} | {m:,.0f} | {', '.join(f'{x:,.0f}' for x in v)} | {m / first:.2f}x |")
PY
}
table "$tmp/rates.tsv" "train tokens/s"
[ -f "$tmp/decode.tsv" ] && table "$tmp/decode.tsv" "int8 decode tokens/s"
exit 0
