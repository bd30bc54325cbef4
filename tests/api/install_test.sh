#!/usr/bin/env bash
# `cmake --install` of a build, used the way a trainer outside this
# repository would use it:
#   1. install into a staging prefix, then move the tree elsewhere (the
#      CMake package and gift.pc must be relocatable);
#   2. the tree holds libgift.so, include/gift/ (exactly the public headers,
#      each including only standard headers and each other, each compiling
#      on its own: C++17, and c_api.h / export.h as C11), giftd, giftctl,
#      the CMake package and gift.pc; the library exports only the public
#      API (check_symbols.sh);
#   3. examples/c/allreduce.c compiled with plain `cc -std=c11 -Wall
#      -Werror` and `pkg-config --cflags --libs gift`, linked against the
#      installed library (not the build tree), run as 2 processes: both
#      must print OK and exit 0;
#   4. tests/api/consumer (C++17) configured with find_package(gift) and
#      run.
#
#   tests/api/install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 BUILD_DIR SOURCE_DIR" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gift_install_test.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do
    kill "$p" 2>/dev/null || true
  done
  rm -rf "$tmp"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
step() { echo "== $*"; }

step "cmake --install $build --prefix $tmp/stage, moved to $tmp/prefix"
cmake --install "$build" --prefix "$tmp/stage" >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log" >&2; fail "cmake --install failed"; }
mv "$tmp/stage" "$tmp/prefix"
prefix=$tmp/prefix

step "the installed tree"
pc=$(find "$prefix" -name gift.pc -path '*/pkgconfig/*' | head -n 1)
[[ -n $pc ]] || fail "no gift.pc under $prefix"
libdir=$(dirname "$(dirname "$pc")")
for f in "$libdir/libgift.so" "$libdir/cmake/gift/giftConfig.cmake" \
  "$libdir/cmake/gift/giftConfigVersion.cmake" \
  "$libdir/cmake/gift/giftTargets.cmake" "$prefix/include/gift/c_api.h"; do
  [[ -e $f ]] || fail "missing $f"
done
for f in "$prefix/bin/giftd" "$prefix/bin/giftctl"; do
  [[ -x $f ]] || fail "missing executable $f"
done
soname=$(readelf -d "$libdir/libgift.so" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
[[ -n $soname && -e $libdir/$soname ]] || fail "no SONAME link ($soname)"

# include/gift/ holds exactly the public headers of the source tree.
diff <(cd "$src/include/gift" && ls) <(cd "$prefix/include/gift" && ls) ||
  fail "installed include/gift differs from the source's include/gift"
for h in "$prefix"/include/gift/*.h; do
  incs=$(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*//p' "$h" |
    awk '{print $1}')
  while read -r inc; do
    case $inc in
      '') ;;
      '<'*'>' | '"gift/'*'"') ;;
      *) fail "$(basename "$h") includes $inc (only <std> or \"gift/...\")" ;;
    esac
  done <<<"$incs"
  if grep -qiE 'absl|cuda|nccl|gloo|grpc|client/' <<<"$incs"; then
    fail "$(basename "$h") includes abseil, CUDA or internal headers"
  fi
  # Included twice (the guard), first, into a translation unit of its own.
  printf '#include "gift/%s"\n#include "gift/%s"\nint gift_tu_;\n' \
    "$(basename "$h")" "$(basename "$h")" >"$tmp/tu.cc"
  c++ -std=c++17 -fsyntax-only -Wall -Wextra -Wpedantic -Werror \
    -I"$prefix/include" "$tmp/tu.cc" ||
    fail "$(basename "$h") does not compile on its own as C++17"
done
for h in c_api.h export.h; do
  printf '#include "gift/%s"\n#include "gift/%s"\nint gift_tu_;\n' \
    "$h" "$h" >"$tmp/tu.c"
  cc -std=c11 -fsyntax-only -Wall -Wextra -Wpedantic -Werror \
    -I"$prefix/include" "$tmp/tu.c" ||
    fail "$h does not compile on its own as C11"
done

bash "$src/tests/api/check_symbols.sh" "$libdir/libgift.so" \
  "$prefix/include/gift/c_api.h"

step "pkg-config --cflags --libs gift"
export PKG_CONFIG_PATH=$libdir/pkgconfig
flags=$(pkg-config --cflags --libs gift) || fail "pkg-config failed"
echo "$flags"
# The relocatable gift.pc names the prefix through its own folder.
inc_dir=$(pkg-config --variable=includedir gift)
lib_dir=$(pkg-config --variable=libdir gift)
[[ $(realpath "$inc_dir") == "$(realpath "$prefix/include")" &&
  $(realpath "$lib_dir") == "$(realpath "$libdir")" &&
  $flags == *"-I$inc_dir"* && $flags == *"-L$lib_dir"* &&
  $flags == *"-lgift"* ]] || fail "pkg-config flags do not name $prefix"
[[ $(pkg-config --modversion gift) =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] ||
  fail "pkg-config --modversion"

step "cc -std=c11 -Wall -Werror examples/c/allreduce.c"
read -r -a pc_cflags < <(pkg-config --cflags gift)
read -r -a pc_libs < <(pkg-config --libs gift)
cc -std=c11 -Wall -Wextra -Wpedantic -Werror "${pc_cflags[@]}" \
  "$src/examples/c/allreduce.c" "${pc_libs[@]}" -Wl,-rpath,"$libdir" \
  -o "$tmp/allreduce" || fail "the C example does not build"
ldd "$tmp/allreduce" | grep -F "$libdir/libgift.so" >/dev/null ||
  fail "the example does not load the installed libgift.so: $(ldd "$tmp/allreduce")"

step "examples/c/allreduce on 2 processes"
mkdir "$tmp/store"
for r in 0 1; do
  timeout 120 "$tmp/allreduce" "$r" 2 "$tmp/store" >"$tmp/rank$r.log" 2>&1 &
  pids+=($!)
done
status=0
for i in 0 1; do
  if ! wait "${pids[$i]}"; then
    status=1
  fi
done
pids=()
cat "$tmp/rank0.log" "$tmp/rank1.log"
[[ $status -eq 0 ]] || fail "a rank of the C example failed"
for r in 0 1; do
  grep -qx "rank $r: OK (libgift [0-9.]*)" "$tmp/rank$r.log" ||
    fail "rank $r did not report OK"
  [[ $(grep -c "identical on every rank" "$tmp/rank$r.log") -eq 3 ]] ||
    fail "rank $r did not run 3 steps"
done

step "find_package(gift) consumer (C++17)"
cmake -S "$src/tests/api/consumer" -B "$tmp/consumer" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
  >"$tmp/consumer.log" 2>&1 ||
  { cat "$tmp/consumer.log" >&2; fail "the consumer does not configure"; }
cmake --build "$tmp/consumer" >>"$tmp/consumer.log" 2>&1 ||
  { cat "$tmp/consumer.log" >&2; fail "the consumer does not build"; }
grep -qF "gift_DIR:PATH=$prefix/" "$tmp/consumer/CMakeCache.txt" ||
  fail "find_package(gift) did not find the package under $prefix"
mkdir "$tmp/consumer_store"
timeout 120 "$tmp/consumer/consumer" "$tmp/consumer_store" ||
  fail "the consumer failed"

echo "install test: OK"
