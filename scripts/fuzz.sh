#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ (clang-14, build-fuzz:
# -fsanitize=fuzzer-no-link,address,undefined on the project code,
# -fsanitize=fuzzer on the targets), replays every committed seed and
# regression input through them (ctest -L fuzz), then fuzzes each target
# for FUZZ_SECONDS on a copy of its corpus (fuzz/corpus/<target>/ and
# fuzz/regressions/<target>/), JOBS targets at a time.
# A crash, a hang (-timeout=10 per input), a leak or an out-of-memory
# (-rss_limit_mb=2048) fails the run; the input is copied to
# fuzz/regressions/<target>/, where the replay finds it from then on:
# commit it with the fix (or, for a defect in code you do not own, report
# it and commit it beside a commented guard in the target).
# Closes with one line: fuzz: N passed, N failed (replayed ctest cases and
# fuzzer runs).
# Usage: scripts/fuzz.sh [TARGET...]  (npy config shm_reader requests fp4_wire)
# Environment: FUZZ_SECONDS (default 60), JOBS (default nproc),
#   FUZZ_BUILD_DIR (default build-fuzz).
# One target by hand: build-fuzz/fuzz/fuzz_npy -max_total_time=60 DIR
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
JOBS=${JOBS:-$(nproc)}
build=${FUZZ_BUILD_DIR:-build-fuzz}
targets=("$@")
[[ ${#targets[@]} -eq 0 ]] && targets=(npy config shm_reader requests fp4_wire)

passed=0
failed=0
finish() {
  echo "fuzz: ${passed} passed, ${failed} failed"
  exit "$1"
}

for cc in clang-14 clang++-14; do
  command -v "$cc" >/dev/null ||
    { echo "fuzz: $cc missing (scripts/install-deps.sh installs clang-14 and libclang-rt-14-dev)"; failed=1; finish 1; }
done

# ---- build ----------------------------------------------------------------
t0=$(date +%s)
if [[ ! -f "$build/CMakeCache.txt" ]]; then
  mkdir -p "$build"
  CC=clang-14 CXX=clang++-14 cmake -S . -B "$build" -DGIFT_CUDA=OFF \
    -DGIFT_SANITIZE=fuzz -DGIFT_BUILD_FUZZ=ON -DGIFT_BUILD_TESTS=OFF \
    -DGIFT_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DPython3_EXECUTABLE=/usr/bin/python3 >"$build/sanitize-configure.log" 2>&1 ||
    { cat "$build/sanitize-configure.log"; failed=1; finish 1; }
fi
bins=()
for t in "${targets[@]}"; do bins+=("fuzz_$t"); done
if ! cmake --build "$build" -j "$JOBS" --target "${bins[@]}" >"$build/sanitize-build.log" 2>&1; then
  tail -40 "$build/sanitize-build.log"
  echo "fuzz: the build failed ($build/sanitize-build.log)"
  failed=1
  finish 1
fi
echo "fuzz: build took $(($(date +%s) - t0)) s"

# ---- replay the committed inputs (no fuzzing) ----------------------------
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
replay_re=$(IFS='|'; echo "^fuzz_(${targets[*]})_replay$")
out=$(mktemp)
"$root/scripts/run-tests.sh" "$build" -L fuzz -R "$replay_re" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
if [[ $(grep -E '^tests: ' "$out" | tail -1) =~ ^tests:\ ([0-9]+)\ passed,\ ([0-9]+)\ failed ]]; then
  passed=$((passed + BASH_REMATCH[1]))
  failed=$((failed + BASH_REMATCH[2]))
fi
rm -f "$out"
status=$rc

# ---- fuzz -------------------------------------------------------------------
# Shared memory a crashed target left (its names carry its pid).
clean_shm() {
  local f pid
  for f in /dev/shm/gift-fuzz* /dev/shm/.gift-fuzz*; do
    [[ -e "$f" ]] || continue
    pid=$(basename "$f" | sed -n 's/^\.\{0,1\}gift-fuzz[a-z]*\([0-9][0-9]*\).*/\1/p')
    [[ -n "$pid" ]] && ! kill -0 "$pid" 2>/dev/null && rm -f "$f"
  done
}

fuzz_one() {  # TARGET: leaves $work/result
  local t=$1 work="$build/fuzz-run/$t"
  rm -rf "$work"
  mkdir -p "$work/corpus" "$work/artifacts"
  cp fuzz/corpus/"$t"/* "$work/corpus/" 2>/dev/null
  cp fuzz/regressions/"$t"/* "$work/corpus/" 2>/dev/null
  rm -f "$work/corpus/README"*
  local t0 rc
  t0=$(date +%s)
  timeout --kill-after=30 $((FUZZ_SECONDS + 300)) \
    "$build/fuzz/fuzz_$t" -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=2048 \
    -timeout=10 -print_final_stats=1 -artifact_prefix="$work/artifacts/" \
    "$work/corpus" >"$work/log" 2>&1
  rc=$?
  echo "$rc $(($(date +%s) - t0))" >"$work/result"
}

running=0
for t in "${targets[@]}"; do
  fuzz_one "$t" &
  running=$((running + 1))
  if [[ $running -ge $JOBS ]]; then
    wait -n
    running=$((running - 1))
  fi
done
wait
clean_shm

for t in "${targets[@]}"; do
  work="$build/fuzz-run/$t"
  read -r rc secs <"$work/result"
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -1)
  new=$(sed -n 's/^stat::new_units_added: *//p' "$work/log" | tail -1)
  mapfile -t found < <(find "$work/artifacts" -type f | sort)
  if [[ "$rc" -eq 0 && ${#found[@]} -eq 0 ]]; then
    echo "fuzz $t: ${runs:-?} inputs in ${secs} s, ${new:-0} new coverage units; no crash, hang or leak"
    passed=$((passed + 1))
    continue
  fi
  failed=$((failed + 1))
  status=1
  grep -vE '^#|Uses: |^INFO: |NEW_FUNC|^\s*$' "$work/log" | tail -60
  mkdir -p "fuzz/regressions/$t"
  for a in "${found[@]}"; do
    cp "$a" "fuzz/regressions/$t/"
    echo "fuzz $t: input saved as fuzz/regressions/$t/$(basename "$a")"
  done
  [[ ${#found[@]} -eq 0 ]] && echo "fuzz $t: exit status $rc without an artifact (log: $work/log)"
  echo "fuzz $t: FAILED after ${runs:-?} inputs in ${secs} s"
done
finish "$status"
