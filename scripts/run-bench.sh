#!/usr/bin/env bash
# Runs the CPU benchmarks of a build one after another (never in parallel:
# they compete for the same cores) and keeps their output under
# BUILD_DIR/bench-results/. Figures are ratios against a baseline measured in
# the same process, so they are comparable across noisy machines.
# Usage: scripts/run-bench.sh BUILD_DIR [benchmark-name ...]
set -euo pipefail
build=${1:-build}
shift || true
benches=("$@")
if [[ ${#benches[@]} -eq 0 ]]; then
  benches=(quantize_bench whiten_bench nystrom_bench)
fi
out="$build/bench-results"
mkdir -p "$out"
for b in "${benches[@]}"; do
  exe="$build/bench/$b"
  if [[ ! -x "$exe" ]]; then
    echo "run-bench: $exe not built" >&2
    exit 1
  fi
  echo "=== $b ==="
  "$exe" --benchmark_min_time=0.2 2>&1 | tee "$out/$b.txt"
done
echo "run-bench: results in $out/"
