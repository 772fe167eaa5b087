#!/usr/bin/env bash
# Builds fp8train and its tests, then runs every test that needs no GPU (ctest label `cuda`
# excluded). GPU tests: scripts/device-test.sh on a machine with a CUDA GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${FP8T_BUILD_DIR:-build}
FP8T_BUILD_TARGETS="fp8t_tests" bash scripts/setup.sh
cd "$BUILD_DIR"
JOBS=${FP8T_TEST_JOBS:-2}
# Cores per test: ctest runs JOBS tests at once, and LibTorch would give each of them an OpenMP
# pool as large as the machine, whose threads then spin waiting for each other (issue 62, on 2
# cores: tests/cli/test_fp8_recipe.sh 106 s with the default pool, 57 s with one thread, its CPU
# time 130 s against 47 s). A value already in the environment is kept.
CORES=$(nproc 2>/dev/null || echo 1)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( CORES / JOBS > 0 ? CORES / JOBS : 1 ))}
ctest --output-on-failure -LE cuda -j "$JOBS" "$@"
