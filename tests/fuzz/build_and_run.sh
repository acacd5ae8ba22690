#!/usr/bin/env bash
# Builds the .shq loader fuzzer with Clang (libFuzzer + ASan + UBSan) in
# build-fuzz/, makes a seed corpus of valid exported files with the GCC-built
# CLI, and fuzzes for SECONDS. Findings (crash-*, leak-*, timeout-*) land in
# build-fuzz/run/. See experiments/fuzzing.md.
#
#   tests/fuzz/build_and_run.sh SECONDS [more libFuzzer flags]
#
# Needs ./build/shamn (the normal GCC build) for the seeds; set SHAMN_CLI to use another.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
seconds=${1:?usage: $0 SECONDS [libFuzzer flags]}
shift
shamn=${SHAMN_CLI:-$root/build/shamn}
[[ -x $shamn ]] || { echo "$0: $shamn not found: build the project first (cmake --build build)" >&2; exit 1; }

CC=clang CXX=clang++ cmake -S "$root" -B "$root/build-fuzz" -DSHAMN_FUZZ=ON -DSHAMN_BUILD_TESTS=OFF \
  -DSHAMN_BUILD_BENCHMARKS=OFF >/dev/null
cmake --build "$root/build-fuzz" -j2 --target fuzz_shq_loader

run=$root/build-fuzz/run
seeds=$run/seeds
if [[ ! -s $seeds/int8.shq ]]; then
  mkdir -p "$seeds" "$run/work"
  "$shamn" init "$root/tests/fuzz/seed_model.toml" -o "$run/work/model.h5" --seed 1 >/dev/null
  for quant in f32 int8 int4; do
    "$shamn" export "$run/work/model.h5" --quant "$quant" --no-tokenizer -o "$seeds/$quant.shq" >/dev/null
  done
  # One seed with an embedded tokenizer, so its parser is reached too.
  "$shamn" tokenizer train --input "$root/README.md" --vocab 280 -o "$run/work/tokenizer.txt" >/dev/null
  "$shamn" export "$run/work/model.h5" --quant int8 --tokenizer "$run/work/tokenizer.txt" \
    -o "$seeds/int8_tokenizer.shq" >/dev/null
fi

mkdir -p "$run/corpus"
cd "$run"
exec "$root/build-fuzz/tests/fuzz/fuzz_shq_loader" corpus seeds -dict="$root/tests/fuzz/shq.dict" \
  -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$run/" "$@"
