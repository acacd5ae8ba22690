#!/usr/bin/env bash
# Soak (opt-in, never in CI: the kill moments are random on purpose): `shamn
# train` on the tiny config, killed with SIGKILL KILLS times at random moments
# (process start, loading, steps, checkpoint writes alike) and resumed each time,
# then left to finish. Checks after every kill that each checkpoint left loads,
# and at the end that the final weights, AdamW moments, state and metrics are
# bitwise those of an uninterrupted run of the same config. Prints where each
# kill landed. The deterministic version of this test, with a kill at every
# named write site, runs in CI: tests/train/fault_injection.sh.
# Usage: experiments/soak_train.sh [KILLS=20] [MAX_DELAY_S=1.5]   (repo root, after
# building into ./build; SHAMN=path/to/shamn for another binary)
set -euo pipefail
kills=${1:-20}
max_delay=${2:-1.5}
shamn=${SHAMN:-./build/shamn}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
"$shamn" synthetic --out "$work/data" --vocab 64 --successors 4 --tokens 400000 > /dev/null
# A checkpoint every step, so a good share of the kills land inside a write.
sets=(--set "data.train_path=\"$work/data/train.bin\"" --set "data.val_path=\"$work/data/val.bin\""
      --set model.vocab_size=64 --set model.embed.buckets=32 --set model.memory.size=16384
      --set train.max_steps=${STEPS:-400} --set train.checkpoint_every=1 --set train.keep_last=3
      --set train.eval_every=50 --set train.eval_batches=2 --set 'log.progress="never"')
digest() { "$shamn" info "$1" --tensors | sed -n '/^# tensors/,$p'; }
metrics() { sed -E 's/,"(tokens_per_s|elapsed_s)":[^,}]*//g' "$1"; }
last_step() { ls "$1"/ckpt_*.h5 2> /dev/null | sort | tail -1 | sed -E 's/.*ckpt_0*([0-9]+)\.h5/\1/'; }

start=$(date +%s.%N)
"$shamn" --threads 1 train configs/tiny.toml "${sets[@]}" --set "train.out_dir=\"$work/ref\"" > /dev/null
echo "uninterrupted run: $(echo "$(date +%s.%N) - $start" | bc) s"

run=$work/run
mid_write=0 before_first=0 between=0 finished_early=0
printf '%-5s %-8s %-10s %-9s %s\n' kill delay_s ckpt_step temp_left landed
for i in $(seq 1 "$kills"); do
  if [ -d "$run" ] && ls "$run"/ckpt_*.h5 > /dev/null 2>&1; then
    "$shamn" --threads 1 train --resume "$run" > "$work/log.$i" 2>&1 &
  else
    rm -rf "$run"
    "$shamn" --threads 1 train configs/tiny.toml "${sets[@]}" --set "train.out_dir=\"$run\"" > "$work/log.$i" 2>&1 &
  fi
  pid=$!
  delay=$(awk -v r="$RANDOM" -v m="$max_delay" 'BEGIN { printf "%.3f", 0.02 + (r / 32767) * m }')
  sleep "$delay"
  if ! kill -9 "$pid" 2> /dev/null; then finished_early=$((finished_early + 1)); fi
  wait "$pid" 2> /dev/null || true
  temp=no
  ls -A "$run" 2> /dev/null | grep -q '\.tmp\.' && temp=yes
  if [ "$temp" = yes ] && ls -A "$run" | grep -q '^\.ckpt_.*\.tmp\.'; then
    landed="inside a checkpoint write"; mid_write=$((mid_write + 1))
  elif ! ls "$run"/ckpt_*.h5 > /dev/null 2>&1; then
    landed="before the first checkpoint"; before_first=$((before_first + 1))
  else
    landed="between writes (start-up, loading, a step, metrics)"; between=$((between + 1))
  fi
  for f in "$run"/ckpt_*.h5 "$run"/best.h5; do
    [ -e "$f" ] || continue
    "$shamn" info "$f" > /dev/null 2>&1 || fail "kill $i: $f does not load"
  done
  printf '%-5s %-8s %-10s %-9s %s\n' "$i" "$delay" "$(last_step "$run")" "$temp" "$landed"
done
"$shamn" --threads 1 train --resume "$run" > "$work/log.final" 2>&1 || { cat "$work/log.final"; fail "final resume"; }
final=$(printf '%s/ckpt_%08d.h5' "$run" "${STEPS:-400}")
[ "$(digest "$final")" = "$(digest "$(printf '%s/ckpt_%08d.h5' "$work/ref" "${STEPS:-400}")")" ] ||
  fail "the final checkpoint differs from the uninterrupted run"
[ "$(metrics "$run/metrics.jsonl")" = "$(metrics "$work/ref/metrics.jsonl")" ] || fail "metrics differ"
! ls -A "$run" | grep -q '\.tmp\.' || fail "temporary files left after the final run"
echo "kills $kills: $mid_write inside a checkpoint write, $between between writes, $before_first before the first checkpoint, $finished_early after the run had ended"
echo "final weights, moments, state and metrics: bitwise equal to the uninterrupted run"
