#!/usr/bin/env bash
# Soak (opt-in, never in CI: the kill moments are random on purpose): the tiny
# sweep (configs/ablations/tiny.toml) killed KILLS times at random moments with
# SIGKILL to the sweep and every child it has running (train, export, eval,
# bench), as a crash of the machine would, and rerun each time;
# then finished. results.csv must equal an uninterrupted sweep's apart from the
# timing columns (tokens/s, peak RSS, wall time, decode tok/s).
# Usage: experiments/soak_sweep.sh [KILLS=5] [MAX_DELAY_S=3]   (repo root, after
# building into ./build; SHAMN=path/to/shamn for another binary)
set -euo pipefail
kills=${1:-5}
max_delay=${2:-3}
repo=$PWD
shamn=$(realpath "${SHAMN:-./build/shamn}")
sweep=$(realpath configs/ablations/tiny.toml)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cd "$work"
"$shamn" synthetic --out runs/sweep_tiny_data --vocab 64 --successors 4 --tokens 200000 > /dev/null
untimed() { /usr/bin/python3 "$repo/tests/sweep/untimed_results.py" "$1"; }

start=$(date +%s.%N)
"$shamn" sweep "$sweep" --out-dir ref > ref.log 2>&1 || { cat ref.log; fail "uninterrupted sweep"; }
echo "uninterrupted sweep: $(echo "$(date +%s.%N) - $start" | bc) s"
untimed ref/results.csv > /dev/null || fail "results.csv lost a timing column"

# A crash of the machine: the sweep is frozen (so it starts no new child), then
# it and every child it has running (each in its own process group, so that a
# terminal's Ctrl-C reaches only the sweep) get SIGKILL at once.
printf '%-5s %-8s %-14s %-9s %s\n' kill delay_s processes_hit landed results_done
landed_total=0
for i in $(seq 1 "$kills"); do
  "$shamn" sweep "$sweep" --out-dir soak > "log.$i" 2>&1 &
  pid=$!
  delay=$(awk -v r="$RANDOM" -v m="$max_delay" 'BEGIN { printf "%.3f", 0.1 + (r / 32767) * m }')
  sleep "$delay"
  landed=no
  hit=0
  if kill -STOP "$pid" 2> /dev/null; then
    victims=("$pid" $(pgrep -P "$pid" || true))
    hit=${#victims[@]}
    kill -9 "${victims[@]}" 2> /dev/null || true
    # Each trainer leads a process group (with the gnuplot it may run): all of it goes.
    for child in "${victims[@]:1}"; do kill -9 -- "-$child" 2> /dev/null || true; done
    landed=yes
    landed_total=$((landed_total + 1))
  fi
  status=0
  wait "$pid" 2> /dev/null || status=$?
  # The orphaned trainers hold the sweep's lock until the kernel has ended them
  # (they inherit it): the next sweep waits for that, as a user's rerun would be told to.
  [ ! -e soak/.sweep.lock ] || flock soak/.sweep.lock true
  [ "$landed" = yes ] || [ "$status" -eq 0 ] || { cat "log.$i"; fail "run $i ended with status $status"; }
  printf '%-5s %-8s %-14s %-9s %s\n' "$i" "$delay" "$hit" "$landed" "$(ls soak/*/result.json 2> /dev/null | wc -l)/4"
done
echo "$landed_total of $kills kills landed while the sweep ran"
"$shamn" sweep "$sweep" --out-dir soak > final.log 2>&1 || { cat final.log; fail "the final rerun"; }
[ "$(untimed soak/results.csv)" = "$(untimed ref/results.csv)" ] ||
  { diff <(untimed soak/results.csv) <(untimed ref/results.csv) || true; fail "results differ"; }
echo "results.csv after $kills kills: equal to the uninterrupted sweep apart from timing columns"
