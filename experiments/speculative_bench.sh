#!/usr/bin/env bash
# Speculative against plain decoding, interleaved so both see the same machine
# load: per round, for each temperature, plain `generate` on the target, then
# `generate --draft` for every draft and K. One line per run: round,
# temperature, draft, K, decode tok/s, acceptance; then, per (temperature,
# draft, K), the median acceptance and the median of the per-round speed-up
# over that round's plain run (experiments/inference.md).
# Usage: speculative_bench.sh SHAMN TARGET.shq ROUNDS TOKENS DRAFT.shq[:K1,K2,...] ...
set -euo pipefail
shamn=$1 target=$2 rounds=$3 tokens=$4
shift 4
prompt=${PROMPT:-"The jury said"}
threads=${THREADS:-1}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
run() {  # temperature seed draft k [generate flags...]
  local temp=$1 seed=$2 draft=$3 k=$4 err
  shift 4
  err=$("$shamn" --threads "$threads" generate "$target" --prompt "$prompt" --max-tokens "$tokens" \
    --temperature "$temp" --seed "$seed" "$@" 2>&1 > /dev/null)
  local tps acc
  tps=$(sed -n 's/.* tokens: \([0-9.]*\) tok\/s decode.*/\1/p' <<< "$err")
  acc=$(sed -n 's/.*draft acceptance \([0-9.]*\).*/\1/p' <<< "$err")
  echo "$r $temp $draft $k $tps ${acc:-1}" | tee -a "$log"
}
for r in $(seq 1 "$rounds"); do
  for temp in 0 0.8; do
    run $temp $r plain 0
    for spec in "$@"; do
      draft=${spec%%:*} ks=${spec#*:}
      [ "$ks" = "$spec" ] && ks=4
      for k in ${ks//,/ }; do run $temp $r "$draft" "$k" --draft "$draft" --draft-tokens "$k"; done
    done
  done
done
/usr/bin/python3 - "$log" <<'PY'
import statistics, sys
runs = [l.split() for l in open(sys.argv[1])]
plain = {(r, t): float(tps) for r, t, d, k, tps, a in runs if d == "plain"}
groups = {}
for r, t, d, k, tps, a in runs:
    groups.setdefault((t, d, int(k)), []).append((float(tps) / plain[(r, t)], float(a), float(tps)))
print("temperature draft K | median tok/s | median acceptance | median speed-up (per-round ratio) | min..max")
for (t, d, k), v in groups.items():
    ratios = [x[0] for x in v]
    print(f"{t} {d} {k} | {statistics.median(x[2] for x in v):.1f} | {statistics.median(x[1] for x in v):.3f} | "
          f"{statistics.median(ratios):.3f} | {min(ratios):.3f}..{max(ratios):.3f}")
PY
