#!/usr/bin/env bash
# Installs what fp8train needs and builds it. Idempotent: re-running skips what is there.
#
#   scripts/setup.sh            # dependencies + configure + build (build/)
#   FP8T_BUILD_DIR=out scripts/setup.sh
#
# Dependencies:
#   - OS packages (Debian/Ubuntu): cmake, ninja, g++, yaml-cpp, spdlog, fmt, CLI11, Catch2,
#     nlohmann-json, gloo headers (data-parallel on CPU), protobuf (TensorBoard files; optional:
#     without it run.tensorboard is refused). Installed with apt-get when missing (as root, or through sudo).
#     Without apt (an offline GPU machine) put the .deb files in .deps/ first, downloaded on a
#     Debian 12 machine with: mkdir -p .deps && cd .deps && apt-get download libyaml-cpp-dev
#     libyaml-cpp0.7 libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 libcli11-dev catch2
#     nlohmann-json3-dev libgloo-dev libprotobuf-dev libprotobuf32 libprotobuf-lite32
#     protobuf-compiler libprotoc32; they are unpacked into .deps/root.
#   - LibTorch: the PyTorch wheel. An importable torch >= 2.11 of $FP8T_PYTHON (or python3) is
#     reused; otherwise a project-local .venv gets `pip install torch`.
#     A downloaded libtorch works too: FP8T_TORCH_PREFIX=/path/to/libtorch scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD_DIR=${FP8T_BUILD_DIR:-build}
APT_PACKAGES="cmake ninja-build g++ python3-venv libyaml-cpp-dev libspdlog-dev libfmt-dev libcli11-dev catch2 nlohmann-json3-dev libgloo-dev libprotobuf-dev protobuf-compiler"
log() { echo "[setup] $*"; }

# ---- OS packages ------------------------------------------------------------------------
missing=()
if command -v dpkg-query >/dev/null 2>&1; then
  for p in $APT_PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
fi
EXTRA_PREFIX=""
if [ ${#missing[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null 2>&1 && { [ "$(id -u)" = 0 ] || command -v sudo >/dev/null 2>&1; }; then
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    log "installing ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  elif ls .deps/*.deb >/dev/null 2>&1; then
    log "no apt: unpacking .deps/*.deb into .deps/root"
    mkdir -p .deps/root
    for f in .deps/*.deb; do dpkg -x "$f" .deps/root; done
    EXTRA_PREFIX="$ROOT/.deps/root/usr;$ROOT/.deps/root/usr/lib/x86_64-linux-gnu/cmake;$ROOT/.deps/root/usr/share/cmake"
    export LD_LIBRARY_PATH="$ROOT/.deps/root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"  # protoc's libraries
  else
    log "missing packages: ${missing[*]} (no apt-get and no .deps/*.deb); continuing, CMake will say what it cannot find"
  fi
elif [ -d .deps/root ] && ! command -v apt-get >/dev/null 2>&1; then
  EXTRA_PREFIX="$ROOT/.deps/root/usr;$ROOT/.deps/root/usr/lib/x86_64-linux-gnu/cmake;$ROOT/.deps/root/usr/share/cmake"
  export LD_LIBRARY_PATH="$ROOT/.deps/root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

# ---- LibTorch ---------------------------------------------------------------------------
torch_ok() { "$1" -c 'import sys, torch; v=tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]); sys.exit(0 if v >= (2, 11) else 1)' 2>/dev/null; }
PY=""
if [ -n "${FP8T_TORCH_PREFIX:-}" ]; then
  log "LibTorch from FP8T_TORCH_PREFIX=$FP8T_TORCH_PREFIX"
elif [ -x .venv/bin/python3 ] && torch_ok .venv/bin/python3; then
  PY=$ROOT/.venv/bin/python3
elif torch_ok "${FP8T_PYTHON:-python3}"; then
  PY=$(command -v "${FP8T_PYTHON:-python3}")
  log "reusing the installed torch of $PY"
else
  log "creating .venv and installing the PyTorch wheel (several GB, once)"
  python3 -m venv .venv
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q torch
  PY=$ROOT/.venv/bin/python3
fi
[ -z "$PY" ] || log "LibTorch: torch $("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null) ($PY)"
# The TensorBoard round-trip test (tests/cli/test_report.sh) reads event files with the
# `tensorboard` package; only the project's own .venv gets it.
if [ "$PY" = "$ROOT/.venv/bin/python3" ] && ! "$PY" -c 'import tensorboard' 2>/dev/null; then
  log "installing the tensorboard package into .venv (for the tests)"
  "$PY" -m pip install -q tensorboard || log "could not install tensorboard; tests/cli/test_report.sh will fail"
fi
# The export test (tests/cli/test_export.sh) loads exported models with Hugging Face's
# `safetensors` and `transformers` packages; only the project's own .venv gets them.
if [ "$PY" = "$ROOT/.venv/bin/python3" ] && ! "$PY" -c 'import safetensors, transformers' 2>/dev/null; then
  log "installing the safetensors and transformers packages into .venv (for the tests)"
  "$PY" -m pip install -q safetensors transformers || log "could not install safetensors/transformers; tests/cli/test_export.sh will try again"
fi

# scripts/prepare_data.py (raw text -> token shards) tokenizes with Hugging Face `tokenizers`,
# reads .parquet with `pyarrow` and shows progress with `tqdm`; only the project's own .venv gets them.
if [ "$PY" = "$ROOT/.venv/bin/python3" ] && ! "$PY" -c 'import tokenizers, pyarrow, tqdm' 2>/dev/null; then
  log "installing the tokenizers, pyarrow and tqdm packages into .venv (for scripts/prepare_data.py)"
  "$PY" -m pip install -q tokenizers pyarrow tqdm || log "could not install tokenizers/pyarrow/tqdm; scripts/prepare_data.py needs them"
fi

# fp8.attention on CUDA builds cuDNN's FP8 attention with cudnn-frontend's C++ headers, which the
# PyPI package nvidia-cudnn-frontend ships (CMake finds them in the venv; the version this was
# built and tested with, 1.32.0). Optional: without them
# the build works and fp8.attention is refused on CUDA.
if [ "$PY" = "$ROOT/.venv/bin/python3" ] && ! ls "$ROOT"/.venv/lib/python3*/site-packages/include/cudnn_frontend.h >/dev/null 2>&1; then
  log "installing nvidia-cudnn-frontend into .venv (headers for fp8.attention on CUDA)"
  "$PY" -m pip install -q --no-deps nvidia-cudnn-frontend==1.32.0 ||
    log "warning: could not install nvidia-cudnn-frontend; fp8.attention will be refused on CUDA"
fi

# ---- configure + build ------------------------------------------------------------------
GEN=""; command -v ninja >/dev/null 2>&1 && GEN="-G Ninja"
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD_DIR" $GEN -DCMAKE_BUILD_TYPE=Release ${PY:+-DFP8T_PYTHON="$PY"} \
    ${EXTRA_PREFIX:+-DCMAKE_PREFIX_PATH="$EXTRA_PREFIX"} ${FP8T_CMAKE_ARGS:-} >/dev/null
fi
log "building in $BUILD_DIR (first build: about 15-20 minutes on 2 cores)"
cmake --build "$BUILD_DIR" --target fp8train ${FP8T_BUILD_TARGETS:-} -j "${FP8T_JOBS:-$(nproc)}"
log "done: $BUILD_DIR/fp8train"
