#!/usr/bin/env bash
# Runs the CPU benchmarks of a build one after another (never in parallel:
# they compete for the same cores) and keeps their output under
# BUILD_DIR/bench-results/. Figures are ratios against a baseline measured in
# the same process, so they are comparable across noisy machines.
# allreduce_bench (4 local rank processes) runs on loopback and then, where
# network namespaces can be made (root, iproute2), again with every rank in a
# namespace of its own behind a rate-limited veth (scripts/netns.sh), once
# per egress rate in ALLREDUCE_NETNS_RATES (default: "1gbit 250mbit").
# daemon_bench starts giftd and 2 rank processes (bench/daemon/).
# peer_bench starts 3 giftd nodes joined by the Peer service, 2 ranks each,
# on loopback ports (PEER_BENCH_FLAGS adds flags, e.g. "--netns").
# hooks_bench (bench/python/hooks_bench.py, only when named: it needs the
# gift_python and giftd targets and takes several minutes) compares gift's
# DDP comm hook with PyTorch's fp16/bf16/PowerSGD hooks on 4 gloo ranks
# (HOOKS_BENCH_FLAGS adds flags, e.g. "--steps 40").
# multihost_bench (bench/python/multihost_bench.py, only when named: it needs
# the gift_python, giftd and giftctl targets and network namespaces, about 10
# minutes) trains a 7.5 M-parameter GPT on 4 ranks, one network namespace
# each, at egress 100mbit / 1gbit / unlimited, with DDP FP32, torch's fp16
# and PowerSGD hooks, and gift euclid / gift (one peered giftd per
# namespace) (MULTIHOST_BENCH_FLAGS adds flags, e.g. "--rounds 3").
# Usage: scripts/run-bench.sh BUILD_DIR [benchmark-name ...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
shift || true
benches=("$@")
if [[ ${#benches[@]} -eq 0 ]]; then
  benches=(quantize_bench whiten_bench sketch_bench nystrom_bench allreduce_bench
    daemon_bench peer_bench)
fi

# The bandwidth-limited allreduce runs: one namespace set per rate, removed
# on exit even when a run fails.
netns_prefix="giftbench$$"
allreduce_netns() {
  local exe=$1 reason rate
  if ! reason=$("$here/netns.sh" check); then
    echo "run-bench: skipping the bandwidth-limited allreduce_bench:" \
      "network namespaces unavailable: $reason"
    return 0
  fi
  trap '"$here/netns.sh" down -p "$netns_prefix"' EXIT
  for rate in ${ALLREDUCE_NETNS_RATES:-1gbit 250mbit}; do
    echo "=== allreduce_bench, ranks in network namespaces, egress $rate ==="
    "$here/netns.sh" up -p "$netns_prefix" -w 4 -r "$rate"
    "$exe" --netns="$netns_prefix" --label="netns $rate" \
      --json="$out/allreduce_bench_netns_$rate.json" 2>&1 |
      tee "$out/allreduce_bench_netns_$rate.txt"
    "$here/netns.sh" down -p "$netns_prefix"
  done
}
out="$build/bench-results"
mkdir -p "$out"
for b in "${benches[@]}"; do
  if [[ "$b" == multihost_bench ]]; then
    echo "=== $b ==="
    if ! reason=$("$here/netns.sh" check); then
      echo "run-bench: skipping multihost_bench: network namespaces" \
        "unavailable: $reason"
      continue
    fi
    /usr/bin/python3 "$here/../bench/python/multihost_bench.py" \
      --build "$build" --out "$out" ${MULTIHOST_BENCH_FLAGS:-} 2>&1 |
      tee "$out/$b.txt"
    continue
  fi
  if [[ "$b" == hooks_bench ]]; then
    echo "=== $b ==="
    /usr/bin/python3 "$here/../bench/python/hooks_bench.py" --build "$build" \
      --out "$out" ${HOOKS_BENCH_FLAGS:-} 2>&1 | tee "$out/$b.txt"
    continue
  fi
  exe="$build/bench/$b"
  [[ "$b" == daemon_bench || "$b" == peer_bench ]] &&
    exe="$build/bench/daemon/$b"
  if [[ ! -x "$exe" ]]; then
    echo "run-bench: $exe not built" >&2
    exit 1
  fi
  echo "=== $b ==="
  if [[ "$b" == allreduce_bench ]]; then
    "$exe" --label=loopback --json="$out/$b.json" 2>&1 | tee "$out/$b.txt"
    allreduce_netns "$exe"
    continue
  fi
  if [[ "$b" == daemon_bench ]]; then
    # giftd + 2 ranks: step time with refreshes running vs disabled
    # (DAEMON_BENCH_FLAGS adds flags, e.g. "--refresh-interval 50").
    "$exe" --out "$out/$b.json" ${DAEMON_BENCH_FLAGS:-} 2>&1 |
      tee "$out/$b.txt"
    continue
  fi
  if [[ "$b" == peer_bench ]]; then
    "$exe" --out "$out/$b.json" ${PEER_BENCH_FLAGS:-} 2>&1 | tee "$out/$b.txt"
    continue
  fi
  "$exe" --benchmark_min_time=0.2 2>&1 | tee "$out/$b.txt"
done
echo "run-bench: results in $out/"
