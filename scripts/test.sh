#!/usr/bin/env bash
# Builds fp8train and its tests, then runs every test that needs no GPU (ctest label `cuda`
# excluded). GPU tests: scripts/device-test.sh on a machine with a CUDA GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${FP8T_BUILD_DIR:-build}
FP8T_BUILD_TARGETS="fp8t_tests" bash scripts/setup.sh
cd "$BUILD_DIR"
ctest --output-on-failure -LE cuda -j "${FP8T_TEST_JOBS:-2}" "$@"
