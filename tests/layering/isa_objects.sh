#!/usr/bin/env bash
# Checks that AVX-512 code stays inside the AVX-512 kernels (core/isa.h): every
# function of the given static libraries whose machine code uses a zmm or mask
# register must have "avx512" in its name (shamn::isa_avx512::..., or the
# runtime's *_avx512 paths). Anything else with AVX-512 instructions could be
# the copy of a shared inline function the linker keeps, and would then fault on
# a CPU without AVX-512. Skipped in a -march=native build, where any code may use
# them.
#   tests/layering/isa_objects.sh BUILD_DIR LIB.a...
set -euo pipefail
build=$1
shift
if grep -q "^SHAMN_NATIVE:BOOL=ON" "$build/CMakeCache.txt"; then
  echo "skipped: a -march=native build"
  exit 77
fi
bad=$(for lib in "$@"; do
  objdump -d -C --no-show-raw-insn "$lib" |
    awk '/^[0-9a-f]+ <.*>:$/ { fn = $0; next }
         /%zmm|%k[1-7]/ { if (fn !~ /avx512/) print fn }'
done | sort -u)
if [[ -n $bad ]]; then
  echo "AVX-512 instructions outside the AVX-512 kernels:"
  echo "$bad" | head -20
  exit 1
fi
count=$(for lib in "$@"; do objdump -d -C --no-show-raw-insn "$lib" | grep -c "%zmm" || true; done |
  awk '{ s += $1 } END { print s }')
echo "ok: $count instructions on zmm registers, all in AVX-512 kernels"
[[ $count -gt 0 ]]  # the AVX-512 kernels must exist
