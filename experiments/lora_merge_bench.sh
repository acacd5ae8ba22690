#!/usr/bin/env bash
# A merged model (`export ADAPTER.h5 --base BASE.h5 --merge`) against its base
# alone and the base with the adapter beside it: `shamn bench` on 1 thread,
# the three variants interleaved round by round. One JSON line per run on
# stdout, with the variant and round added; at the end, on stderr, the medians
# of the per-round ratios against the base (lora.md's table).
# Usage: lora_merge_bench.sh SHAMN BASE.shq ADAPTER.lora MERGED.shq [ROUNDS]
set -euo pipefail
shamn=$1 base=$2 adapter=$3 merged=$4 rounds=${5:-5}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for r in $(seq 1 "$rounds"); do
  for v in base adapter merged; do
    case $v in
      base) args=("$base") ;;
      adapter) args=("$base" --adapter "$adapter") ;;
      merged) args=("$merged") ;;
    esac
    "$shamn" --threads 1 bench "${args[@]}" --prompt-tokens 512 --decode-tokens 128 --repeats 5 --json |
      python3 -c 'import json,sys; d=json.load(sys.stdin); d["variant"]=sys.argv[1]; d["round"]=int(sys.argv[2]); print(json.dumps(d))' "$v" "$r" |
      tee -a "$log"
  done
done
python3 - "$log" >&2 << 'EOF'
import json, statistics, sys
runs = {(d["variant"], d["round"]): d for d in map(json.loads, open(sys.argv[1]))}
rounds = sorted({r for _, r in runs})
for variant in ("adapter", "merged"):
    for key in ("prefill_tok_s", "decode_tok_s"):
        ratios = [runs[(variant, r)][key] / runs[("base", r)][key] for r in rounds]
        print(f"{variant} / base, {key}: median {statistics.median(ratios):.3f} "
              f"(range {min(ratios):.3f}-{max(ratios):.3f}, {len(ratios)} rounds)")
EOF
