#!/usr/bin/env bash
# Bad input at the command line, one table for every command: a file of the
# wrong kind (a model file where a checkpoint goes, a checkpoint where a model
# file goes, text, a directory, an empty file, a missing file), an output path
# in a missing or read-only directory, out-of-range flags, a model and data or
# tokenizer that do not match. Each case must exit with status 1, print exactly
# one line on stderr, "shamn: error: ..." containing the expected words, and
# leave the work directory exactly as it was: nothing written or overwritten.
# Usage: cli_bad_input.sh SHAMN_BINARY WORKDIR
set -euo pipefail
shamn=$(realpath "$1") work=$2
rm -rf "$work" && mkdir -p "$work" && cd "$work"
fail() { echo "FAIL: $*"; exit 1; }

# Fixtures: a text, a tokenizer of 300 tokens, a model of vocab 300 (checkpoint and
# .shq with the tokenizer), one of vocab 400 (a draft that does not fit), its token files, token files of a 1000-token vocabulary,
# a tokenizer too large for the model, a finished short run, and odd files.
for i in $(seq 1 200); do printf 'Paragraph %d: the jury said %d times.\n\n' "$i" $((i * 37)); done > text.txt
"$shamn" tokenizer train --input text.txt --vocab 300 -o tok.bpe > /dev/null
"$shamn" tokenizer train --input text.txt --vocab 400 -o tok400.bpe > /dev/null
"$shamn" prepare --input text.txt --tokenizer tok.bpe --out data > /dev/null
"$shamn" synthetic --out wide --vocab 1000 --tokens 20000 > /dev/null
cat > model.toml <<'EOF'
[model]
vocab_size = 300
dim = 32
n_layers = 1
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
EOF
"$shamn" init model.toml -o model.h5 --seed 1 > /dev/null
"$shamn" export model.h5 --tokenizer tok.bpe -o model.shq > /dev/null
sed 's/^vocab_size = 300$/vocab_size = 400/' model.toml > model400.toml
"$shamn" init model400.toml -o model400.h5 --seed 1 > /dev/null
"$shamn" export model400.h5 --tokenizer tok400.bpe -o model400.shq > /dev/null
cat model.toml > run.toml
cat >> run.toml <<'EOF'
[data]
train_path = "data/train.bin"
val_path = "data/val.bin"
[train]
batch_size = 2
seq_len = 16
max_steps = 2
out_dir = "run"
eval_batches = 1
[optim]
lr = 1e-3
[log]
progress = "never"
EOF
"$shamn" --threads 1 train run.toml > /dev/null
# LoRA adapters trained on the run's checkpoint (model.h5 is another base).
"$shamn" --threads 1 train run.toml --set 'train.out_dir="lorarun"' --set 'train.init_from="run/ckpt_00000002.h5"' \
  --set lora.rank=2 --set 'lora.targets=["layers.*.mixer.out"]' > /dev/null
: > empty.bin
head -c 300 model.shq > truncated.shq
mkdir -p adir emptyrun
printf '[sweep]\nbase = "missing.toml"\nout_dir = "never"\n' > sweep_no_base.toml
if [ "$(id -u)" -eq 0 ]; then
  readonly_dir=/proc/self   # root writes anywhere else; nobody creates files here
else
  mkdir -p readonly && chmod 555 readonly && readonly_dir=$PWD/readonly
fi

# Every file with its size and mtime, every directory by name (a temporary file
# made and removed again on the error path changes only its directory's mtime).
snapshot() { find . -mindepth 1 \( -path ./stderr -prune \) -o \( -type d -printf '%p/\n' \) -o -printf '%p %s %T@\n' | sort; }
before=$(snapshot)
cases=0 failures=0
# bad 'EXPECTED WORDS' ARGS...: status 1, one stderr line "shamn: error: ...EXPECTED WORDS...",
# nothing in the work directory changed.
bad() {
  local expected=$1 status=0 why=""
  shift
  "$shamn" "$@" > /dev/null 2> stderr < /dev/null || status=$?
  cases=$((cases + 1))
  if [ "$status" -ne 1 ]; then why="exit status $status, want 1"
  elif [ "$(wc -l < stderr)" -ne 1 ]; then why="want one line on stderr"
  elif ! grep -q '^shamn: error: ' stderr; then why="no 'shamn: error:' prefix"
  elif ! grep -qF -- "$expected" stderr; then why="want '$expected'"
  elif [ "$(snapshot)" != "$before" ]; then why="files changed: $(diff <(echo "$before") <(snapshot) | tr '\n' ' ')"
  fi
  if [ -n "$why" ]; then  # report every failing case, not only the first
    failures=$((failures + 1))
    echo "FAIL: case $cases (shamn $*): $why"
    sed 's/^/  stderr: /' stderr
  fi
}

# The command line itself.
bad "A subcommand is required"
bad "unknown command 'frobnicate' (the commands are " frobnicate
bad "--bogus" train run.toml --bogus
bad "--threads" --threads -1 info model.h5
bad "--data is required" loss model.h5
bad "File does not exist: missing.toml" train missing.toml
bad "Directory does not exist: missing_run" train --resume missing_run

# train: configs, run directories and data of the wrong kind.
bad "model.shq" train model.shq
bad "model.h5" train model.h5
bad "is actually a directory" train adir
bad "empty.bin: the config has no [model] table" train empty.bin
bad "unknown key 'train.max_stpes'" train run.toml --set train.max_stpes=3
bad "train.max_steps" train run.toml --set train.max_steps=-1
bad "model.dim" train run.toml --set model.dim=abc
bad "--resume emptyrun: no run here" train --resume emptyrun
bad "is actually a file" train --resume model.shq
bad "already holds a run" train run.toml
bad ">= vocab_size" train run.toml --set 'data.train_path="wide/train.bin"' --set 'train.out_dir="never"'
bad "empty.bin" train run.toml --set 'data.train_path="empty.bin"' --set 'train.out_dir="never"'
bad "text.txt" train run.toml --set 'data.train_path="text.txt"' --set 'train.out_dir="never"'
bad "lora.targets: pattern \"layers.*.mixer\" matches no layer" train run.toml --set lora.rank=4 \
  --set 'lora.targets=["layers.*.mixer"]' --set 'train.init_from="model.h5"' --set 'train.out_dir="never"'
bad "train.init_from is empty" train run.toml --set lora.rank=4 --set 'lora.targets=["layers.*.mixer.out"]' \
  --set 'train.out_dir="never"'
bad "is a LoRA adapter checkpoint" train run.toml --set 'train.init_from="lorarun/ckpt_00000002.h5"' \
  --set 'train.out_dir="never"'
bad "trained on another base model than 'model.h5'" train --resume lorarun --set 'train.init_from="model.h5"'

# info / export / loss / init: checkpoints of the wrong kind, outputs nowhere.
bad "truncated.shq" info truncated.shq
bad "text.txt" info text.txt
bad "empty.bin" info empty.bin
bad "adir" info adir
bad "missing.h5" info missing.h5
bad "lorarun/ckpt_00000002.h5' is a LoRA adapter checkpoint" loss lorarun/ckpt_00000002.h5 --data data/val.bin \
  --batch 1 --seq 8
bad "trained on another base model than 'model.h5'" loss model.h5 --adapter lorarun/ckpt_00000002.h5 \
  --data data/val.bin --batch 1 --seq 8
bad "is not a LoRA adapter checkpoint" loss model.h5 --adapter model.h5 --data data/val.bin --batch 1 --seq 8
bad "--lora-dropout needs --adapter" loss model.h5 --lora-dropout 0.1 --data data/val.bin --batch 1 --seq 8
bad "--lora-dropout must lie in [0, 1), got 1" loss model.h5 --lora-dropout 1 --data data/val.bin --batch 1 \
  --seq 8
bad "model.shq" export model.shq -o never.shq
bad "--merge folds a LoRA adapter checkpoint into its --base; 'model.h5' is a whole model" export model.h5 --merge \
  -o never.shq
bad "pass the checkpoint it was trained on with --base" export lorarun/ckpt_00000002.h5 --merge -o never.shq
bad "were trained on another base model than --base 'model.h5'" export lorarun/ckpt_00000002.h5 --base model.h5 \
  --merge -o never.shq
bad "adapts 'layers.0.mixer.out', a block-sparse matrix" export lorarun/ckpt_00000002.h5 \
  --base run/ckpt_00000002.h5 --merge --no-tokenizer -o never.shq
bad "text.txt" export text.txt -o never.shq
bad "missing_dir/never.shq" export model.h5 --tokenizer tok.bpe -o missing_dir/never.shq
bad "$readonly_dir/never.shq" export model.h5 --tokenizer tok.bpe -o "$readonly_dir/never.shq"
bad "int3" export model.h5 --tokenizer tok.bpe --quant int3 -o never.shq
bad "400 tokens but the model's vocab_size is 300" export model.h5 --tokenizer tok400.bpe -o never.shq
bad "model.h5" export model.h5 --tokenizer model.h5 -o never.shq
bad "model.shq" loss model.shq --data data/train.bin
bad ">= vocab_size" loss model.h5 --data wide/train.bin --batch 2 --seq 16
bad "missing_dir/g.h5" loss model.h5 --data data/train.bin --grads missing_dir/g.h5
bad "--batch" loss model.h5 --data data/train.bin --batch 0
bad "model.h5" init model.h5 -o never.h5
bad "$readonly_dir/never.h5" init model.toml -o "$readonly_dir/never.h5"
bad "--init-std must lie in (0, 1], got 0" init model.toml -o never.h5 --init-std 0
bad "xavier not in {normal,fan_in}" init model.toml -o never.h5 --init xavier
bad "--init-scale-residual applies to --init normal" init model.toml -o never.h5 --init fan_in --init-scale-residual
bad "train.init must be \"normal\" or \"fan_in\"" train run.toml --set 'train.init="xavier"' --set 'train.out_dir="never"'
bad "train.init_scale_residual applies to train.init = \"normal\"" train run.toml --set 'train.init="fan_in"' \
  --set train.init_scale_residual=true --set 'train.out_dir="never"'

# generate / eval / bench: model files of the wrong kind, data that does not fit.
bad "'model.h5' names no tokenizer (data.tokenizer)" generate model.h5 --prompt "The jury"
bad "text.txt" generate text.txt --prompt "The jury"
bad "empty.bin" generate empty.bin --prompt "The jury"
bad "is actually a directory" generate adir --prompt "The jury"
bad "File does not exist: missing.shq" generate missing.shq --prompt "The jury"
bad "--temperature" generate model.shq --prompt "The jury" --temperature -1
bad "--top-p" generate model.shq --prompt "The jury" --top-p 1.5
bad "--max-tokens" generate model.shq --prompt "The jury" --max-tokens -5
bad "--kernel" generate model.shq --prompt "The jury" --kernel avx9
bad "--draft 'model400.shq' has vocab_size 400 but the model 'model.shq' has 300" generate model.shq --prompt "The jury" --draft model400.shq
bad "File does not exist: missing.shq" generate model.shq --prompt "The jury" --draft missing.shq
bad "adapter file 'truncated.shq' is 300 bytes but its header says" generate model.shq --prompt "The jury" \
  --adapter truncated.shq
bad "adapter file 'truncated.shq' is 300 bytes but its header says" eval model.shq --data data/val.bin \
  --adapter truncated.shq
bad ".shq file 'truncated.shq' is 300 bytes but its header says" info truncated.shq
bad "model.h5" generate model.shq --prompt "The jury" --draft model.h5
bad "--draft-tokens 0 must be in [1, 64]" generate model.shq --prompt "The jury" --draft model.shq --draft-tokens 0
bad "--draft-tokens 65 must be in [1, 64]" generate model.shq --prompt "The jury" --draft model.shq --draft-tokens 65
# A bad SHAMN_KERNEL is refused at start, naming the variable, whatever the command.
SHAMN_KERNEL=avx9 bad "SHAMN_KERNEL='avx9' is unknown" info model.h5
bad "text.txt" eval text.txt --data data/val.bin
bad "text.txt" eval model.shq --data text.txt
bad "empty.bin" eval model.shq --data empty.bin
bad ">= vocab_size" eval model.shq --data wide/val.bin
bad "text.txt" eval model.shq --data data/val.bin --seq-len 16 --reference text.txt
bad "'data/val.bin' has" eval model.shq --data data/val.bin --seq-len 4096
bad "--seq-len" eval model.shq --data data/val.bin --seq-len 0
bad "text.txt" bench text.txt
bad "text.txt" analyze text.txt --data data/val.bin
bad "truncated.shq" analyze truncated.shq --data data/val.bin
bad "is not below the model's vocab_size 300" analyze model.shq --data wide/train.bin --seq-len 16
bad "'data/val.bin' has" analyze model.h5 --data data/val.bin --seq-len 100000
bad "--format" analyze model.h5 --data data/val.bin --format u8
bad "$readonly_dir/plots" analyze model.shq --data data/val.bin --seq-len 16 --plots "$readonly_dir/plots"
bad "--repeats" bench model.shq --repeats 0
bad "--warmup" bench model.shq --warmup -1
bad "--temperature" bench model.shq --temperature -1
bad "--top-p" bench model.shq --temperature 0.8 --top-p 0

# tokenizer / prepare / synthetic / machine / sweep.
bad "model.shq" tokenizer encode --tokenizer model.shq --input text.txt
bad "text.txt" tokenizer decode --tokenizer text.txt --input text.txt
bad "missing.txt" tokenizer encode --tokenizer tok.bpe --input missing.txt
bad "missing_dir/tok.bpe" tokenizer train --input text.txt --vocab 300 -o missing_dir/tok.bpe
bad "--vocab" tokenizer train --input text.txt --vocab 10 -o never.bpe
bad "model.h5" prepare --input text.txt --tokenizer model.h5 --out never
bad "$readonly_dir/never" prepare --input text.txt --tokenizer tok.bpe --out "$readonly_dir/never"
bad "--vocab" synthetic --out never --vocab 0
bad "--repeats" machine --repeats 0
bad "--probe-ms" machine --probe-ms 0
bad "text.txt: not valid JSON" eval model.h5 --data data/val.bin --profile --machine text.txt
bad "missing.json" eval model.h5 --data data/val.bin --profile --machine missing.json
bad "model.shq" sweep model.shq
bad "missing.toml" sweep sweep_no_base.toml

[ "$failures" -eq 0 ] || fail "$failures of $cases cases"
echo "cli_bad_input: ok ($cases cases)"
cd / && rm -rf "$work"
