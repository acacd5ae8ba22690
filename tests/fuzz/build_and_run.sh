#!/usr/bin/env bash
# Builds one libFuzzer target with Clang (libFuzzer + ASan + UBSan) in
# build-fuzz/ and fuzzes it for SECONDS on its committed seeds, with its
# dictionary. New corpus units and findings (crash-*, leak-*, timeout-*, oom-*)
# land in build-fuzz/run/TARGET/. See experiments/fuzzing.md.
#
#   tests/fuzz/build_and_run.sh TARGET SECONDS [more libFuzzer flags]
#
# TARGET: shq_loader (or shq), token_file, tokenizer_file, run_config,
# sweep_spec, checkpoint (libhdf5's own errors suppressed: see targets.sh).
# For shq_loader, when the GCC-built CLI exists
# (./build/shamn, or $SHAMN_CLI), larger seeds are exported with it as well.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/tests/fuzz/targets.sh"
target=$(fuzz_target_name "${1:?usage: $0 TARGET SECONDS [libFuzzer flags]}")
seconds=${2:?usage: $0 TARGET SECONDS [libFuzzer flags]}
shift 2

CC=clang CXX=clang++ cmake -S "$root" -B "$root/build-fuzz" -DSHAMN_FUZZ=ON -DSHAMN_BUILD_TESTS=OFF \
  -DSHAMN_BUILD_BENCHMARKS=OFF >/dev/null
cmake --build "$root/build-fuzz" -j2 --target "fuzz_$target"

run=$root/build-fuzz/run/$target
mkdir -p "$run/corpus"
seed_dirs=("$root/tests/fuzz/$target/seeds")

shamn=${SHAMN_CLI:-$root/build/shamn}
if [[ $target == shq_loader && -x $shamn ]]; then
  exported=$run/exported
  if [[ ! -s $exported/int8.shq ]]; then
    mkdir -p "$exported" "$run/work"
    "$shamn" init "$root/tests/fuzz/seed_model.toml" -o "$run/work/model.h5" --seed 1 >/dev/null
    for quant in f32 int8 int4; do
      "$shamn" export "$run/work/model.h5" --quant "$quant" --no-tokenizer -o "$exported/$quant.shq" >/dev/null
    done
  fi
  seed_dirs+=("$exported")
fi

cd "$run"
fuzz_target_env "$target"
exec "$root/build-fuzz/tests/fuzz/fuzz_$target" corpus "${seed_dirs[@]}" \
  -dict="$root/tests/fuzz/$target.dict" -max_total_time="$seconds" -timeout=10 \
  -print_final_stats=1 -artifact_prefix="$run/" "$@"
