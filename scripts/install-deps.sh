#!/usr/bin/env bash
# Installs the Debian packages minidl builds with, only those that are missing.
# With arguments, installs those packages instead (e.g. dataset-fashion-mnist,
# which `make train` falls back to when CIFAR-10 cannot be downloaded).
# --fuzz installs what `make fuzz` needs on top: clang, its libFuzzer and
# sanitizer runtimes, and LLVM's OpenMP runtime (clang's -fopenmp).
set -euo pipefail

packages=(
  cmake make g++          # the build
  ccache                  # faster rebuilds (CI builds three configurations)
  libeigen3-dev           # CPU kernels (GEMM, vectorized loops)
  doctest-dev             # tests
  libstb-dev              # image decoding (ImageFolder)
  zlib1g-dev              # gzip (Fashion-MNIST), CRC for logs
  nlohmann-json3-dev      # safetensors headers, checkpoint metadata
  libcli11-dev            # command-line options of the examples
  libgloo-dev             # CPU collectives (dist/)
)
fuzz_packages=(clang libclang-rt-dev libomp-dev)
if [ "${1:-}" = --fuzz ]; then
  packages=("${fuzz_packages[@]}")
elif [ $# -gt 0 ]; then
  packages=("$@")
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
