#!/usr/bin/env bash
# Cross-checks shamn against the independent PyTorch reference on one config:
# the same checkpoint and batch must give the same loss (1e-4 relative) and the
# same gradients (1e-3 relative, per tensor; see experiments/reference/README.md),
# on init's weights after 2 steps of training (no bias 0, no gain 1).
# With LORA_RANK > 0, then the same for LoRA: adapters of that rank on every kind
# of layer, trained 2 steps from the checkpoint by shamn train (so B is not
# zero), and the adapted model's loss and the adapters' gradients compared;
# twice, scaled by alpha / rank and by rsLoRA's alpha / sqrt(rank); then once
# more under LoRA dropout with the masks of one training pass.
# Usage: crosscheck.sh SHAMN_BINARY CONFIG.toml WORKDIR [BATCH SEQ [LORA_RANK]]
# Exits 77 (CTest: skipped) when Debian's python3-torch is not installed.
set -euo pipefail
shamn=$1 config=$2 work=$3 batch=${4:-4} seq=${5:-64} lora_rank=${6:-0}
here=$(cd "$(dirname "$0")/../.." && pwd)
py=/usr/bin/python3
ref="$here/experiments/reference"
if ! "$py" -c "import torch, h5py" 2>/dev/null; then
  echo "SKIP: /usr/bin/python3 cannot import torch and h5py (apt-get install python3-torch python3-h5py)"
  exit 77
fi
mkdir -p "$work"
vocab=$("$py" -c "import tomllib,sys; print(tomllib.load(open(sys.argv[1],'rb'))['model']['vocab_size'])" "$config")
"$shamn" init "$config" -o "$work/init.h5" --seed 11
"$py" "$ref/shamn_ref.py" make-tokens --vocab "$vocab" --count 20000 --seed 6 -o "$work/train.bin"
# A training config: the model's, 2 steps at a high rate on train.bin from
# checkpoint $1 into $2, then the TOML on stdin.
train_toml() {
  cat "$config"
  cat <<EOF
[data]
train_path = "$work/train.bin"
[train]
batch_size = 4
seq_len = 32
max_steps = 2
out_dir = "$2"
init_from = "$1"
[optim]
lr = 1e-2
[log]
progress = "never"
EOF
  cat
}
# The model compared is init's after 2 steps of full training: at init every
# bias is 0 and every gain 1, where a bias or gain left out of the forward
# pass would change nothing.
rm -rf "$work/base_run"
train_toml "$work/init.h5" "$work/base_run" < /dev/null > "$work/base.toml"
"$shamn" train "$work/base.toml" > "$work/base_train.log"
cp "$work/base_run/ckpt_00000002.h5" "$work/model.h5"
"$py" - "$work/model.h5" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f:
    names = []
    f.visit(names.append)
    params = {n: np.asarray(f[n]) for n in names if isinstance(f[n], h5py.Dataset)}
biases = [v for n, v in params.items() if n.startswith("model/") and n.endswith("/bias")]
gains = [v for n, v in params.items() if n.startswith("model/") and n.endswith("/gain")]
assert biases and all(np.abs(v).max() > 0 for v in biases), "a bias is still all zero after training"
assert gains and all(np.abs(v - 1).max() > 0 for v in gains), "a gain is still all one after training"
print(f"model: {len(biases)} biases, none all zero; {len(gains)} gains, none all one")
PY
"$py" "$ref/shamn_ref.py" make-tokens --vocab "$vocab" --count $((batch * seq + 1)) --seed 5 -o "$work/tokens.bin"
ours=$("$shamn" loss "$work/model.h5" --data "$work/tokens.bin" --batch "$batch" --seq "$seq" --grads "$work/grads_shamn.h5")
theirs=$("$py" "$ref/shamn_ref.py" loss "$work/model.h5" --data "$work/tokens.bin" --batch "$batch" --seq "$seq" --grads "$work/grads_ref.h5")
echo "shamn:     $ours"
echo "reference: $theirs"
same_loss() {
  "$py" - "$1" "$2" <<'PY'
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
bad = False
for key in ("loss", "ce", "aux"):
    rel = abs(a[key] - b[key]) / max(abs(b[key]), 1e-12)
    print(f"{key}: shamn {a[key]:.9g} reference {b[key]:.9g} relative error {rel:.3e}")
    bad |= rel > 1e-4
sys.exit(1 if bad else 0)
PY
}
same_loss "$ours" "$theirs"
"$py" "$ref/compare.py" "$work/grads_shamn.h5" "$work/grads_ref.h5" --rtol 1e-3
(( lora_rank > 0 )) || exit 0

# Twice: alpha / rank, and rsLoRA's alpha / sqrt(rank) (the reference reads lora_rslora).
for rslora in false true; do
  echo "# LoRA, rank $lora_rank, rslora $rslora"
  run="$work/lora_run_$rslora"
  rm -rf "$run"
  train_toml "$work/model.h5" "$run" > "$work/lora.toml" <<EOF
[lora]
rank = $lora_rank
alpha = $((2 * lora_rank)).0
rslora = $rslora
targets = ["layers.*.mixer.out", "layers.*.memory.query", "layers.*.moe.router_group",
           "layers.*.moe.router_expert", "layers.*.moe.experts.*.up", "layers.*.moe.experts.*.down"]
EOF
  "$shamn" train "$work/lora.toml" > "$work/lora_train.log"
  adapter="$run/ckpt_00000002.h5"
  ours=$("$shamn" loss "$work/model.h5" --adapter "$adapter" --data "$work/tokens.bin" --batch "$batch" --seq "$seq" --grads "$work/lora_grads_shamn.h5")
  theirs=$("$py" "$ref/shamn_ref.py" loss "$work/model.h5" --adapter "$adapter" --data "$work/tokens.bin" --batch "$batch" --seq "$seq" --grads "$work/lora_grads_ref.h5")
  echo "shamn:     $ours"
  echo "reference: $theirs"
  same_loss "$ours" "$theirs"
  "$py" "$ref/compare.py" "$work/lora_grads_shamn.h5" "$work/lora_grads_ref.h5" --rtol 1e-3
done

# LoRA dropout (lora.dropout): the loss and gradients of one training pass's
# masks (run seed 3, pass 5), drawn by each side from the masks' definition;
# the dropped loss must differ from the undropped one, or no mask was applied.
echo "# LoRA dropout 0.25, seed 3, pass 5"
adapter="$work/lora_run_false/ckpt_00000002.h5"
plain=$("$shamn" loss "$work/model.h5" --adapter "$adapter" --data "$work/tokens.bin" --batch "$batch" --seq "$seq")
drop=(--lora-dropout 0.25 --seed 3 --pass 5)
ours=$("$shamn" loss "$work/model.h5" --adapter "$adapter" --data "$work/tokens.bin" --batch "$batch" --seq "$seq" "${drop[@]}" --grads "$work/lora_dropout_grads_shamn.h5")
theirs=$("$py" "$ref/shamn_ref.py" loss "$work/model.h5" --adapter "$adapter" --data "$work/tokens.bin" --batch "$batch" --seq "$seq" "${drop[@]}" --grads "$work/lora_dropout_grads_ref.h5")
echo "shamn, no dropout: $plain"
echo "shamn:     $ours"
echo "reference: $theirs"
if [ "$plain" = "$ours" ]; then
  echo "FAIL: --lora-dropout 0.25 left the loss as it was"
  exit 1
fi
same_loss "$ours" "$theirs"
"$py" "$ref/compare.py" "$work/lora_dropout_grads_shamn.h5" "$work/lora_dropout_grads_ref.h5" --rtol 1e-3
