#!/usr/bin/env bash
# README command (b): set up, build, and run every test (lit + FileCheck;
# the GoogleTest suites run through lit too). Exits non-zero if any fails.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${MOE_BUILD_DIR:-$ROOT/build}"
LIT=/usr/lib/llvm-22/bin/lit
start=$(date +%s)
"$ROOT/scripts/setup.sh"
built=$(date +%s)
echo "[tests] set-up and build took $((built - start)) s"

log="$BUILD_DIR/test-results.log"
set +e
"$LIT" -sv ${LIT_OPTS:-} "$BUILD_DIR/test" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
end=$(date +%s)
# lit's summary lines ("Passed: N (..%)", "Failed: N (..%)") as one plain line.
count() { awk -v k="$1" '$1 == k":" { print $2 }' "$log" | tail -1; }
passed=$(count Passed); failed=$(count Failed)
echo "[tests] tests took $((end - built)) s; total $((end - start)) s"
echo "tests: ${passed:-0} passed, ${failed:-0} failed"
if [[ $rc -ne 0 || -z "$passed" ]]; then
  echo "[tests] FAILED (lit exit code $rc)"
  exit 1
fi
