#!/usr/bin/env bash
# The tokenizer commands end to end: train, encode | decode gives the bytes back
# (text and raw bytes), prepare writes both token files, bad input exits 1 with
# a message and leaves nothing behind.
# Usage: cli_tokenizer.sh SHAMN_BINARY WORKDIR
set -euo pipefail
shamn=$1 work=$2
rm -rf "$work" && mkdir -p "$work"
for i in $(seq 1 300); do
  printf 'Paragraph %d: the jury said %d times that caf\xc3\xa9 prices rose.\nA second line.\n\n' "$i" $((i * 37))
done > "$work/text.txt"
"$shamn" tokenizer train --input "$work/text.txt" --vocab 400 -o "$work/tok.bpe" | grep -q "vocab 400"
head -n 1 "$work/tok.bpe" | grep -qx "shamn-bpe 1"
"$shamn" tokenizer encode --tokenizer "$work/tok.bpe" --input "$work/text.txt" > "$work/ids.txt"
"$shamn" tokenizer decode --tokenizer "$work/tok.bpe" --input "$work/ids.txt" | cmp - "$work/text.txt"
head -c 20000 /dev/urandom > "$work/random.bin"
"$shamn" tokenizer encode --tokenizer "$work/tok.bpe" < "$work/random.bin" |
  "$shamn" tokenizer decode --tokenizer "$work/tok.bpe" | cmp - "$work/random.bin"

"$shamn" prepare --input "$work/text.txt" --tokenizer "$work/tok.bpe" --out "$work/data" > "$work/prepare.log"
grep -q "300 paragraphs; val takes 1 in 20: 15," "$work/prepare.log"
test -s "$work/data/train.bin"
test -s "$work/data/val.bin"

expect_error() {  # expect_error MESSAGE COMMAND...: exit status 1 and MESSAGE on stderr
  local message=$1 status=0
  shift
  "$@" > /dev/null 2> "$work/stderr" || status=$?
  [ "$status" -eq 1 ] || { echo "expected exit 1, got $status: $*"; exit 1; }
  grep -qF -- "$message" "$work/stderr" || { echo "expected '$message' from: $*"; cat "$work/stderr"; exit 1; }
}
expect_error "--val-fraction must be in (0, 0.5], got 0.6" \
  "$shamn" prepare --input "$work/text.txt" --tokenizer "$work/tok.bpe" --out "$work/never" --val-fraction 0.6
test ! -e "$work/never"
printf 'shamn-bpe 1\nvocab_size 258\n97 98\n' > "$work/short.bpe"
expect_error "$work/short.bpe:4: file ends after 1 merges" \
  "$shamn" tokenizer encode --tokenizer "$work/short.bpe" --input "$work/text.txt"
echo "1 400" > "$work/bad_ids.txt"
expect_error "offset 2: token id 400 is >= the vocab_size 400" \
  "$shamn" tokenizer decode --tokenizer "$work/tok.bpe" --input "$work/bad_ids.txt"
echo "cli_tokenizer: ok"
