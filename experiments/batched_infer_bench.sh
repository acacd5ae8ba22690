#!/usr/bin/env bash
# Batched inference against a baseline binary, in one script so both see the
# same machine load: per round, each binary runs
#   bench --prompt-tokens P (1 and 2 threads): prefill and batch-1 decode tok/s,
#   eval on the token file (1 and 2 threads): tokens/s,
# and the new binary alone runs bench --streams B for B = 1, 4, 16, 64.
# One JSON line per run, tagged with its binary, round and thread count; the
# medians and ratios are computed from these lines (experiments/inference.md).
# Usage: [PROMPT=512] [REPEATS=3] batched_infer_bench.sh NEW_SHAMN BASE_SHAMN MODEL.shq TOKENS.bin FORMAT ROUNDS [WINDOWS]
set -euo pipefail
new=$1 base=$2 model=$3 tokens=$4 format=$5 rounds=$6 windows=${7:-8}
prompt=${PROMPT:-512}
repeats=${REPEATS:-3}  # bench repeats per run, the median reported
run() {  # tag bin threads args...
  local tag=$1 bin=$2 t=$3
  shift 3
  local line
  line=$("$bin" --threads "$t" "$@")
  echo "{\"bin\":\"$tag\",\"round\":$r,\"threads\":$t,\"run\":$line}"
}
for r in $(seq 1 "$rounds"); do
  for t in 1 2; do
    for tag in base new; do
      bin=$base
      [ $tag = new ] && bin=$new
      run $tag "$bin" $t bench "$model" --prompt-tokens "$prompt" --decode-tokens 128 --repeats "$repeats" --json
      run $tag "$bin" $t eval "$model" --data "$tokens" --format "$format" --max-windows "$windows"
    done
  done
  for b in 1 4 16 64; do
    run new "$new" 1 bench "$model" --prompt-tokens 16 --decode-tokens 32 --repeats 3 --streams $b --json
  done
done
