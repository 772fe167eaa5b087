#!/usr/bin/env bash
# ASan + UBSan build of the CPU test suite, in its own build folder, then `ctest -LE cuda`.
#
#   scripts/sanitize.sh              # build-sanitize/, all CPU tests (unit + CLI)
#   FP8T_JOBS=1 nice -n 19 scripts/sanitize.sh
#   FP8T_SANITIZE_TESTS='[config],[data]' scripts/sanitize.sh   # only these Catch2 tags
#   FP8T_CTEST_ARGS='-j16 -E ^cli_' scripts/sanitize.sh          # the unit-test areas in parallel
#   FP8T_USE_PCH=ON FP8T_CMAKE_ARGS='-DCMAKE_PREFIX_PATH=...' scripts/sanitize.sh
#
# The precompiled LibTorch header is off by default (every file then has to include what it
# uses, which this build also checks); ON builds several times faster.
# NOT part of CI (.ci/run): a sanitized build of the suite costs about 40+ CPU-minutes on a
# 2-core machine, more than CI's budget; run it by hand before a release or after touching
# parsing, file formats or memory handling. Needs the dependencies of scripts/setup.sh (run it
# first). CUDA is left out (FP8T_ENABLE_CUDA=OFF): the sanitizers instrument host code only.
# LibTorch itself is not instrumented; its known leaks at exit are not reported
# (detect_leaks=0), everything else fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${FP8T_SANITIZE_BUILD_DIR:-build-sanitize}
JOBS=${FP8T_JOBS:-$(nproc)}
PY=$([ -x .venv/bin/python3 ] && echo "$PWD/.venv/bin/python3" || command -v python3)
GEN=$(command -v ninja >/dev/null && echo "-G Ninja" || echo "")
FLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
cmake -S . -B "$BUILD_DIR" $GEN -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFP8T_ENABLE_CUDA=OFF -DFP8T_USE_PCH="${FP8T_USE_PCH:-OFF}" \
  -DFP8T_PYTHON="$PY" -DCMAKE_CXX_FLAGS="$FLAGS" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" ${FP8T_CMAKE_ARGS:-}
cmake --build "$BUILD_DIR" --target fp8train fp8t_tests -j "$JOBS"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
if [ -n "${FP8T_SANITIZE_TESTS:-}" ]; then
  "$BUILD_DIR/tests/fp8t_tests" "$FP8T_SANITIZE_TESTS" "~[cuda]"
else
  (cd "$BUILD_DIR" && ctest -LE cuda --output-on-failure ${FP8T_CTEST_ARGS:-})
fi
