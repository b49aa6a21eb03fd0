#!/usr/bin/env bash
# Set-up for a fresh Debian 12 machine: install the pinned packages that are
# missing, then configure and build moe-mlir with CMake + Ninja (+ ccache).
# Idempotent: a second run installs nothing and rebuilds only what changed.
#
#   scripts/setup.sh            # install + configure + build into build/
#   MOE_BUILD_DIR=out scripts/setup.sh
#   MOE_SKIP_INSTALL=1 scripts/setup.sh   # build only
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${MOE_BUILD_DIR:-$ROOT/build}"
LLVM_VERSION=22

# name=version pins (the versions CI was last green with). If the archive has
# moved on, the candidate version is installed with a warning rather than
# failing a fresh machine; the pin is then the one to update.
PACKAGES=(
  "cmake=3.25.1-1"
  "ninja-build=1.11.1-2~deb12u1"
  "ccache=4.8+really4.7.5-1"
  "g++=4:12.2.0-3"
  "python3=3.11.2-1+b1"
  "libgtest-dev=1.12.1-0.2"
  "llvm-${LLVM_VERSION}-dev=1:22.1.8-1~deb12u1"
  "llvm-${LLVM_VERSION}-tools=1:22.1.8-1~deb12u1"
  "libmlir-${LLVM_VERSION}-dev=1:22.1.8-1~deb12u1"
  "mlir-${LLVM_VERSION}-tools=1:22.1.8-1~deb12u1"
  # Runtime and tools: the S_p tuner (Eigen), moe-profile (MPI, OpenBLAS,
  # nlohmann-json), trace rendering (matplotlib for /usr/bin/python3).
  "libeigen3-dev=3.4.0-4"
  "libopenblas-dev=0.3.21+ds-4"
  "libopenmpi-dev=4.1.4-3+b1"
  "openmpi-bin=4.1.4-3+b1"
  "nlohmann-json3-dev=3.11.2-2"
  "python3-matplotlib=3.6.3-1+b1"
  # FSMoE planning (lib/Analysis): NLopt's SLSQP for Algorithm 1, pagmo2's
  # differential evolution for the gradient partition.
  "libnlopt-cxx-dev=2.7.1-5"
  "libpagmo-dev=2.18.0-2+b1"
  # The emulated cluster (scripts/emulated-cluster.sh): ip netns, veth, tc.
  "iproute2=6.1.0-3"
  # The PyTorch reference the runtime's training step is checked against.
  "python3-torch=1.13.1+dfsg-4"
  # The ONNX frontend: libonnx parses and shape-infers models (built with
  # ONNX_ML=1), protobuf underneath; python3-onnx and torch build the test
  # models; clang 14's libFuzzer (libclang-rt) drives the importer fuzzer.
  "libonnx-dev=1.12.0-2+b4"
  "libprotobuf-dev=3.21.12-3+deb12u1"
  "protobuf-compiler=3.21.12-3+deb12u1"
  "python3-onnx=1.12.0-2+b4"
  "clang-14=1:14.0.6-12"
  "libclang-rt-14-dev=1:14.0.6-12"
  # runtime/planning: NetMoE's sample-placement assignments are min-cost
  # flows solved by LEMON's network simplex (header templates).
  "liblemon-dev=1.3.1+dfsg-6"
)

# Python packages the ONNX import checks need, from PyPI, pinned, installed
# with --no-deps into the project-local .pydeps/ (git-ignored) for Debian's
# /usr/bin/python3, whose python3-torch 1.13 stays the one torch:
# onnxruntime runs the original ONNX files as an independent reference
# (python/onnx_models/validate_import.py); transformers 4.40.x (the last
# minor that runs on torch 1.13) builds real Hugging Face MoE models, with
# its few pure-Python needs (and safetensors/regex wheels it imports).
PYDEPS_DIR="$ROOT/.pydeps"
PYDEPS=(
  "onnxruntime==1.19.2"
  "transformers==4.40.2"
  "huggingface-hub==0.23.4"
  "safetensors==0.4.3"
  "regex==2024.5.15"
  "tqdm==4.66.4"
  "filelock==3.15.4"
  "fsspec==2024.6.1"
)

log() { printf '[setup] %s\n' "$*"; }

install_pydeps() {
  local stamp="$PYDEPS_DIR/.pinned"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "${PYDEPS[*]}" ]]; then
    log "python packages in .pydeps are the pinned ones"
    return
  fi
  log "installing into .pydeps: ${PYDEPS[*]}"
  rm -rf "$PYDEPS_DIR"
  /usr/bin/python3 -m pip install --quiet --disable-pip-version-check \
    --no-deps --target "$PYDEPS_DIR" "${PYDEPS[@]}"
  echo "${PYDEPS[*]}" > "$stamp"
}

installed_version() {
  dpkg-query -W -f='${db:Status-Status} ${Version}\n' "$1" 2>/dev/null |
    awk '$1 == "installed" { print $2 }'
}

install_missing() {
  local missing=() spec name version
  for spec in "${PACKAGES[@]}"; do
    name="${spec%%=*}"
    [[ -n "$(installed_version "$name")" ]] || missing+=("$spec")
  done
  if [[ ${#missing[@]} -eq 0 ]]; then
    log "all ${#PACKAGES[@]} pinned packages are installed"
    return
  fi
  local sudo=""
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { log "need root (or sudo) to install: ${missing[*]}"; exit 1; }
    sudo="sudo"
  fi
  log "installing: ${missing[*]}"
  $sudo apt-get update -qq
  local resolved=()
  for spec in "${missing[@]}"; do
    name="${spec%%=*}"; version="${spec#*=}"
    if apt-cache madison "$name" | awk -F'|' '{gsub(/ /,"",$2); print $2}' | grep -qxF "$version"; then
      resolved+=("$spec")
    else
      log "WARNING: $name $version is no longer in the archive; installing the candidate"
      resolved+=("$name")
    fi
  done
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${resolved[@]}"
}

check_cuda() {
  if [[ -x /usr/local/cuda/bin/nvcc ]]; then
    log "CUDA: $(/usr/local/cuda/bin/nvcc --version | tail -1) (the runtime's CUDA backend is compiled and linked, not run)"
  else
    log "CUDA: nvcc not found; the runtime is built without its CUDA backend"
  fi
}

configure_and_build() {
  local llvm_prefix="/usr/lib/llvm-${LLVM_VERSION}"
  if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
    log "configuring $BUILD_DIR"
    cmake -G Ninja -S "$ROOT" -B "$BUILD_DIR" \
      -DCMAKE_BUILD_TYPE=Release \
      -DMOE_ENABLE_ASSERTIONS=ON \
      -DMLIR_DIR="$llvm_prefix/lib/cmake/mlir" \
      -DLLVM_DIR="$llvm_prefix/lib/cmake/llvm" \
      -DLLVM_EXTERNAL_LIT="$llvm_prefix/bin/lit"
  fi
  log "building (ninja, $(nproc) jobs)"
  cmake --build "$BUILD_DIR" -- -j"$(nproc)"
}

if [[ "${MOE_SKIP_INSTALL:-0}" != 1 ]]; then
  install_missing
  install_pydeps
fi
check_cuda
# ccache keeps rebuilds of a fresh clone fast; bound its size.
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
command -v ccache >/dev/null && ccache -M 8G >/dev/null
configure_and_build
log "done: $BUILD_DIR/bin/moe-opt"
