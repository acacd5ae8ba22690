#!/usr/bin/env bash
# Two binaries' 1-thread prefill and decode at the same moment, one pinned to
# each of two cores, then with the cores swapped: on a shared, noisy machine
# both runs see the same neighbours, so the ratio of a pair is steadier than
# the ratio of runs taken one after the other (batched_infer_bench.sh).
# One JSON line per run, tagged with its binary, pair and core.
# Usage: pinned_pair_bench.sh NEW_SHAMN BASE_SHAMN MODEL.shq PAIRS [CORE_A CORE_B]
set -euo pipefail
new=$1 base=$2 model=$3 pairs=$4 ca=${5:-0} cb=${6:-1}
run() {  # tag bin core pair
  local line
  line=$(taskset -c "$3" "$2" --threads 1 bench "$model" --prompt-tokens 512 --decode-tokens 128 --repeats 5 --json)
  echo "{\"bin\":\"$1\",\"pair\":$4,\"core\":$3,\"run\":$line}"
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for p in $(seq 1 "$pairs"); do
  if [ $((p % 2)) -eq 1 ]; then new_core=$ca base_core=$cb; else new_core=$cb base_core=$ca; fi
  run new "$new" "$new_core" "$p" > "$tmp/new" &
  new_run=$!
  run base "$base" "$base_core" "$p" > "$tmp/base"
  wait "$new_run"  # a bare wait is 0 even when that run failed
  cat "$tmp/new" "$tmp/base"
done
