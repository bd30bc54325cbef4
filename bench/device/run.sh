#!/usr/bin/env bash
# The device check for a lent GPU machine (one H200): build with CUDA for
# sm_90 only, run every GPU-labelled test (including the device allreduce
# against the host path, 1/2/4 ranks on the GPU), run the GPU benchmarks
# (kernels, then the allreduce modes), run giftd end to end on the GPU (two
# NCCL ranks on CUDA IPC data regions, CPU and cuSOLVER refresher), and print
# a short table last; also the giftd step-time benchmark (CPU ranks) on the
# machine's 16 cores. Finishes in under 8 minutes on 16 cores.
# Usage (repository root): bash bench/device/run.sh   [OUT=dir for results]
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/gift-device}
mkdir -p "$out"
build=build-device
start=$(date +%s)

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader \
  | tee "$out/gpu.txt" || echo "no nvidia-smi"

scripts/install-deps.sh >"$out/deps.log" 2>&1 || { echo "install-deps failed"; tail "$out/deps.log"; }
cmake -S . -B "$build" -DGIFT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DPython3_EXECUTABLE=/usr/bin/python3 >"$out/configure.log" 2>&1 \
  || { echo "configure failed"; tail -30 "$out/configure.log"; exit 1; }
cmake --build "$build" -j "$(nproc)" >"$out/build.log" 2>&1 \
  || { echo "build failed"; grep -E 'error' "$out/build.log" | head -30; exit 1; }
echo "build: $(( $(date +%s) - start )) s"

# The giftd test runs on its own below, so that its rank processes do not
# share the GPU with the other tests' ranks.
ctest --test-dir "$build" -L gpu -E '^GiftdGpuTest\.' --output-on-failure \
  -j 4 --timeout 300 >"$out/gpu-tests.log" 2>&1
gpu_rc=$?
tail -15 "$out/gpu-tests.log"

# giftd + giftctl + 2 GPU ranks (NCCL, device buckets and activations, CUDA
# IPC data regions): a pinned layer's factors arrive and both ranks take the
# GIFT path together (tests/gpu/giftd_gpu_test.cc, about a minute).
timeout -k 10 170 "$build/tests/daemon/giftd_gpu_test" >"$out/giftd-gpu-test.log" 2>&1
giftd_rc=$?
[ "$giftd_rc" = 124 ] && echo "giftd_gpu_test: timed out after 170 s" >>"$out/giftd-gpu-test.log"
grep -E '^\[ +(OK|FAILED|SKIPPED) +\] .*\([0-9]+ ms\)|timed out|NCCL refused' \
  "$out/giftd-gpu-test.log" | head -12

# giftd off the critical path with the cores a GPU node has: 2 CPU rank
# processes, refreshes running vs disabled, side by side.
timeout 150 "$build/bench/daemon/daemon_bench" --phases 4 --steps-per-phase 80 \
  --refresh-interval 10 --out "$out/daemon_bench.json" >"$out/daemon_bench.txt" 2>&1
tail -8 "$out/daemon_bench.txt"

timeout 240 "$build/bench/kernels_gpu_bench" --benchmark_min_time=0.1 \
  --benchmark_out="$out/kernels_gpu_bench.json" --benchmark_out_format=json \
  >"$out/kernels_gpu_bench.txt" 2>&1
cat "$out/kernels_gpu_bench.txt" | tail -40

# QuantizedAllReduce on NCCL (fp8 / fp32 / bf16 / nccl-fp8), 4 rank processes
# on the one GPU, or 1 when NCCL refuses several ranks per GPU (it says so).
timeout 180 "$build/bench/allreduce_gpu_bench" --world=4 --steps=10 \
  >"$out/allreduce_gpu_bench.txt" 2>&1
echo "allreduce_gpu_bench exit: $?" >>"$out/allreduce_gpu_bench.txt"
cat "$out/allreduce_gpu_bench.txt"

echo
echo "=== device summary ==="
printf '%-28s %s\n' "gpu" "$(head -1 "$out/gpu.txt" 2>/dev/null)"
printf '%-28s %s\n' "gpu tests" "$(grep -E 'tests passed|tests failed' "$out/gpu-tests.log" | tail -1)"
giftd_summary=$(grep -E '^\[ +(PASSED|FAILED|SKIPPED) +\] [0-9]+ tests?' "$out/giftd-gpu-test.log" | tr -s ' ' | paste -sd ' ' -)
grep -q 'NCCL refused two ranks' "$out/giftd-gpu-test.log" && giftd_summary="$giftd_summary (one rank: NCCL refused two on one GPU)"
printf '%-28s %s\n' "giftd gpu test" "exit $giftd_rc: ${giftd_summary:-no result, see $out/giftd-gpu-test.log}"
/usr/bin/python3 - "$out/kernels_gpu_bench.json" <<'PY' || true
import json, sys
try:
    runs = json.load(open(sys.argv[1]))["benchmarks"]
except Exception as e:
    print("no benchmark json:", e); sys.exit(0)
for r in runs:
    gbs = r.get("bytes_per_second", 0) / 1e9
    extra = {k: v for k, v in r.items() if k.startswith("ratio")}
    print(f"{r['name']:<44} {r.get('real_time', 0):10.1f} {r.get('time_unit','')}"
          f"  {gbs:8.1f} GB/s  " + " ".join(f"{k}={v:.3f}" for k, v in extra.items()))
PY
printf '%-28s %s\n' "giftd step time" "$(grep -E '^p99 ratio' "$out/daemon_bench.txt" || echo 'no result')"
echo "--- allreduce_gpu_bench (ratios vs fp32) ---"
grep -E '^(fp8|fp32|bf16|nccl-fp8|W =|NCCL)' "$out/allreduce_gpu_bench.txt" || true
echo "total: $(( $(date +%s) - start )) s"
[ "$gpu_rc" = 0 ] && exit "$giftd_rc"
exit $gpu_rc
