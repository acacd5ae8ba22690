#!/usr/bin/env bash
# The inference commands end to end: a tiny checkpoint with a tokenizer is
# exported at every precision, generate is deterministic per seed and streams
# text, eval prints JSON for model files and checkpoints alike, bench reports
# its figures, and bad input exits 1 naming the file, flag or tensor, leaving
# any earlier output untouched.
# Usage: cli_infer.sh SHAMN_BINARY CONFIG WORKDIR
set -euo pipefail
shamn=$1 config=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
for i in $(seq 1 200); do
  printf 'Story %d: the cat sat on the mat and the dog ran %d times.\n\n' "$i" $((i * 7))
done > "$work/text.txt"
"$shamn" tokenizer train --input "$work/text.txt" --vocab 320 -o "$work/tok.bpe" > /dev/null
"$shamn" prepare --input "$work/text.txt" --tokenizer "$work/tok.bpe" --out "$work/data" > /dev/null
"$shamn" init "$config" -o "$work/model.h5" --seed 3 > /dev/null

for q in f32 int8 int4; do
  "$shamn" export "$work/model.h5" --quant $q --tokenizer "$work/tok.bpe" -o "$work/$q.shq" | grep -q "wrote"
done
# Without a tokenizer in the config or on the command line, export asks for one.
expect_error() {  # expect_error MESSAGE COMMAND...: exit status 1 and MESSAGE on stderr
  local message=$1 status=0
  shift
  "$@" > "$work/stdout" 2> "$work/stderr" || status=$?
  [ "$status" -eq 1 ] || { echo "expected exit 1, got $status: $*"; cat "$work/stderr"; exit 1; }
  grep -qF -- "$message" "$work/stderr" || { echo "expected '$message' from: $*"; cat "$work/stderr"; exit 1; }
}
expect_error "pass --tokenizer PATH" "$shamn" export "$work/model.h5" -o "$work/x.shq"
"$shamn" export "$work/model.h5" --no-tokenizer -o "$work/ids_only.shq" | grep -q "tokenizer: none"

# generate: the same seed gives the same text; the prompt comes first.
"$shamn" generate "$work/int8.shq" --prompt "the cat" --max-tokens 20 --seed 5 > "$work/a.txt" 2> "$work/a.err"
"$shamn" generate "$work/int8.shq" --prompt "the cat" --max-tokens 20 --seed 5 > "$work/b.txt" 2> /dev/null
cmp "$work/a.txt" "$work/b.txt"
head -c 7 "$work/a.txt" | grep -qx "the cat"
grep -q "tok/s decode" "$work/a.err"
"$shamn" generate "$work/int4.shq" --prompt "the dog" --max-tokens 5 --temperature 0 --kernel scalar > /dev/null 2>&1
# generate --draft: greedy speculative text is plain greedy text, whatever K; the stats line reports acceptance.
"$shamn" generate "$work/int8.shq" --prompt "the cat" --max-tokens 30 --temperature 0 > "$work/greedy.txt" 2> /dev/null
for k in 1 3 8; do
  "$shamn" generate "$work/int8.shq" --prompt "the cat" --max-tokens 30 --temperature 0 --draft "$work/int4.shq" \
    --draft-tokens $k > "$work/spec.txt" 2> "$work/spec.err"
  cmp "$work/greedy.txt" "$work/spec.txt"
  grep -q "30 tokens: .* tok/s decode; draft acceptance" "$work/spec.err"
done
"$shamn" generate "$work/int8.shq" --prompt "the cat" --max-tokens 20 --seed 5 --draft "$work/int4.shq" > "$work/c.txt" 2> /dev/null
"$shamn" generate "$work/int8.shq" --prompt "the cat" --max-tokens 20 --seed 5 --draft "$work/int4.shq" > "$work/d.txt" 2> /dev/null
cmp "$work/c.txt" "$work/d.txt"
expect_error "has no tokenizer" "$shamn" generate "$work/ids_only.shq" --prompt "the"
expect_error "--top-p" "$shamn" generate "$work/int8.shq" --prompt "the" --top-p 0
expect_error "--kernel 'sse' is unknown" "$shamn" generate "$work/int8.shq" --prompt "the" --kernel sse
# --logit-bias: ID=BIAS, any number a double reads (a tiny bias is 0), within [-100, 100].
"$shamn" generate "$work/int8.shq" --prompt "the" --max-tokens 3 --seed 5 --logit-bias 5=1e-50 --logit-bias 6=+2 --logit-bias 7=1e-400 \
  > /dev/null 2>&1
expect_error "'5=x' is not ID=BIAS" "$shamn" generate "$work/int8.shq" --prompt "the" --logit-bias 5=x
expect_error "'5.5=2' is not ID=BIAS" "$shamn" generate "$work/int8.shq" --prompt "the" --logit-bias 5.5=2
expect_error "the bias must be in [-100, 100]" "$shamn" generate "$work/int8.shq" --prompt "the" --logit-bias 5=nan
expect_error "the bias must be in [-100, 100]" "$shamn" generate "$work/int8.shq" --prompt "the" --logit-bias 5=1e300
# Speculative decoding cannot apply penalties or a logit bias: refused, naming them.
expect_error "not available with a draft model" "$shamn" generate "$work/int8.shq" --prompt "the" \
  --draft "$work/int4.shq" --presence-penalty 1

# eval: JSON for a model file and for the checkpoint, and the f32 file matches the checkpoint.
"$shamn" eval "$work/model.h5" --data "$work/data/val.bin" --seq-len 32 > "$work/ckpt.json"
"$shamn" eval "$work/f32.shq" --data "$work/data/val.bin" --seq-len 32 --reference "$work/model.h5" > "$work/f32.json"
"$shamn" eval "$work/int8.shq" --data "$work/data/val.bin" --seq-len 32 --reference "$work/f32.shq" > "$work/int8.json"
/usr/bin/python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
ckpt, f32, i8 = (json.load(open(f"{w}/{n}.json")) for n in ("ckpt", "f32", "int8"))
assert ckpt["kind"] == "checkpoint" and f32["kind"] == "f32" and i8["kind"] == "int8", (ckpt, f32, i8)
assert abs(f32["loss"] - ckpt["loss"]) < 1e-5 * ckpt["loss"], (f32, ckpt)
assert f32["mean_kl"] < 1e-9 and f32["top1_agreement"] == 1.0, f32
assert 0 <= i8["mean_kl"] < 0.05 and i8["top1_agreement"] > 0.5, i8
PY
sed 's/^dim = 64$/dim = 96/' "$config" > "$work/other.toml"
"$shamn" init "$work/other.toml" -o "$work/other.h5" > /dev/null
expect_error "different model" "$shamn" eval "$work/int8.shq" --data "$work/data/val.bin" --reference "$work/other.h5"

# bench: the figures it promises.
"$shamn" bench "$work/int8.shq" --prompt-tokens 16 --decode-tokens 16 --repeats 2 --json > "$work/bench.json"
"$shamn" bench "$work/model.h5" --prompt-tokens 16 --decode-tokens 4 --repeats 1 --json > "$work/bench_ckpt.json"
/usr/bin/python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
b = json.load(open(f"{w}/bench.json"))
for k in ("prefill_tok_s", "decode_tok_s", "weight_bytes_per_token", "file_bytes", "peak_rss_mib"):
    assert b[k] > 0, (k, b)
assert b["repeats"] == 2 and b["warmup"] == 1, b
c = json.load(open(f"{w}/bench_ckpt.json"))
assert c["kind"] == "checkpoint" and c["decode_tok_s"] > 0, c
PY
# bench --forced-decode: every model and sampling setting decodes the same
# tokens (equal CRCs); sampled, the tokens follow the sampler, and greedy
# decoding gives the same tokens at any thread count.
quick=(--prompt-tokens 8 --decode-tokens 16 --repeats 1 --warmup 0 --json)
crc() { "$shamn" "${@:2}" "${quick[@]}" | /usr/bin/python3 -c \
  "import json, sys; b = json.load(sys.stdin); assert b['decode_input'] == '$1', b; print(b['decoded_crc32'])"; }
forced=$(crc forced bench "$work/int8.shq" --forced-decode)
[ "$(crc forced bench "$work/int4.shq" --forced-decode --temperature 0.8)" = "$forced" ]
[ "$(crc forced bench "$work/model.h5" --forced-decode)" = "$forced" ]
[ "$(crc forced bench "$work/f32.shq" --forced-decode --streams 3)" = \
  "$(crc forced bench "$work/int8.shq" --forced-decode --streams 3 --temperature 0.8)" ]
greedy=$(crc sampled --threads 1 bench "$work/int8.shq")
[ "$(crc sampled --threads 2 bench "$work/int8.shq")" = "$greedy" ]
[ "$greedy" != "$forced" ]
[ "$(crc sampled bench "$work/int8.shq" --temperature 0.8)" != "$greedy" ]

# Bad files: truncated, flipped byte, not a model file; export over an existing file that fails keeps it.
head -c 5000 "$work/int8.shq" > "$work/truncated.shq"
expect_error "truncated" "$shamn" generate "$work/truncated.shq" --prompt "the"
cp "$work/int8.shq" "$work/flipped.shq"
size=$(stat -c %s "$work/flipped.shq")
printf '\x55' | dd of="$work/flipped.shq" bs=1 seek=$((size - 100)) conv=notrunc status=none
expect_error "fails its checksum" "$shamn" eval "$work/flipped.shq" --data "$work/data/val.bin"
expect_error "not a readable HDF5 file" "$shamn" export "$work/text.txt" -o "$work/int8.shq"
expect_error "--quant 'int3' is unknown" "$shamn" export "$work/model.h5" --quant int3 --no-tokenizer -o "$work/int8.shq"
cmp <(head -c 5000 "$work/int8.shq") "$work/truncated.shq"
[ -z "$(find "$work" -name '.*.tmp.*')" ] || { echo "temporary files left behind"; exit 1; }
echo "cli_infer: ok"
