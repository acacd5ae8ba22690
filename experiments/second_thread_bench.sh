#!/usr/bin/env bash
# What a second thread adds to a batched prefill, against what the machine's
# two cores do at the same moment: per round, two 1-thread benches of the
# first binary run at once, one pinned to each core, then each binary runs
# one 2-thread bench. On a shared VM the two vCPUs are not equally fast and
# their speed moves from minute to minute, so a 1-thread run alone says little
# about what two threads should reach; the sum of the concurrent pair is the
# most two independent streams get from both cores (shared L3 and memory
# bandwidth included). Steady state: 100 prefills after 10 warm-ups.
# With STREAMS=B set, the same for a decode step over B streams instead
# (`bench --streams B`, 16-token prompts, 32 decoded tokens, 20 repeats after 3
# warm-ups; decode tok/s of all streams).
# Prints one line per round: the pair's sum and, per binary, its 2-thread
# tok/s and that over the sum (1.0 = linear).
# Usage: [STREAMS=B] second_thread_bench.sh MODEL.shq ROUNDS SHAMN [SHAMN ...]
set -euo pipefail
model=$1 rounds=$2
shift 2
if [ -n "${STREAMS:-}" ]; then
  args=(bench "$model" --streams "$STREAMS" --prompt-tokens 16 --decode-tokens 32 --repeats 20 --warmup 3 --json)
  key=decode_tok_s
else
  args=(bench "$model" --prompt-tokens 512 --decode-tokens 1 --repeats 100 --warmup 10 --json)
  key=prefill_tok_s
fi
prefill() { python3 -c "import json, sys; print(round(json.load(sys.stdin)['$key']))"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for r in $(seq 1 "$rounds"); do
  taskset -c 0 "$1" --threads 1 "${args[@]}" | prefill > "$tmp/core0" &
  core0=$!
  taskset -c 1 "$1" --threads 1 "${args[@]}" | prefill > "$tmp/core1"
  wait "$core0"  # a bare wait is 0 even when that run failed
  sum=$(($(cat "$tmp/core0") + $(cat "$tmp/core1")))
  line="round $r: cores $(cat "$tmp/core0") + $(cat "$tmp/core1") = $sum"
  for bin in "$@"; do
    two=$("$bin" --threads 2 "${args[@]}" | prefill)
    line="$line | $bin $two $(python3 -c "print(f'{$two / $sum:.3f}')")"
  done
  echo "$line"
done
