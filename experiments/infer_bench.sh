#!/usr/bin/env bash
# Decode and prefill speed of one checkpoint as f32, int8 and int4 model files
# and through the autograd forward, at each thread count; one JSON line per run
# (shamn bench --json: medians of --repeats).
# Usage: [SHAMN=./build/shamn] [REPEATS=5] infer_bench.sh CHECKPOINT.h5 OUT_DIR THREADS...
set -euo pipefail
shamn=${SHAMN:-./build/shamn} repeats=${REPEATS:-5}
ckpt=$1 out=$2
shift 2
mkdir -p "$out"
for q in f32 int8 int4; do
  [ -f "$out/$q.shq" ] || "$shamn" export "$ckpt" --quant $q --no-tokenizer -o "$out/$q.shq" > /dev/null
done
for t in "$@"; do
  for q in f32 int8 int4; do
    "$shamn" --threads "$t" bench "$out/$q.shq" --repeats "$repeats" --json
  done
  "$shamn" --threads "$t" bench "$ckpt" --decode-tokens 32 --repeats 3 --json
done
