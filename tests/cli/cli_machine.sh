#!/usr/bin/env bash
# `shamn machine` and the roofline of `--profile`: the JSON is well formed with
# positive figures (no timing thresholds), `--profile --machine FILE` prints the
# roofline table and the step against the sum of bounds, eval of a .shq model
# has no roofline to measure for, and a bad file is refused naming it.
# Usage: cli_machine.sh SHAMN_BINARY CONFIG WORKDIR
set -euo pipefail
shamn=$1 config=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
"$shamn" --threads 2 machine --json --repeats 1 --probe-ms 2 > "$work/machine.json"
"$shamn" machine --repeats 1 --probe-ms 2 > "$work/machine.txt"
grep -q "f32 FMA" "$work/machine.txt"
/usr/bin/python3 - "$work/machine.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
assert m["threads"] == 2 and m["kernel"] in ("scalar", "avx2", "avx512"), m
for key in ("l2_bytes_per_core", "l3_bytes", "l3_reported_bytes"):
    assert m["cache"][key] > 0, m
assert m["cache"]["l3_bytes"] <= m["cache"]["l3_reported_bytes"], m
levels = ("l2", "l3", "dram")
for rate in [m["f32_fma_gflops"]] + [m[k][level] for k in ("read_gbs", "update_gbs") for level in levels]:
    assert rate["one_core"] > 0 and rate["all_cores"] > 0, m
assert m["bf16_dot_gflops"] == "not available" or m["bf16_dot_gflops"]["one_core"] > 0, m
PY

"$shamn" synthetic --out "$work/data" --vocab 64 --successors 4 --tokens 20000 > /dev/null
"$shamn" --threads 2 train "$config" --set "data.train_path=\"$work/data/train.bin\"" \
  --set "data.val_path=\"$work/data/val.bin\"" --set "train.out_dir=\"$work/run\"" --set train.max_steps=3 --set optim.warmup_steps=1 \
  --profile --machine "$work/machine.json" > "$work/train.txt"
grep -q "^roofline: peak .* GFLOP/s f32; .* GB/s from L2 / L3 / DRAM" "$work/train.txt"
grep -q "^name  *category  *total ms  *GFLOP  *MB  *in  *bound ms  *x bound  *% step$" "$work/train.txt"
grep -q "^hash_head_cross_entropy  *backward " "$work/train.txt"
grep -q "^step: .* ms against a sum of bounds of .* ms: .*x the roofline$" "$work/train.txt"

# A .shq model's kernels count no work: eval prints the table without a roofline
# and measures no limits for one (a checkpoint's eval does both).
"$shamn" export "$work/run/ckpt_00000003.h5" --quant int8 --no-tokenizer --out "$work/run/model.shq" > /dev/null
for model in model.shq ckpt_00000003.h5; do
  "$shamn" --threads 1 eval "$work/run/$model" --data "$work/data/val.bin" --seq-len 16 --max-windows 4 \
    --profile --profile-trace "$work/eval-trace.json" > "$work/eval.json" 2> "$work/eval.err"
  grep -q "^name  *category  *calls  *total ms" "$work/eval.err" || { cat "$work/eval.err"; exit 1; }
  if [ $model = model.shq ]; then
    ! grep -q "^roofline" "$work/eval.err" || { cat "$work/eval.err"; exit 1; }
  else
    grep -q "^roofline: measuring" "$work/eval.err" || { cat "$work/eval.err"; exit 1; }
  fi
done

status=0
echo '{"kernel": "avx2"}' > "$work/bad.json"
"$shamn" train "$config" --set "data.train_path=\"$work/data/train.bin\"" \
  --set "data.val_path=\"$work/data/val.bin\"" --set "train.out_dir=\"$work/bad\"" --set train.max_steps=1 --set optim.warmup_steps=1 \
  --profile --machine "$work/bad.json" > /dev/null 2> "$work/bad.err" || status=$?
[ "$status" -eq 1 ]
grep -qF "$work/bad.json: missing \"threads\"" "$work/bad.err"
echo "cli_machine: ok"
