#!/usr/bin/env bash
# train.precision = "bf16" against "f32" (shamn train) and PyTorch's bf16
# autocast against its f32 (the reference), on one config at batch B x seq T,
# interleaved round by round in this one script so all four see the same
# machine. shamn's figure is the median tokens/s of steps 2..N of each run's
# metrics.jsonl; the reference prints its own median (after one warm-up step).
# Usage: [B=8 T=512] experiments/bf16_bench.sh [CONFIG] [STEPS] [THREADS] [ROUNDS]
# (repo root, after building into ./build; the reference needs python3-torch).
set -euo pipefail
config=${1:-configs/default.toml}
steps=${2:-8}
threads=${3:-2}
rounds=${4:-3}
B=${B:-8}
T=${T:-512}
shamn=${SHAMN:-./build/shamn}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
vocab=$(sed -n 's/^vocab_size *= *\([0-9]*\).*/\1/p' "$config" | head -1)
"$shamn" synthetic --out "$work/data" --vocab "$vocab" --successors 64 --tokens 2000000 > /dev/null
echo "config $config, batch $B x seq $T, $steps steps, $threads threads, $rounds rounds"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$rounds"); do
  for p in f32 bf16; do
    "$shamn" --threads "$threads" train "$config" \
      --set "data.train_path=\"$work/data/train.bin\"" --set 'data.val_path=""' \
      --set train.batch_size=$B --set train.seq_len=$T --set train.grad_accum=1 \
      --set "train.max_steps=$steps" --set "train.precision=\"$p\"" \
      --set optim.warmup_steps=0 --set train.checkpoint_every=0 --set "train.out_dir=\"$work/run$r$p\"" \
      --set 'log.progress="never"' > /dev/null
    /usr/bin/python3 - "$work/run$r$p/metrics.jsonl" "$p" "$r" <<'PY'
import json, statistics, sys
rates = [json.loads(l)["tokens_per_s"] for l in open(sys.argv[1]) if '"loss"' in l][1:]
print(json.dumps({"impl": "shamn", "precision": sys.argv[2], "round": int(sys.argv[3]),
                  "tokens_per_s": round(statistics.median(rates), 1)}))
PY
  done
  for p in none bf16; do
    /usr/bin/python3 experiments/reference/shamn_ref.py bench --config "$config" --batch $B --seq $T \
      --threads "$threads" --steps 5 --warmup 1 --autocast "$p" |
      /usr/bin/python3 -c "import json,sys; r=json.loads(sys.stdin.read()); print(json.dumps({'impl': 'pytorch', 'precision': 'f32' if '$p' == 'none' else 'bf16', 'round': $r, 'tokens_per_s': round(r['tokens_per_s'], 1)}))"
  done
done | tee "$work/rows"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 - "$work/rows" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
def rate(impl, p, r):
    return next(x["tokens_per_s"] for x in rows if (x["impl"], x["precision"], x["round"]) == (impl, p, r))
rounds = sorted({x["round"] for x in rows})
for impl in ("shamn", "pytorch"):
    f = statistics.median(rate(impl, "f32", r) for r in rounds)
    b = statistics.median(rate(impl, "bf16", r) for r in rounds)
    ratios = [rate(impl, "bf16", r) / rate(impl, "f32", r) for r in rounds]
    print(f"{impl}: f32 {f:.0f} tok/s, bf16 {b:.0f} tok/s (medians); bf16/f32 per round "
          + " ".join(f"{x:.3f}" for x in ratios) + f", median {statistics.median(ratios):.3f}")
for p in ("f32", "bf16"):
    print(f"shamn / PyTorch, both {p}: median over rounds "
          f"{statistics.median(rate('shamn', p, r) / rate('pytorch', p, r) for r in rounds):.2f}x")
PY
