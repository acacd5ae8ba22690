#!/usr/bin/env bash
# Quality cost of PyTorch's CPU bf16 autocast on the same model and data as
# experiments/bf16_quality.sh (configs/small.toml on the README's Brown files,
# the same steps, batch, schedule and evaluation), trained by the independent
# reference (experiments/reference/shamn_ref.py train). Each job is SEED/PREC
# (PREC: f32 or bf16) and writes OUT_DIR/seedSEED-PREC.jsonl; jobs that are
# done are skipped. With no jobs, prints the table of what OUT_DIR holds.
# Usage: [STEPS=1000] [THREADS=1] experiments/bf16_quality_pytorch.sh DATA_DIR OUT_DIR [SEED/PREC ...]
# e.g. two lanes on two cores:
#   experiments/bf16_quality_pytorch.sh data/brown runs/bf16p 1/f32 2/bf16 3/f32 &
#   experiments/bf16_quality_pytorch.sh data/brown runs/bf16p 1/bf16 2/f32 3/bf16; wait
#   experiments/bf16_quality_pytorch.sh data/brown runs/bf16p
set -euo pipefail
data=$1
out=$2
shift 2
steps=${STEPS:-1000}
threads=${THREADS:-1}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
for job in "$@"; do
  seed=${job%/*} prec=${job#*/}
  case $prec in
    f32) autocast=none ;;
    bf16) autocast=bf16 ;;
    *) echo "bf16_quality_pytorch: job '$job': the precision must be f32 or bf16" >&2; exit 1 ;;
  esac
  rows="$out/seed$seed-$prec.jsonl"
  [ -s "$rows" ] && grep -q "\"step\": $steps," "$rows" && continue
  /usr/bin/python3 "$here/reference/shamn_ref.py" train "$here/../configs/small.toml" \
    --train "$data/train.bin" --val "$data/val.bin" --steps "$steps" --warmup $((steps / 10)) \
    --eval-every $((steps / 4)) --seed "$seed" --autocast "$autocast" --threads "$threads" > "$rows.tmp"
  mv "$rows.tmp" "$rows"
done
[ $# -gt 0 ] && exit 0
/usr/bin/python3 - "$out" <<'PY'
import glob, json, os, re, statistics, sys
last = {}
for path in glob.glob(os.path.join(sys.argv[1], "seed*-*.jsonl")):
    seed, prec = re.match(r"seed(\d+)-(\w+)\.jsonl", os.path.basename(path)).groups()
    last[int(seed), prec] = [json.loads(l) for l in open(path)][-1]
seeds = sorted({s for s, _ in last})
print("| seed | f32 val ppl | bf16 val ppl | bf16 against f32 | f32 tok/s | bf16 tok/s |")
print("| ---: | ---: | ---: | ---: | ---: | ---: |")
for s in seeds:
    f, b = last.get((s, "f32")), last.get((s, "bf16"))
    if f and b:
        print(f"| {s} | {f['val_ppl']:.2f} | {b['val_ppl']:.2f} | {100 * (b['val_ppl'] / f['val_ppl'] - 1):+.2f}% "
              f"| {f['tokens_per_s']:,.0f} | {b['tokens_per_s']:,.0f} |")
both = [s for s in seeds if (s, "f32") in last and (s, "bf16") in last]
if len(both) > 1:
    f = [last[s, "f32"]["val_ppl"] for s in both]
    b = [last[s, "bf16"]["val_ppl"] for s in both]
    print(f"| mean (sd) | {statistics.mean(f):.2f} ({statistics.stdev(f):.2f}) | {statistics.mean(b):.2f} "
          f"({statistics.stdev(b):.2f}) | {100 * (statistics.mean(b) / statistics.mean(f) - 1):+.2f}% | | |")
PY
