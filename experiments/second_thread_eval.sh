#!/usr/bin/env bash
# What a second thread adds to `shamn eval`, against what the machine's two
# cores do at the same moment (second_thread_bench.sh does the same for a
# prefill): per round, two 1-thread evaluations of the first binary at once,
# one pinned to each core, then each binary on 2 threads, then the first
# binary on 1 thread alone. Steady state from `--profile`'s table, which leaves
# the first step out (a window, or a round of concurrent windows): its wall
# time over its eval_window calls is the time a window takes.
# Prints one line per round: ms a window for each run, the pair's as one
# (1 / (1/a + 1/b)), and each 2-thread run over the pair (1.0 = linear).
# Usage: second_thread_eval.sh MODEL.shq VAL.bin ROUNDS SHAMN [SHAMN ...]
set -euo pipefail
model=$1 data=$2 rounds=$3
shift 3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The profile's bounds need the machine's limits: measured once, not per run.
"$1" machine --json > "$tmp/machine.json"
# ms a window at steady state, from an eval --profile table on stderr.
window_ms() {
  python3 -c '
import re, sys
text = sys.stdin.read()
wall = float(re.search(r"profile: ([0-9.]+) ms wall", text).group(1))
calls = int(re.search(r"^eval_window\s+eval\s+(\d+)", text, re.M).group(1))
print(f"{wall / calls:.2f}")'
}
run() {  # THREADS SHAMN [CPU]
  local pin=()
  [ $# -ge 3 ] && pin=(taskset -c "$3")
  "${pin[@]}" "$2" --threads "$1" eval "$model" --data "$data" --profile --machine "$tmp/machine.json" 2>&1 > /dev/null | window_ms
}
for r in $(seq 1 "$rounds"); do
  run 1 "$1" 0 > "$tmp/core0" &
  core0=$!
  run 1 "$1" 1 > "$tmp/core1"
  wait "$core0"  # a bare wait is 0 even when that run failed
  a=$(cat "$tmp/core0") b=$(cat "$tmp/core1")
  pair=$(python3 -c "print(f'{1 / (1 / $a + 1 / $b):.2f}')")
  line="round $r: cores $a / $b ms, as one $pair"
  for bin in "$@"; do
    two=$(run 2 "$bin")
    line="$line | $bin 2 threads $two ($(python3 -c "print(f'{$pair / $two:.3f}')"))"
  done
  echo "$line | $1 1 thread $(run 1 "$1")"
done
