#!/usr/bin/env bash
# Replays every input in the given folders through a libFuzzer binary, once
# each, without fuzzing (libFuzzer with file arguments): the seeds must
# pass, and so must every committed regression input (a crash once found).
# Usage: fuzz/replay.sh FUZZER DIR...
set -uo pipefail
bin=$1
shift
files=()
for dir in "$@"; do
  [[ -d "$dir" ]] || continue
  while IFS= read -r -d '' f; do files+=("$f"); done \
    < <(find "$dir" -maxdepth 1 -type f ! -name 'README*' ! -name '.*' -print0 | sort -z)
done
if [[ ${#files[@]} -eq 0 ]]; then
  echo "replay: no inputs for $(basename "$bin")"
  exit 0
fi
echo "replay: ${#files[@]} input(s) through $(basename "$bin")"
exec "$bin" -rss_limit_mb=2048 -timeout=10 "${files[@]}"
