# Sourced by build_and_run.sh and ci_smoke.sh: the fuzz targets, by the name
# those scripts take. Target NAME is the executable fuzz_NAME, its committed
# seeds are tests/fuzz/NAME/seeds/, its dictionary tests/fuzz/NAME.dict and the
# inputs of its fixed findings tests/fuzz/regressions/NAME/.
fuzz_targets=(shq_loader token_file tokenizer_file run_config sweep_spec checkpoint completion_request)

# "shq" was the only target's name before there were others.
fuzz_target_name() {
  local name=$1
  [[ $name == shq ]] && name=shq_loader
  local t
  for t in "${fuzz_targets[@]}"; do
    [[ $t == "$name" ]] && { echo "$name"; return 0; }
  done
  echo "unknown fuzz target '$1' (known: ${fuzz_targets[*]})" >&2
  return 1
}

# The checkpoint target runs libhdf5 1.10, which has its own memory errors and
# leaks on malformed files (experiments/fuzzing.md, "In libhdf5"). Unless
# SHAMN_FUZZ_HDF5_SUPPRESS=0, errors ASan catches in calls made from inside
# libhdf5, and leaks allocated there, are suppressed so that the fuzzer keeps
# testing our code; everything else is still reported.
fuzz_target_env() {
  local here
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  if [[ $1 == checkpoint && ${SHAMN_FUZZ_HDF5_SUPPRESS:-1} != 0 ]]; then
    # allocator_may_return_null: libhdf5 mallocs sizes read from the file and copes
    # with NULL; a huge allocation of ours still fails (operator new throws).
    export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}suppressions=$here/libhdf5.asan.supp:allocator_may_return_null=1"
    export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$here/libhdf5.lsan.supp"
    echo "fuzz: checkpoint: libhdf5's own errors are suppressed (tests/fuzz/libhdf5.*.supp; SHAMN_FUZZ_HDF5_SUPPRESS=0 shows them)" >&2
  fi
}

# True when the first stack of the sanitizer report in log $1 reaches a libhdf5
# frame before any of ours: a crash inside libhdf5 (a SEGV there cannot be
# suppressed). A UBSan report, an uncaught exception or a stack through our
# code first is ours.
fuzz_crash_in_libhdf5() {
  awk '/ERROR: (AddressSanitizer|LeakSanitizer)/ { report = 1 }
       report && /#[0-9]+ / {
         if ($0 ~ /libhdf5/) { print "libhdf5"; exit }
         if ($0 ~ /shamn::|LLVMFuzzerTestOneInput/) { print "ours"; exit }
       }' "$1" | grep -q libhdf5
}
