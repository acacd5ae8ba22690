#!/usr/bin/env bash
# A run killed with SIGKILL at random moments (most of them while it writes a
# checkpoint, since it writes one every step) always leaves loadable checkpoints,
# and --resume carries on from the newest.
# Usage: kill_during_checkpoint.sh SHAMN CONFIG WORKDIR
set -euo pipefail
shamn=$1 config=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
"$shamn" synthetic --out "$work/data" --vocab 64 --tokens 200000 > /dev/null
# A memory bank of 65536 x 128 makes each checkpoint ~100 MB, so writing dominates a step.
sets=(--set "data.train_path=\"$work/data/train.bin\"" --set "data.val_path=\"$work/data/val.bin\""
      --set model.vocab_size=64 --set model.embed.buckets=32 --set model.dim=128
      --set model.memory.size=65536 --set model.memory.key_dim=64 --set model.moe.hidden=128
      --set train.max_steps=1000 --set train.checkpoint_every=1 --set train.keep_last=2
      --set train.eval_every=0 --set optim.warmup_steps=0 --set "train.out_dir=\"$work/run\"" --set 'log.progress="never"')
killed_mid_write=0
kills=0
for i in $(seq 1 40); do
  if [ "$i" -eq 1 ]; then
    "$shamn" --threads 1 train "$config" "${sets[@]}" > "$work/log.$i" 2>&1 &
  else
    "$shamn" --threads 1 train --resume "$work/run" "${sets[@]}" > "$work/log.$i" 2>&1 &
  fi
  pid=$!
  # Wait for a first checkpoint, then kill at a random moment.
  for _ in $(seq 1 300); do
    ls "$work"/run/ckpt_*.h5 > /dev/null 2>&1 && break
    sleep 0.05
  done
  sleep "0.$((RANDOM % 9 + 1))"
  kill -9 "$pid" 2> /dev/null || true
  wait "$pid" 2> /dev/null || true
  kills=$i
  if ls "$work"/run/.*.tmp.* > /dev/null 2>&1; then killed_mid_write=$((killed_mid_write + 1)); fi
  for f in "$work"/run/ckpt_*.h5; do
    "$shamn" info "$f" > /dev/null || { echo "FAIL: $f does not load after kill $i"; cat "$work/log.$i"; exit 1; }
  done
  # Enough kills, and enough of them mid-write (about a third land there).
  [ "$i" -ge 6 ] && [ "$killed_mid_write" -ge 3 ] && break
done
echo "killed $kills times, $killed_mid_write of them while a checkpoint was being written"
[ "$killed_mid_write" -ge 3 ] || { echo "FAIL: too few kills landed during a checkpoint write"; exit 1; }
# The run resumes from what is left and finishes.
last=$(ls "$work"/run/ckpt_*.h5 | sort | tail -1)
step=$(( 10#$(basename "$last" .h5 | sed 's/ckpt_//') ))
"$shamn" --threads 1 train --resume "$work/run" "${sets[@]}" --set "train.max_steps=$((step + 2))" \
  > "$work/log.final" 2>&1 || { echo "FAIL: final resume"; cat "$work/log.final"; exit 1; }
grep -q "resuming" "$work/log.final"
ls "$work"/run/.*.tmp.* > /dev/null 2>&1 && { echo "FAIL: temporary files left behind"; exit 1; }
"$shamn" info "$work/run/ckpt_$(printf %08d $((step + 2))).h5" > /dev/null
echo "OK"
rm -rf "$work"
