#!/usr/bin/env bash
# Runs every test of a build with ctest and closes with one summary line:
#   tests: N passed, N failed, N skipped
# GPU tests skip cleanly without a device and are counted as skipped.
# Usage: scripts/run-tests.sh BUILD_DIR [extra ctest args]
set -uo pipefail
build=${1:-build}
shift || true
log=$(mktemp)
trap 'rm -f "$log"' EXIT
jobs=$(nproc)
ctest --test-dir "$build" --output-on-failure -j "$jobs" "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
total=$(grep -oE 'tests failed out of [0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1)
failed=$(grep -oE '[0-9]+ tests failed out of' "$log" | grep -oE '^[0-9]+' | tail -1)
skipped=$(grep -cE '^\s+[0-9]+ - .*\((Skipped|Not Run|Disabled)\)$' "$log")
total=${total:-0}
failed=${failed:-0}
passed=$((total - failed - skipped))
if [[ "$total" -eq 0 ]]; then
  echo "run-tests: ctest ran no test" >&2
  rc=1
fi
echo "tests: ${passed} passed, ${failed} failed, ${skipped} skipped"
exit "$rc"
