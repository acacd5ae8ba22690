#!/usr/bin/env bash
# A merged model (`export ADAPTER.h5 --base BASE.h5 --merge`) against its base
# alone and the base with the adapter beside it: `shamn bench` on 1 thread,
# the three variants interleaved round by round. One JSON line per run, with
# the variant and round added; summarise with the python below.
# Usage: lora_merge_bench.sh SHAMN BASE.shq ADAPTER.lora MERGED.shq [ROUNDS]
set -euo pipefail
shamn=$1 base=$2 adapter=$3 merged=$4 rounds=${5:-5}
for r in $(seq 1 "$rounds"); do
  for v in base adapter merged; do
    case $v in
      base) args=("$base") ;;
      adapter) args=("$base" --adapter "$adapter") ;;
      merged) args=("$merged") ;;
    esac
    "$shamn" --threads 1 bench "${args[@]}" --prompt-tokens 512 --decode-tokens 128 --repeats 5 --json |
      python3 -c 'import json,sys; d=json.load(sys.stdin); d["variant"]=sys.argv[1]; d["round"]=int(sys.argv[2]); print(json.dumps(d))' "$v" "$r"
  done
done
