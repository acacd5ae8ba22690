#!/usr/bin/env bash
# Cross-checks shamn against the independent PyTorch reference on one config:
# the same checkpoint and batch must give the same loss (1e-4 relative) and the
# same gradients (1e-3 relative, per tensor; see experiments/reference/README.md).
# Usage: crosscheck.sh SHAMN_BINARY CONFIG.toml WORKDIR [BATCH SEQ]
# Exits 77 (CTest: skipped) when Debian's python3-torch is not installed.
set -euo pipefail
shamn=$1 config=$2 work=$3 batch=${4:-4} seq=${5:-64}
here=$(cd "$(dirname "$0")/../.." && pwd)
py=/usr/bin/python3
ref="$here/experiments/reference"
if ! "$py" -c "import torch, h5py" 2>/dev/null; then
  echo "SKIP: /usr/bin/python3 cannot import torch and h5py (apt-get install python3-torch python3-h5py)"
  exit 77
fi
mkdir -p "$work"
vocab=$("$py" -c "import tomllib,sys; print(tomllib.load(open(sys.argv[1],'rb'))['model']['vocab_size'])" "$config")
"$shamn" init "$config" -o "$work/model.h5" --seed 11
"$py" "$ref/shamn_ref.py" make-tokens --vocab "$vocab" --count $((batch * seq + 1)) --seed 5 -o "$work/tokens.bin"
ours=$("$shamn" loss "$work/model.h5" --data "$work/tokens.bin" --batch "$batch" --seq "$seq" --grads "$work/grads_shamn.h5")
theirs=$("$py" "$ref/shamn_ref.py" loss "$work/model.h5" --data "$work/tokens.bin" --batch "$batch" --seq "$seq" --grads "$work/grads_ref.h5")
echo "shamn:     $ours"
echo "reference: $theirs"
"$py" - "$ours" "$theirs" <<'PY'
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
bad = False
for key in ("loss", "ce", "aux"):
    rel = abs(a[key] - b[key]) / max(abs(b[key]), 1e-12)
    print(f"{key}: shamn {a[key]:.9g} reference {b[key]:.9g} relative error {rel:.3e}")
    bad |= rel > 1e-4
sys.exit(1 if bad else 0)
PY
"$py" "$ref/compare.py" "$work/grads_shamn.h5" "$work/grads_ref.h5" --rtol 1e-3
