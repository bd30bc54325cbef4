#!/bin/bash
# giftd's own CPU per training step (issue 28): one giftd at its defaults
# (plus any giftd flags given) beside the demo's job (examples/
# train_tiny_llama.py, 4 local ranks, gift mode), measured from giftd's
# utime + stime in the steady state, from the 20th logged step to the end.
#
#   bench/daemon/giftd_cpu.sh BUILD [STEPS [FORMAT]] [-- GIFTD_FLAGS...]
#
# Prints one line: CPU seconds, wall seconds, steps, ms per step, % of one
# core. Run it on an otherwise idle machine (the ranks' step time sets how
# many polls fall on a step).
set -euo pipefail
BUILD=${1:?usage: giftd_cpu.sh BUILD [STEPS [FORMAT]] [-- GIFTD_FLAGS...]}
shift
STEPS=200 FORMAT=nvfp4
if [[ $# -gt 0 && $1 != -- ]]; then STEPS=$1; shift; fi
if [[ $# -gt 0 && $1 != -- ]]; then FORMAT=$1; shift; fi
[[ $# -gt 0 && $1 == -- ]] && shift
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
TAG="cpu$$"
G="" T=""
cleanup() {
  [[ -n $T ]] && kill "$T" 2>/dev/null || true
  [[ -n $G ]] && kill "$G" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT
"$BUILD/daemon/giftd" --agent-socket="$TMP/a.sock" \
  --control-address=127.0.0.1:0 --metrics-address= --node="$TAG" \
  --shm-prefix="/gift-$TAG" "$@" > "$TMP/giftd.log" 2>&1 &
G=$!
for _ in $(seq 600); do [[ -S $TMP/a.sock ]] && break; sleep 0.05; done
[[ -S $TMP/a.sock ]] || { cat "$TMP/giftd.log"; exit 1; }
OMP_NUM_THREADS=1 PYTHONPATH="$BUILD/python" /usr/bin/python3 \
  "$ROOT/examples/train_tiny_llama.py" --mode gift --nproc 4 \
  --steps "$STEPS" --log "$TMP/log.jsonl" --summary "$TMP/sum.json" \
  --format "$FORMAT" --agent-socket "$TMP/a.sock" --job-id "$TAG" \
  > "$TMP/train.out" 2>&1 &
T=$!
logged() { if [[ -f $TMP/log.jsonl ]]; then wc -l < "$TMP/log.jsonl"; else echo 0; fi; }
cpu() { awk '{print $14 + $15}' "/proc/$G/stat"; }  # clock ticks
while [[ $(logged) -lt 20 ]]; do
  kill -0 "$T" 2>/dev/null || { tail "$TMP/train.out"; exit 1; }
  sleep 0.05
done
s0=$(logged) t0=$(date +%s.%N) c0=$(cpu)
wait "$T" || { tail "$TMP/train.out"; T=""; exit 1; }
T=""
t1=$(date +%s.%N) c1=$(cpu)
python3 - "$c0" "$c1" "$t0" "$t1" "$s0" "$STEPS" "$(getconf CLK_TCK)" <<'PY'
import sys
c0, c1, t0, t1 = map(float, sys.argv[1:5])
s0, steps, hz = int(sys.argv[5]), int(sys.argv[6]), float(sys.argv[7])
cpu, wall, n = (c1 - c0) / hz, t1 - t0, steps - s0
print(f"giftd: {cpu:.2f} s CPU over {wall:.1f} s, {n} steps: "
      f"{1000 * cpu / n:.2f} ms per step, {100 * cpu / wall:.2f}% of one core")
PY
