#!/usr/bin/env bash
# Installs every Debian package the build, the tests and the demo need.
# Idempotent: packages already installed are not touched; apt-get runs only
# when something is missing. Usage: scripts/install-deps.sh [--check]
#   --check  exit 1 (and list them) when packages are missing; install nothing.
set -euo pipefail

PACKAGES=(
  build-essential cmake make git pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev
  libabsl-dev libprotobuf-dev protobuf-compiler
  libgrpc++-dev protobuf-compiler-grpc
  prometheus-cpp-dev libcivetweb-dev libgloo-dev
  libeigen3-dev liblapacke-dev libopenblas-dev
  nlohmann-json3-dev pybind11-dev
  python3-numpy python3-torch python3-pytest
  # pip install . (pyproject.toml) and the python_pip_venv test
  python3-venv python3-pip python3-setuptools python3-wheel
  libyaml-cpp-dev prometheus python3-grpcio python3-matplotlib python3-yaml
  systemd
  clang-format iproute2
  # scripts/code_sizes.py (CI prints the sizes of giftd's and libgift's units)
  universal-ctags
  # make sanitize: libFuzzer and clang's sanitizer runtimes (scripts/fuzz.sh);
  # dpkg-dev for the abseil source package of the TSan part
  clang-14 libclang-rt-14-dev dpkg-dev
  # deploy_gift_srun_slurm_test: a one-host Slurm cluster the test starts
  slurm-wlm munge
  # daemon/coord: libcurl for etcd's HTTP/JSON gateway; its tests start a real etcd 3.4
  libcurl4-openssl-dev etcd-server etcd-client
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi
if [[ "${1:-}" == "--check" ]]; then
  echo "missing packages: ${missing[*]}"
  exit 1
fi

echo "install-deps: installing ${#missing[@]} package(s): ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "install-deps: done"
