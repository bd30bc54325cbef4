#!/usr/bin/env bash
# make sanitize: the CPU code under the sanitizers, in three parts, in two
# build folders (asan and fuzz share one, see below; -O1 -g1, the tests'
# own files -O0 and under ASan uninstrumented, cmake/Sanitizers.cmake;
# GIFT_CUDA=OFF, no benchmarks; only the targets the part runs are built):
#   asan  ASan + UBSan (clang, build-asan): the unit tests of common/,
#         client/, shm/, daemon/ and tools/ (its file readers and giftctl)
#         and the CPU integration tests (multi-process
#         allreduce, giftd end to end, Peer cluster, netns). Not the
#         gift-fidelity numerics, the kernels' and linalg's own tests, the
#         exhaustive FP8 tests (hours at -O1) nor the python tests: the gift
#         extension would need the ASan runtime LD_PRELOADed into python,
#         and torch's own leaks and allocator would drown the reports.
#   tsan  TSan (GCC, build-tsan): the tests of daemon/, client/ and shm/
#         that run threads. abseil is a system library built without TSan,
#         so TSan would not see absl::Mutex as a lock and would report every
#         access it guards; this part therefore rebuilds abseil's
#         synchronization library from Debian's own source package (same
#         version, same headers, apt-get source into build-tsan/) with TSan,
#         and the tests load it in place of the system one
#         (LD_LIBRARY_PATH). What stays uninstrumented (gRPC, protobuf,
#         gloo) has narrow suppressions in scripts/tsan.supp.
#   fuzz  scripts/fuzz.sh in build-asan: the committed seeds and
#         regression inputs of every fuzz target replayed, then each target
#         fuzzed for FUZZ_SECONDS (default here 30; make fuzz alone: 60).
# asan and fuzz share one build: build-asan is the fuzz build of
# cmake/Sanitizers.cmake (clang, ASan + UBSan + libFuzzer's coverage
# instrumentation, the tests and the fuzz targets in one tree), so the
# libraries are compiled once for both parts. Built apart (GCC ASan, then a
# clang fuzz build) they took 881 s + 245 s; together 608 s.
# Each part prints one closing line; the last line is
#   sanitize: N passed, N failed
# (the ctest counts of the parts, skipped tests not counted; each fuzzer
# run counts as one). Exits non-zero when any part failed.
# Usage: scripts/sanitize.sh [asan] [tsan] [fuzz]   (default: all three)
# Environment: JOBS (build jobs, default nproc), FUZZ_SECONDS.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
JOBS=${JOBS:-$(nproc)}
export FUZZ_SECONDS=${FUZZ_SECONDS:-30}

# ---- what each part builds and runs ------------------------------------
ASAN_TARGETS=(
  # common/: host:port parsing, the bounded reader of untrusted files
  net_test file_test
  # client/ and tests/multiprocess
  store_test transport_factory_test gloo_transport_test
  net_endpoint_test gloo_store_adapter_test epoch_plan_test chunking_test
  agreement_test gift_transform_test allreduce_engine_test
  bucketed_step_test giftd_connection_test multiprocess_harness_test
  fp4_allreduce_test
  gloo_multiprocess_test quantized_allreduce_multiprocess_test
  transport_setup_test
  # shm/
  shm_region_test shm_protocol_test shm_rank_counters_test
  shm_prefix_lock_test
  # daemon/ and daemon/metrics/
  selector_test factor_builder_test config_test grpc_server_test
  peer_link_test peer_link_sender_test window_owners_test kv_store_test
  daemon_test daemon_shm_test daemon_control_test factor_check_test
  daemon_limits_test
  daemon_peer_test metrics_http_test metrics_process_test
  session_table_test window_collector_test factor_store_test planner_test
  series_test sketch_schedule_test beta_grid_test etcd_client_test
  election_test
  # libgift.so's public API: the C ABI's bad-input handling above all
  gift_c_api_test gift_c_api_allreduce_test gift_c_api_attachment_test
  gift_cpp_api_test
  # tools/ and tools/giftctl: the readers of untrusted files and giftctl.
  # Not the gift-fidelity numerics (tools/fidelity/: offline Eigen code whose
  # files take a third of this build under ASan+UBSan); its .npy reader is
  # npy_test here and fuzz_npy in the fuzz part.
  npy_test giftctl_format_test giftctl_cli_test
  giftctl_commands_test giftctl_health_test
  # integration: giftd end to end, the Peer cluster, ranks in namespaces
  giftd_integration_test peer_integration_test netns_allreduce_test
  peer_election_test
)
# Tests of those targets left out of the ASan run, as ctest regexes: the
# fault scenarios that are minutes of waiting on timeouts under ASan (each
# 40-70 s there; make test runs them all uninstrumented), and the Peer
# harness's own check. One election with a leader's death, the partition and
# the six-rank cluster stay.
ASAN_EXCLUDE=(
  '^PeerElectionTest\.(APausedLeaderResumesAsAFollower|ALeaderCutOffFromEtcdStepsDownAndItsPlansAreRefused|EtcdDownKeepsTrainingAndRecovers)$'
  '^PeerIntegrationTest\.(ARestartedLeaderIsRebuiltFromTheFollowers|AKilledFollowerDaemonSplitsNobody|HarnessRunsSixRanksOnThreeNodes)$'
)
TSAN_TARGETS=(
  store_test gloo_transport_test gloo_store_adapter_test agreement_test
  allreduce_engine_test bucketed_step_test giftd_connection_test
  shm_protocol_test
  kv_store_test daemon_test daemon_shm_test daemon_peer_test
  peer_link_test peer_link_sender_test grpc_server_test
  session_table_test window_collector_test factor_store_test planner_test
  # Not metrics_http_test: /metrics is prometheus-cpp's Exposer over
  # civetweb, Debian's builds without TSan (core, pull, civetweb-cpp); their
  # locks and the endpoints they hand to civetweb's threads are invisible
  # to TSan, which then reports races and double locks inside them. giftd's
  # own side of it (Start, the stop) runs on one thread. The daemon tests
  # above still update prometheus-cpp's families from several threads.
)
# Tests of those targets left out of the TSan run, as ctest regexes (each
# with the reason).
TSAN_EXCLUDE=(
  # The factor slots are a seqlock (shm/seqlock.h): the reader copies the
  # slot with plain loads while the writer may be rewriting it and throws a
  # torn copy away. By design, but a data race in C++'s memory model, so
  # TSan reports it every time (shm/protocol.cc PublishFactor / CopySlot).
  '^ProtocolTest\.ConcurrentReaderNeverSeesATornFactor$'
)

log() { printf '%s\n' "$*"; }

# A DIR configured for another sanitizer (an older build-asan: GCC,
# address) is made anew.
configure() {  # DIR SANITIZER [cmake args...]
  local dir=$1 san=$2
  shift 2
  if [[ -f "$dir/CMakeCache.txt" ]]; then
    grep -qx "GIFT_SANITIZE:STRING=$san" "$dir/CMakeCache.txt" && return 0
    rm -rf "$dir"
  fi
  mkdir -p "$dir"
  cmake -S . -B "$dir" -DGIFT_CUDA=OFF -DGIFT_SANITIZE="$san" \
    -DGIFT_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DPython3_EXECUTABLE=/usr/bin/python3 "$@" >"$dir/sanitize-configure.log" 2>&1 ||
    { cat "$dir/sanitize-configure.log"; return 1; }
}

# Writes a ctest -I file selecting the tests whose command runs one of the
# given targets' executables (a gtest binary, or a tool under its
# python driver), minus labels gpu, python and exhaustive and the names
# matching EXCLUDE (a regex, may be empty). Tests of unbuilt targets (their
# _NOT_BUILT placeholders) never match.
select_tests() {  # BUILD_DIR OUT EXCLUDE TARGET...
  local dir=$1 out=$2 exclude=$3
  shift 3
  ctest --test-dir "$dir" --show-only=json-v1 >"$out.json" 2>"$out.err" ||
    { cat "$out.err"; return 1; }
  /usr/bin/python3 - "$out.json" "$out" "$exclude" "$@" <<'EOF'
import json, os, re, sys
info, out, exclude, targets = sys.argv[1], sys.argv[2], sys.argv[3], set(sys.argv[4:])
tests = json.load(open(info))["tests"]
picked = []
for number, t in enumerate(tests, start=1):
    labels = set()
    for p in t.get("properties", []):
        if p["name"] == "LABELS":
            labels.update(p["value"])
    if labels & {"gpu", "python", "exhaustive"}:
        continue
    if exclude and re.search(exclude, t["name"]):
        continue
    if any(os.path.basename(c) in targets and os.path.isfile(c)
           for c in t.get("command", [])):
        picked.append(number)
if not picked:
    sys.exit("select_tests: no test matches")
with open(out, "w") as f:
    f.write("0,0,0," + ",".join(map(str, picked)) + "\n")
print(f"select_tests: {len(picked)} of {len(tests)} tests")
EOF
}

# Runs the selected tests through scripts/run-tests.sh (the project's one
# counting of ctest output) and leaves its closing line in $last_counts.
run_selected() {  # BUILD_DIR SELECTION
  local out
  out=$(mktemp)
  "$root/scripts/run-tests.sh" "$1" -I "$2" 2>&1 | tee "$out"
  local rc=${PIPESTATUS[0]}
  last_counts=$(grep -E '^tests: [0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' "$out" | tail -1)
  rm -f "$out"
  return "$rc"
}

total_passed=0
total_failed=0
summaries=()
overall=0

account() {  # PART RC SECONDS_BUILD SECONDS_RUN
  local part=$1 rc=$2 tb=$3 tr=$4 p=0 f=0 s=0
  if [[ "$last_counts" =~ ^tests:\ ([0-9]+)\ passed,\ ([0-9]+)\ failed,\ ([0-9]+)\ skipped$ ]]; then
    p=${BASH_REMATCH[1]} f=${BASH_REMATCH[2]} s=${BASH_REMATCH[3]}
  elif [[ "$last_counts" =~ ^fuzz:\ ([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
    p=${BASH_REMATCH[1]} f=${BASH_REMATCH[2]}
  fi
  if [[ "$rc" -ne 0 && "$f" -eq 0 ]]; then f=1; fi  # a build or setup failure
  total_passed=$((total_passed + p))
  total_failed=$((total_failed + f))
  [[ "$rc" -ne 0 ]] && overall=1
  summaries+=("sanitize $part: $p passed, $f failed, $s skipped (build ${tb} s, run ${tr} s)")
  log "${summaries[-1]}"
}

# The common part of asan and tsan, after their configure and setup: builds
# TARGETs in DIR (unless READY, their status, is non-zero), runs their tests
# minus EXCLUDE with the part's environment (the array named ENV, VAR=VALUE
# each: set for the tests only) and closes with the part's line (account;
# build time counted from T0).
build_and_test() {  # PART DIR T0 READY EXCLUDE ENV TARGET...
  local part=$1 dir=$2 t0=$3 ready=$4 exclude=$5 t1 rc=0 v
  local -n part_env=$6
  shift 6
  if [[ "$ready" -eq 0 ]] &&
     cmake --build "$dir" -j "$JOBS" --target "$@" >"$dir/sanitize-build.log" 2>&1; then
    t1=$(date +%s)
    export "${part_env[@]}"
    select_tests "$dir" "$root/$dir/sanitize-tests.txt" "$exclude" "$@" &&
      run_selected "$dir" "$root/$dir/sanitize-tests.txt" || rc=1
    for v in "${part_env[@]}"; do unset "${v%%=*}"; done
  else
    tail -40 "$dir/sanitize-build.log" 2>/dev/null
    log "sanitize $part: the build failed ($dir/sanitize-build.log)"
    rc=1
    t1=$(date +%s)
  fi
  account "$part" "$rc" $((t1 - t0)) $(($(date +%s) - t1))
}

# ---- asan ---------------------------------------------------------------
# shellcheck disable=SC2034  # read by build_and_test (nameref)
ASAN_ENV=(
  "ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:halt_on_error=1:check_initialization_order=1"
  "LSAN_OPTIONS=suppressions=$root/scripts/lsan.supp:print_suppressions=0"
  "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1"
)

# build-asan: clang, the fuzz build with the tests (see the top).
configure_asan() {
  local cc
  for cc in clang-14 clang++-14; do
    command -v "$cc" >/dev/null ||
      { log "sanitize: $cc missing (scripts/install-deps.sh installs clang-14 and libclang-rt-14-dev)"; return 1; }
  done
  CC=clang-14 CXX=clang++-14 configure build-asan fuzz -DGIFT_BUILD_FUZZ=ON
}

part_asan() {
  local t0 ready=0 exclude
  t0=$(date +%s)
  last_counts=""
  log "== sanitize asan: ASan + UBSan build in build-asan (${#ASAN_TARGETS[@]} targets)"
  configure_asan || ready=1
  exclude=$(IFS='|'; echo "${ASAN_EXCLUDE[*]}")
  build_and_test asan build-asan "$t0" "$ready" "$exclude" ASAN_ENV "${ASAN_TARGETS[@]}"
}

# ---- tsan ---------------------------------------------------------------
# abseil's locks and what they are built on, rebuilt with TSan from Debian's
# source package of the installed abseil, against the installed headers (so
# the ABI is the system one's): synchronization (Mutex, CondVar,
# Notification), base (SpinLock, the thread identity), spinlock_wait and
# malloc_internal (LowLevelAlloc, whose arena lock hands thread identities
# between threads). Each lands in build-tsan/absl-tsan/ under the system
# library's soname; LD_LIBRARY_PATH makes every test process load them.
TSAN_ABSL_LIBS=(
  "synchronization:synchronization/barrier.cc synchronization/blocking_counter.cc synchronization/mutex.cc synchronization/notification.cc synchronization/internal/create_thread_identity.cc synchronization/internal/per_thread_sem.cc synchronization/internal/waiter.cc"
  "base:base/internal/cycleclock.cc base/internal/spinlock.cc base/internal/sysinfo.cc base/internal/thread_identity.cc base/internal/unscaledcycleclock.cc"
  "spinlock_wait:base/internal/spinlock_wait.cc"
  "malloc_internal:base/internal/low_level_alloc.cc"
  # absl::Now() takes a SpinLock inlined into libabsl_time: uninstrumented,
  # its lock skips TSan's annotations while the rebuilt base's slow path
  # makes them (a TSan CHECK failure in ThreadIgnoreSyncEnd, seen once in
  # three runs of a Gloo test).
  "time:time/civil_time.cc time/clock.cc time/duration.cc time/format.cc time/time.cc"
)

tsan_absl_fetch() {  # SRC_DIR VERSION: unpacks Debian's abseil source there
  local src=$1 version=$2 line
  mkdir -p "$src/lists/partial" "$src/archives/partial"
  # A private apt configuration with the image's Debian mirrors as deb-src:
  # the machine's own apt sources are not touched.
  : >"$src/sources.list"
  while read -r line; do
    echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $line" >>"$src/sources.list"
  done < <(apt-get indextargets --format '$(REPO_URI) $(RELEASE) $(COMPONENT)' \
             'Identifier: Packages' 2>/dev/null | sort -u)
  if [[ ! -s "$src/sources.list" ]]; then
    cat >"$src/sources.list" <<'LIST'
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian-security bookworm-security main
LIST
  fi
  local apt=(apt-get -qq -o "Dir::Etc::SourceList=$src/sources.list"
             -o Dir::Etc::SourceParts=/dev/null
             -o "Dir::State::Lists=$src/lists"
             -o "Dir::Cache::Archives=$src/archives"
             -o APT::Sandbox::User=root)
  if ! { "${apt[@]}" update && (cd "$src" && "${apt[@]}" source --download-only "abseil=$version"); } \
       >"$src/apt.log" 2>&1; then
    cat "$src/apt.log"
    log "tsan: could not fetch Debian's abseil $version source"
    return 1
  fi
  tar -C "$src" -xf "$(ls "$src"/abseil_*.orig.tar.* | head -1)"
}

tsan_absl() {
  local dest="$root/build-tsan/absl-tsan" src="$root/build-tsan/absl-src"
  local entry name files syslib soname version top missing libs
  # Rebuilt when the list changes (the marker holds it).
  if [[ -f "$dest/done" && "$(cat "$dest/done")" == "${TSAN_ABSL_LIBS[*]}" ]]; then
    export LD_LIBRARY_PATH="$dest"
    return 0
  fi
  syslib=$(realpath "$(gcc -print-file-name=libabsl_synchronization.so)")
  version=$(dpkg-query -W -f='${source:Version}' "$(dpkg -S "$syslib" | cut -d: -f1)")
  rm -rf "$dest" "$src"
  mkdir -p "$dest"
  tsan_absl_fetch "$src" "$version" || return 1
  top=$(find "$src" -maxdepth 2 -type d -name absl | head -1)
  for entry in "${TSAN_ABSL_LIBS[@]}"; do
    name=${entry%%:*}
    files=()
    for f in ${entry#*:}; do files+=("$top/$f"); done
    syslib=$(realpath "$(gcc -print-file-name=libabsl_$name.so)")
    soname=$(objdump -p "$syslib" | awk '/SONAME/ {print $2}')
    libs=$(objdump -p "$syslib" | awk '/NEEDED/ && /absl/ {sub(/^lib/, "", $2); sub(/\.so.*/, "", $2); printf "-l%s ", $2}')
    # The installed headers, not the source tree's (no -I): Debian's
    # options.h (inline namespace, std types), so the system ABI.
    # shellcheck disable=SC2086
    g++ -std=c++17 -fsanitize=thread -O1 -g1 -fPIC -shared \
      -Wl,-soname,"$soname" -o "$dest/$soname" "${files[@]}" $libs \
      >>"$dest/build.log" 2>&1 || { cat "$dest/build.log"; return 1; }
    # Every symbol the system library exports must be there.
    missing=$(comm -23 <(nm -D --defined-only "$syslib" | awk '{print $3}' | sort -u) \
                       <(nm -D --defined-only "$dest/$soname" | awk '{print $3}' | sort -u))
    if [[ -n "$missing" ]]; then
      log "tsan: the rebuilt $soname lacks: $missing"
      return 1
    fi
  done
  echo "${TSAN_ABSL_LIBS[*]}" >"$dest/done"
  log "tsan: abseil $version (${#TSAN_ABSL_LIBS[@]} libraries) rebuilt with TSan in build-tsan/absl-tsan"
  export LD_LIBRARY_PATH="$dest"
}

# shellcheck disable=SC2034  # read by build_and_test (nameref)
TSAN_ENV=(
  "TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:report_signal_unsafe=0:suppressions=$root/scripts/tsan.supp"
  # OpenBLAS (LAPACK of the factor builder) would run its own
  # uninstrumented thread pool on our matrices: one thread, in the caller.
  "OPENBLAS_NUM_THREADS=1"
)

part_tsan() {
  local t0 ready=0 exclude
  t0=$(date +%s)
  last_counts=""
  log "== sanitize tsan: TSan build in build-tsan (${#TSAN_TARGETS[@]} targets)"
  mkdir -p build-tsan
  { configure build-tsan thread && tsan_absl; } || ready=1
  exclude=$(IFS='|'; echo "${TSAN_EXCLUDE[*]}")
  build_and_test tsan build-tsan "$t0" "$ready" "$exclude" TSAN_ENV "${TSAN_TARGETS[@]}"
  unset LD_LIBRARY_PATH  # tsan_absl's
}

# ---- fuzz ---------------------------------------------------------------
part_fuzz() {
  local t0 t1 rc=0 out
  t0=$(date +%s)
  out=$(mktemp)
  last_counts=""
  configure_asan || { rm -f "$out"; account fuzz 1 0 0; return; }
  JOBS=$JOBS FUZZ_BUILD_DIR=build-asan "$root/scripts/fuzz.sh" 2>&1 | tee "$out"
  rc=${PIPESTATUS[0]}
  last_counts=$(grep -E '^fuzz: [0-9]+ passed, [0-9]+ failed$' "$out" | tail -1)
  local tb
  tb=$(sed -n 's/^fuzz: build took \([0-9]*\) s$/\1/p' "$out" | tail -1)
  rm -f "$out"
  t1=$(date +%s)
  tb=${tb:-0}
  account fuzz "$rc" "$tb" $((t1 - t0 - tb))
}

parts=("$@")
[[ ${#parts[@]} -eq 0 ]] && parts=(asan tsan fuzz)
for p in "${parts[@]}"; do
  case "$p" in
    asan) part_asan ;;
    tsan) part_tsan ;;
    fuzz) part_fuzz ;;
    *) log "sanitize: unknown part '$p' (asan, tsan, fuzz)"; exit 2 ;;
  esac
done
log ""
for s in "${summaries[@]}"; do log "$s"; done
log "sanitize: ${total_passed} passed, ${total_failed} failed"
exit "$overall"
