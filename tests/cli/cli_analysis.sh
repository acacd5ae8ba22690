#!/usr/bin/env bash
# info, generate, plot and analyze end to end on both file kinds: info describes
# a model file and a LoRA adapter file; generate from a checkpoint gives the
# greedy text of its f32 export; plot writes valid PNG and SVG files for one
# run, two runs and a sweep directory; training refreshes RUN_DIR/plots/loss.svg
# and, without gnuplot, says so once and trains on; analyze reports JSON for a
# checkpoint and for its f32 export (the same routing) and its int8 one, and
# with --plots draws valid PNG and SVG distributions.
# Usage: cli_analysis.sh SHAMN_BINARY WORKDIR
set -euo pipefail
shamn=$(realpath "$1") work=$2
rm -rf "$work" && mkdir -p "$work" && cd "$work"
fail() { echo "FAIL: $*"; exit 1; }
is_png() { [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] || fail "$1 is not a PNG"; }
# An SVG document: an XML root element <svg (after the prolog), closed at the end.
# refused 'WORDS' ARGS...: shamn exits non-zero and its stderr holds WORDS.
refused() {
  local words=$1
  shift
  if "$shamn" "$@" 2> err.txt; then fail "accepted: $*"; fi
  grep -qF -- "$words" err.txt || fail "$*: expected '$words', got: $(cat err.txt)"
}
is_svg() { grep -q '^<svg' "$1" && tail -n 3 "$1" | grep -q '</svg>' || fail "$1 is not an SVG document"; }

for i in $(seq 1 300); do printf 'Paragraph %d: the jury said %d times that the city was fine.\n\n' "$i" $((i * 37)); done > text.txt
"$shamn" tokenizer train --input text.txt --vocab 300 -o tok.bpe > /dev/null
"$shamn" prepare --input text.txt --tokenizer tok.bpe --out data > /dev/null
cat > run.toml <<'TOML'
[model]
vocab_size = 300
dim = 32
n_layers = 2
[model.embed]
buckets = 64
[model.sparse]
block = 8
[model.memory]
size = 64
topk = 4
key_dim = 16
[model.moe]
groups = 2
experts_per_group = 2
hidden = 32
[data]
train_path = "data/train.bin"
val_path = "data/val.bin"
tokenizer = "tok.bpe"
[train]
batch_size = 2
seq_len = 16
max_steps = 12
eval_every = 4
eval_batches = 1
out_dir = "run_a"
[optim]
lr = 3e-3
warmup_steps = 2
[log]
progress = "never"
TOML

# Training draws RUN_DIR/plots/loss.svg at each evaluation.
"$shamn" --threads 1 train run.toml > train_a.txt
is_svg run_a/plots/loss.svg
! grep -q "gnuplot" train_a.txt || fail "a note about gnuplot with gnuplot installed"
# Without gnuplot on PATH: one note, the run completes, no picture.
PATH=/nonexistent "$shamn" --threads 1 train run.toml --set 'train.out_dir="run_b"' --set train.seed=2 > train_b.txt
[ "$(grep -c "gnuplot is not installed" train_b.txt)" = 1 ] || fail "the missing-gnuplot note is not said exactly once"
[ -f run_b/best.h5 ] && [ ! -e run_b/plots/loss.svg ] || fail "run_b: best.h5 missing or a picture without gnuplot"

# plot: one run, two runs, a sweep (points with run/ and result.json), every metric.
# One command a line: set -e does not stop at a failed command that an && follows.
"$shamn" plot run_a -o one.png > /dev/null
is_png one.png
"$shamn" plot run_a -o one.svg --x tokens > /dev/null
is_svg one.svg
"$shamn" plot run_a run_b -o two.png --metrics loss,val_loss,lr,grad_norm,tokens_per_s > /dev/null
is_png two.png
"$shamn" plot run_a run_b -o two.svg --x time > /dev/null
is_svg two.svg
mkdir -p sweep/p1 sweep/p2
cp -r run_a sweep/p1/run
cp -r run_b sweep/p2/run
touch sweep/p1/result.json sweep/p2/result.json
"$shamn" plot sweep -o sweep.png > sweep.txt
is_png sweep.png
grep -q "wrote sweep.png (2 runs)" sweep.txt || fail "the sweep plot did not find both points: $(cat sweep.txt)"
"$shamn" plot sweep -o sweep.svg > /dev/null
is_svg sweep.svg
grep -q ">p1<\|'p1'\|p1 train" sweep.svg || fail "the sweep plot is not labelled by point"
# Refused: an unknown metric, a picture of another type, a directory with no run.
refused "unknown 'perplexity'" plot run_a -o x.png --metrics loss,perplexity
refused "png or an .svg" plot run_a -o x.pdf
mkdir -p norun && refused "norun' holds no run" plot norun -o x.png
[ ! -e x.png ] && [ ! -e x.pdf ] || fail "a refused plot wrote a file"
# The error names the user's path, not a temporary one; a directory or a FIFO
# is not replaced, and no temporary file is left beside it.
refused "-o x.pdf: the picture" plot run_a -o x.pdf
mkdir dir.png && refused "'dir.png': it is a directory" plot run_a -o dir.png
mkfifo fifo.png && refused "'fifo.png': it is a FIFO" plot run_a -o fifo.png
[ -d dir.png ] && [ -p fifo.png ] || fail "a refused plot replaced its target"
! ls -A | grep -q 'tmp' || fail "a refused plot left a temporary file: $(ls -A | grep tmp)"
# A run killed mid-write leaves its last line cut short: plotted without it.
mkdir cut && cp run_a/config.toml cut/ && head -c -20 run_a/metrics.jsonl > cut/metrics.jsonl
"$shamn" plot cut -o cut.png > /dev/null
is_png cut.png

# A picture gnuplot cannot write whole (a 4 KiB file size limit, SIGXFSZ ignored so
# the writes fail as on a full disk; gnuplot still exits 0): refused, naming the
# file, and the earlier picture stays as it was, with no temporary file.
for f in one.png one.svg; do
  cp "$f" "before_$f"
  status=0
  (ulimit -f 4; trap '' XFSZ; "$shamn" plot run_a run_b -o "$f" --metrics loss,val_loss,lr,grad_norm) \
    > /dev/null 2> err.txt || status=$?
  [ "$status" -ne 0 ] && grep -qF "plot $f: gnuplot could not write it whole" err.txt ||
    fail "a torn $f was accepted (status $status): $(cat err.txt)"
  cmp -s "$f" "before_$f" || fail "the earlier $f was replaced by a torn one"
  ! ls -A | grep -q 'tmp' || fail "a torn plot left a temporary file: $(ls -A | grep tmp)"
done
# What a plot killed mid-draw leaves (its picture, gnuplot script and log under
# private names with its pid) goes at the next plot of the same picture.
dead=$(sh -c 'echo $$')
touch ".one.png.tmp.$dead.png" ".one.png.tmp.$dead.gnuplot" ".one.png.tmp.$dead.log"
"$shamn" plot run_a -o one.png > /dev/null
! ls -A | grep -q 'tmp' || fail "a killed plot's files were left: $(ls -A | grep tmp)"

# info on a model file and a LoRA adapter file.
"$shamn" export run_a/best.h5 --quant f32 -o a_f32.shq > /dev/null
"$shamn" info a_f32.shq > info.txt
grep -q "^kind  *model file" info.txt && grep -q "^quant  *f32" info.txt && grep -q "^tokenizer  *300 tokens" info.txt ||
  fail "info on a model file: $(cat info.txt)"
grep -q "^tensors  *[0-9]" info.txt && grep -q "^source_id  *[0-9a-f]\{16\}$" info.txt || fail "info: tensors/source_id"
# info names each sparsity where model.moe.sparsity overrides the global one.
sed -e '/^block = 8$/a sparsity = 0.5' -e '/^hidden = 32$/a sparsity = 0.75' run.toml > over.toml
"$shamn" init over.toml -o over.h5 > /dev/null
"$shamn" export over.h5 --quant f32 --no-tokenizer -o over.shq > /dev/null
"$shamn" info over.shq > info_over.txt
grep -q "^model .*, sparsity mixer 0.5, experts 0.75 (block 8)$" info_over.txt || fail "info sparsity: $(cat info_over.txt)"
# Bad outputs and flags, refused before any work: a FIFO as -o, both --tokenizer
# and --no-tokenizer, a negative seed or thread count, a trace or gradient file
# in a directory that does not exist (nothing printed first); a full stdout.
mkfifo out.shq && refused "'out.shq': it is a FIFO" export run_a/best.h5 --quant f32 -o out.shq
refused "excludes" export run_a/best.h5 --tokenizer tok.bpe --no-tokenizer -o y.shq
refused "--seed: must be a whole number >= 0, got '-1'" generate a_f32.shq --prompt x --seed -1
refused "--threads: must be a whole number >= 0, got '-1'" --threads -1 info a_f32.shq
refused "--max-windows: must be a whole number >= 0" eval a_f32.shq --data data/val.bin --max-windows -5
refused "the directory 'nodir' does not exist" eval a_f32.shq --data data/val.bin --profile --profile-trace nodir/t.json
refused "the directory 'nodir' does not exist" loss run_a/best.h5 --data data/val.bin --grads nodir/g.h5
"$shamn" eval a_f32.shq --data data/val.bin --profile --profile-trace nodir/t.json > early.out 2> /dev/null || true
"$shamn" loss run_a/best.h5 --data data/val.bin --grads nodir/g.h5 >> early.out 2> /dev/null || true
[ ! -s early.out ] || fail "a refused output was found only after the work: $(cat early.out)"
if "$shamn" info a_f32.shq > /dev/full 2> err.txt; then fail "info > /dev/full exited 0"; fi
grep -q "writing standard output failed" err.txt || fail "info > /dev/full: $(cat err.txt)"
"$shamn" --threads 1 train run.toml --set 'train.out_dir="lora"' --set "train.init_from=\"run_a/best.h5\"" \
  --set train.max_steps=2 --set lora.rank=2 --set 'lora.targets=["layers.*.mixer.out"]' --set lora.dropout=0.1 > /dev/null
"$shamn" info lora/best.h5 > info_lora_ckpt.txt
grep -q "^lora  *rank 2, alpha 2, 2 layers, trained with dropout 0.1$" info_lora_ckpt.txt ||
  fail "info on an adapter checkpoint: $(cat info_lora_ckpt.txt)"
"$shamn" export lora/best.h5 --base run_a/best.h5 -o a.lora > /dev/null
"$shamn" info a.lora > info_lora.txt
grep -q "^kind  *LoRA adapter file" info_lora.txt && grep -q "^lora  *rank 2" info_lora.txt &&
  grep -q "^step  *2$" info_lora.txt || fail "info on an adapter: $(cat info_lora.txt)"
# The adapter's source_id is its base's.
base_id=$(grep ^source_id info.txt) && [ -n "$base_id" ] || fail "info prints no source_id: $(cat info.txt)"
[ "$base_id" = "$(grep ^source_id info_lora.txt)" ] || fail "adapter and base source_id differ"

# generate from a checkpoint: greedy text equal to its f32 export's. Each output is
# a variable of its own (a failure inside "$(...)" in a test would go unseen, and
# two empty outputs would compare equal).
gen() {  # runs in "$(...)": its failure message goes to stderr, its exit status to the assignment
  local text
  text=$("$shamn" --threads 1 generate "$@" --prompt "The jury said" --max-tokens 12 --temperature 0 \
    2> gen.err) || { cat gen.err >&2; echo "FAIL: generate $*: failed" >&2; exit 1; }
  [ -n "$text" ] || { echo "FAIL: generate $*: printed nothing" >&2; exit 1; }
  printf '%s' "$text"
}
text_f32=$(gen a_f32.shq)
text_ckpt=$(gen run_a/best.h5)
text_tok=$(gen run_a/best.h5 --tokenizer tok.bpe)
[ "$text_ckpt" = "$text_f32" ] || fail "generate: checkpoint and f32 export differ"
[ "$text_tok" = "$text_f32" ] || fail "generate --tokenizer"
refused "carries its own" generate a_f32.shq --prompt x --tokenizer tok.bpe
refused "export it first" generate run_a/best.h5 --prompt x --adapter a.lora
# export --merge: a dense-side adapter folded into its base gives the text of
# the base with the adapter beside it, and is a model of its own.
"$shamn" --threads 1 train run.toml --set 'train.out_dir="lora_dense"' --set "train.init_from=\"run_a/best.h5\"" \
  --set train.max_steps=2 --set optim.lr=0.05 --set lora.rank=2 --set lora.alpha=5.0 \
  --set 'lora.targets=["layers.*.moe.router_expert", "layers.*.memory.query"]' > /dev/null
"$shamn" export lora_dense/best.h5 --base run_a/best.h5 --quant f32 -o dense.lora > /dev/null
"$shamn" export lora_dense/best.h5 --base run_a/best.h5 --merge --quant f32 -o merged.shq > merge.txt
grep -q "^merged the LoRA adapters of lora_dense/best.h5 (rank 2" merge.txt || fail "export --merge: $(cat merge.txt)"
text_merged=$(gen merged.shq)
text_adapter=$(gen a_f32.shq --adapter dense.lora)
[ "$text_merged" = "$text_adapter" ] || fail "generate: merged and base + adapter differ"
loss() { "$shamn" --threads 1 eval "$@" --data data/val.bin --seq-len 32 | python3 -c 'import json,sys; print(json.load(sys.stdin)["loss"])'; }
python3 - "$(loss merged.shq)" "$(loss a_f32.shq --adapter dense.lora)" "$(loss a_f32.shq)" <<'PY' || fail "eval: merged against base + adapter"
import sys
merged, adapter, base = map(float, sys.argv[1:])
assert abs(merged - adapter) < 1e-6 and abs(adapter - base) > 1e-4, (merged, adapter, base)
PY
# eval's JSON names the adapter, and a path that is not UTF-8 (Linux allows
# it) is printed with U+FFFD, not an exception after the work.
cp data/val.bin "$(printf 'v\xe9.bin')"
"$shamn" --threads 1 eval a_f32.shq --adapter dense.lora --data "$(printf 'v\xe9.bin')" --seq-len 32 \
  --max-windows 1 > eval_adapter.json || fail "eval of a non-UTF-8 path"
python3 - eval_adapter.json <<'PY' || fail "eval --adapter JSON: $(cat eval_adapter.json)"
import json, sys
e = json.load(open(sys.argv[1], encoding="utf-8"))
assert e["adapter"] == "dense.lora" and e["data"] == "v\ufffd.bin", e
PY
"$shamn" info merged.shq > info_merged.txt
merged_id=$(grep ^source_id info_merged.txt) || fail "info prints no source_id for merged.shq"
[ "$base_id" != "$merged_id" ] || fail "merged model kept the base's source_id"
refused "trained on another base model" generate merged.shq --prompt x --adapter dense.lora
# bench with two adapters: each one's bytes a token beside the base's.
"$shamn" --threads 1 bench a_f32.shq --adapter dense.lora --adapter a.lora --streams 2 --prompt-tokens 4 \
  --decode-tokens 4 --repeats 1 --json > bench_lora.json
python3 - bench_lora.json <<'PY' || fail "bench --adapter: $(cat bench_lora.json)"
import json, sys
b = json.load(open(sys.argv[1]))
ads = b["adapters"]
assert [a["path"] for a in ads] == ["dense.lora", "a.lora"] and [a["rank"] for a in ads] == [2, 2], ads
assert all(0 < a["bytes_per_token"] < b["weight_bytes_per_token"] for a in ads), ads
PY

# analyze: JSON for a checkpoint, its f32 export (the same routing and slots) and int8 export.
"$shamn" --threads 1 analyze run_a/best.h5 --data data/val.bin --windows 2 --seq-len 16 --json > analyze.json
python3 - analyze.json <<'PY'
import json, math, sys
a = json.load(open(sys.argv[1]))
assert a["tokens"] == 32, a["tokens"]
assert len(a["moe"]) == 2 and len(a["memory"]) == 1, a
for m in a["moe"]:
    assert abs(sum(m["expert_share"]) - 1) < 1e-9 and 0 <= m["entropy"] <= m["max_entropy"] + 1e-12
    assert m["mean_gate_first"] >= m["mean_gate_second"]
assert 1 <= a["memory"][0]["slots_read"] <= 64
assert sum(t["targets"] for t in a["loss_by_frequency"]) == 32
assert a["embed"]["buckets"] == 64 and a["embed"]["hashes"] == 2
assert all(b["min"] <= b["median"] <= b["max"] for b in a["block_norms"])
PY
"$shamn" analyze run_a/best.h5 --data data/val.bin --windows 2 --seq-len 16 | grep -q "^# MoE" || fail "analyze tables"
"$shamn" --threads 1 analyze a_f32.shq --data data/val.bin --windows 2 --seq-len 16 --json > analyze_f32.json
"$shamn" export run_a/best.h5 --quant int8 -o a_int8.shq > /dev/null
"$shamn" --threads 1 analyze a_int8.shq --data data/val.bin --windows 2 --seq-len 16 --json > analyze_int8.json
python3 - analyze.json analyze_f32.json analyze_int8.json <<'PY'
import json, sys
c, f, q = (json.load(open(p)) for p in sys.argv[1:])
assert [m["expert_share"] for m in c["moe"]] == [m["expert_share"] for m in f["moe"]], (c["moe"], f["moe"])
assert [m["slots_read"] for m in c["memory"]] == [m["slots_read"] for m in f["memory"]]
assert abs(c["loss"] - f["loss"]) < 1e-4 * c["loss"], (c["loss"], f["loss"])
assert [b["name"] for b in q["block_norms"]] == [b["name"] for b in c["block_norms"]]
assert len(q["moe"]) == 2 and q["tokens"] == 32 and abs(q["loss"] - c["loss"]) < 0.05 * c["loss"]
PY
refused "not a readable HDF5 file" analyze data/val.bin --data data/val.bin
# --plots: the expert-load and slot-use pictures for both file kinds; without gnuplot, refused before any work.
"$shamn" --threads 1 analyze run_a/best.h5 --data data/val.bin --windows 2 --seq-len 16 --plots pa > plots.txt
grep -q "^4 plots in pa" plots.txt || fail "analyze --plots: $(tail -1 plots.txt)"
"$shamn" --threads 1 analyze a_int8.shq --data data/val.bin --windows 2 --seq-len 16 --json --plots pq \
  --plot-title "run_a int8" > pq.json
python3 -c 'import json,sys; json.load(open(sys.argv[1]))' pq.json || fail "--json --plots: stdout is not the JSON alone"
for d in pa pq; do
  for p in expert_load memory_slots; do is_png $d/$p.png && is_svg $d/$p.svg; done
done
grep -q "best.h5: expert load" pa/expert_load.svg && grep -q "run_a int8: memory slot reads" pq/memory_slots.svg ||
  fail "plot titles"
if PATH=/nonexistent "$shamn" analyze run_a/best.h5 --data data/val.bin --plots px 2> err.txt; then fail "--plots without gnuplot"; fi
grep -qF -- "--plots: gnuplot is not installed" err.txt || fail "--plots without gnuplot: $(cat err.txt)"
[ ! -e px ] || fail "a refused analyze made its plot directory"
# A window longer than the data (at the largest --seq-len, where seq_len + 1
# overflows) is refused, and the plot directory made for it removed again.
refused "one window of --seq-len 9223372036854775807 needs one more" analyze a_f32.shq --data data/val.bin \
  --seq-len 9223372036854775807 --plots pz
[ ! -e pz ] || fail "a failed analyze left its new plot directory"
echo "cli_analysis: ok"
