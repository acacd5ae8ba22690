#!/usr/bin/env bash
# probe.sh BUILD_DIR TARGET builds|fails: builds one layering probe and checks the outcome.
set -uo pipefail
build=$1 target=$2 expect=$3
out=$(cmake --build "$build" --target "$target" 2>&1)
status=$?
if [ "$expect" = builds ]; then
  [ $status -eq 0 ] && { echo "PASS: $target builds"; exit 0; }
  echo "$out"; echo "FAIL: $target should build"; exit 1
fi
if [ $status -ne 0 ] && grep -q "No such file or directory" <<< "$out"; then
  echo "PASS: $target: $(grep -m1 'No such file' <<< "$out")"
  exit 0
fi
echo "$out"
echo "FAIL: $target should fail to compile on its upward include (status $status)"
exit 1
