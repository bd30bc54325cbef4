#!/usr/bin/env bash
# The dynamic symbol table of libgift.so holds the public API and nothing
# else (include/gift/; client/api/libgift.map):
#   * every defined symbol is a C ABI function gift_* or a C++ symbol of
#     namespace gift (functions, typeinfo, vtables), or the version node;
#   * none is of abseil, Gloo, gRPC, protobuf, Eigen, the C++ standard
#     library, or of gift's internal namespaces (gift::client, gift::kernels,
#     ...);
#   * every function gift/c_api.h declares is exported.
#
#   tests/api/check_symbols.sh LIBGIFT_SO C_API_HEADER
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 LIBGIFT_SO C_API_HEADER" >&2
  exit 2
fi
lib=$1
header=$2
[[ -f $lib ]] || { echo "FAIL: no library $lib" >&2; exit 1; }
[[ -f $header ]] || { echo "FAIL: no header $header" >&2; exit 1; }

# "TYPE NAME" per defined dynamic symbol; version suffixes (@@GIFT_0) cut.
mapfile -t raw < <(nm -D --defined-only "$lib" | awk '{print $(NF-1), $NF}')
mapfile -t names < <(printf '%s\n' "${raw[@]}" | awk '{print $2}' |
  sed 's/@.*//' | sort -u)
mapfile -t demangled < <(printf '%s\n' "${names[@]}" | c++filt)
if [[ ${#names[@]} -eq 0 ]]; then
  echo "FAIL: $lib exports no symbols" >&2
  exit 1
fi

fail=0
for i in "${!names[@]}"; do
  n=${names[$i]}
  d=${demangled[$i]}
  case $n in
    GIFT_[0-9]*) continue ;;       # the version node
    gift_*) ;;                     # the C ABI
    _ZN4gift* | _ZNK4gift* | _ZTIN4gift* | _ZTSN4gift* | _ZTVN4gift*) ;;
    *)
      echo "FAIL: exported symbol outside the public API: $d" >&2
      fail=1
      continue
      ;;
  esac
  if [[ $d =~ (absl::|gloo::|grpc|google::|protobuf|Eigen::|upb_) ]] ||
    [[ $d =~ gift::(client|kernels|shm|daemon|linalg|common|internal|api|metrics|proto|v1|gpu|fidelity|giftctl|tools|testing)(::|$) ]]; then
    # A public function may take a std type, never an internal one.
    echo "FAIL: exported symbol names an internal or third-party type: $d" >&2
    fail=1
  fi
done

# Every function of the C ABI header is defined and exported.
mapfile -t declared < <(grep -oE '\bgift_[a-z0-9_]+\(' "$header" |
  tr -d '(' | sort -u)
if [[ ${#declared[@]} -lt 10 ]]; then
  echo "FAIL: found only ${#declared[@]} functions in $header" >&2
  exit 1
fi
declare -A exported=()
for n in "${names[@]}"; do
  exported[$n]=1
done
for f in "${declared[@]}"; do
  if [[ -z ${exported[$f]:-} ]]; then
    echo "FAIL: $f is declared in $header but not exported" >&2
    fail=1
  fi
done

if [[ $fail -ne 0 ]]; then
  exit 1
fi
c=$(printf '%s\n' "${names[@]}" | grep -c '^gift_' || true)
total=$(printf '%s\n' "${names[@]}" | grep -vc '^GIFT_[0-9]' || true)
echo "OK: ${total} exported symbols (${c} C functions, all" \
  "${#declared[@]} of $(basename "$header"); $((total - c)) C++), none internal"
