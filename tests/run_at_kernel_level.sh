#!/usr/bin/env bash
# Runs a test program with SHAMN_KERNEL=LEVEL; exit 77 (CTest's skip) when this
# CPU lacks the level, so the suite passes on any x86-64 machine.
#   tests/run_at_kernel_level.sh scalar|avx2|avx512 PROGRAM [ARGS...]
set -euo pipefail
level=$1
shift
has() { grep -qw "$1" /proc/cpuinfo; }
case $level in
  scalar) ;;
  avx2) has avx2 && has fma || { echo "skipped: this CPU lacks AVX2/FMA"; exit 77; } ;;
  avx512)
    for f in avx2 fma avx512f avx512bw avx512vl avx512_vnni; do
      has "$f" || { echo "skipped: this CPU lacks $f"; exit 77; }
    done
    ;;
  *) echo "unknown kernel level '$level'" >&2; exit 2 ;;
esac
SHAMN_KERNEL=$level exec "$@"
