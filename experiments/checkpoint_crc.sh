#!/usr/bin/env bash
# Bitwise before/after check for refactors: a few training steps of tiny and small
# on a synthetic corpus, then every tensor's CRC-32 of the last checkpoint.
#   experiments/checkpoint_crc.sh SHAMN OUT_DIR          # writes OUT_DIR/{tiny,small}.crc
#   SET='train.precision="bf16"' experiments/checkpoint_crc.sh ...   # one more --set for both runs
#   experiments/checkpoint_crc.sh --compare DIR_A DIR_B  # equal tensors and metrics?
# Run it with the binary before and after a change, then compare the two directories.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
strip() { grep -v "^checkpoint\|out_dir\|train time" "$1"; }
# Metrics equal apart from timing fields; values compared at 9 significant digits,
# the precision metrics.jsonl had before it was written with nlohmann-json.
same_metrics() {
  /usr/bin/python3 - "$1" "$2" << 'PY'
import json, sys
def load(path):
    rows = []
    for line in open(path):
        r = json.loads(line)
        rows.append({k: (None if v is None else float(f"{v:.9g}")) for k, v in r.items()
                     if k not in ("tokens_per_s", "elapsed_s")})
    return rows
sys.exit(0 if load(sys.argv[1]) == load(sys.argv[2]) else 1)
PY
}
if [ "${1:-}" = --compare ]; then
  status=0
  for cfg in tiny small; do
    if diff <(strip "$2/$cfg.crc") <(strip "$3/$cfg.crc") > /dev/null &&
       same_metrics "$2/$cfg/metrics.jsonl" "$3/$cfg/metrics.jsonl"; then
      echo "$cfg: every tensor's CRC-32 ($(grep -cE ' (f32|i32)\[' "$3/$cfg.crc") tensors) and the metrics are identical"
    else
      echo "$cfg: DIFFERS"; status=1
    fi
  done
  exit $status
fi
shamn=$1 out=$2
extra=()
[ -z "${SET:-}" ] || extra=(--set "$SET")
synth=${SYNTH_DIR:-/tmp/shamn_crc_synth}
rm -rf "$out"; mkdir -p "$out"
[ -f "$synth/train.bin" ] || "$shamn" synthetic --out "$synth" --vocab 8192 --successors 4 --tokens 400000 > /dev/null
for cfg in tiny small; do
  "$shamn" --threads 2 train "$repo/configs/$cfg.toml" --set data.train_path="\"$synth/train.bin\"" \
    --set data.val_path="\"$synth/val.bin\"" --set train.max_steps=3 --set train.eval_every=3 \
    --set optim.warmup_steps=1 --set train.batch_size=4 --set train.seq_len=64 \
    --set train.out_dir="\"$out/$cfg\"" "${extra[@]}" > "$out/$cfg.log"
  "$shamn" info "$(ls "$out/$cfg"/ckpt_*.h5 | tail -1)" --tensors > "$out/$cfg.crc"
done
echo "$out/tiny.crc, $out/small.crc"
