#!/usr/bin/env bash
# Build and test fp8train on a machine with a CUDA GPU, in one go: build, the GPU tests
# (fp8t_tests "[cuda]~[timing]", then the CPU tests only a CUDA build has: "[cuda_fp8_h],[gemm]~[cuda]"),
# compute-sanitizer memcheck + racecheck on the kernel tests (beside the plain tests), then the
# timing tests "[cuda][timing]" alone on the GPU (they assert speeds), and the GEMM benchmark
# (fp8train bench-gemm). Logs and JSON go to ${OUT:-/tmp/out}; a summary table is printed last.
#
#   scripts/device-test.sh                       # everything
#   scripts/device-test.sh --only build,tests     # parts: build, tests, sanitizer, bench
#   scripts/device-test.sh --build-dir build-gpu --jobs 16
#   FP8T_BUILD_APP_ONLY=1 builds fp8train alone. Time limits per step (seconds): FP8T_BUILD_TIMEOUT, FP8T_TESTS_TIMEOUT,
#   FP8T_SANITIZER_TIMEOUT, FP8T_BENCH_TIMEOUT. FP8T_DEADLINE (seconds since the epoch) caps them
#   all: every step ends by then, so nothing of this script still runs on the GPU afterwards (a
#   `timeout` around the script would stop the script but not the test binary it waits for).
#
# Dependencies: an importable torch (the CUDA wheel is a complete LibTorch) and nvcc. The C++
# packages (yaml-cpp, spdlog, fmt, CLI11, Catch2, nlohmann-json) come from the system when
# installed (apt-get install ... on a machine with internet), otherwise from the Debian packages
# in .deps/*.deb (the header of scripts/setup.sh says how to fetch them), unpacked into /tmp/deps: the path
# for an offline GPU machine.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

ONLY="build,tests,sanitizer,bench"
BUILD_DIR=build-device
JOBS=16
while [ $# -gt 0 ]; do
  case "$1" in
    --only) ONLY="$2"; shift 2 ;;
    --build-dir) BUILD_DIR="$2"; shift 2 ;;
    --jobs) JOBS="$2"; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "device-test.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
want() { [[ ",$ONLY," == *",$1,"* ]]; }

OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
PY=${FP8T_PYTHON:-python3}
declare -a SUMMARY=()
FAILED=0
note() { SUMMARY+=("$(printf '%-12s %-5s %s' "$1" "$2" "$3")"); [ "$2" = FAIL ] && FAILED=1; return 0; }
log() { echo "[device-test] $*"; }
secs() { echo $(( $(date +%s) - $1 )); }
# A step's time limit: its own, or what is left until FP8T_DEADLINE when that is sooner (>= 1 s).
limit() {
  local own=$1 left
  [ -n "${FP8T_DEADLINE:-}" ] || { echo "$own"; return; }
  left=$(( FP8T_DEADLINE - $(date +%s) ))
  [ "$left" -lt 1 ] && left=1
  [ "$left" -lt "$own" ] && echo "$left" || echo "$own"
}

# ---- environment ---------------------------------------------------------------------------
TORCH_PREFIX=$("$PY" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null) || {
  echo "device-test.sh: python '$PY' cannot import torch (set FP8T_PYTHON)" >&2; exit 2; }
PREFIX="$TORCH_PREFIX"
if ls .deps/*.deb >/dev/null 2>&1 && ! dpkg-query -W -f='${Status}' libspdlog-dev 2>/dev/null | grep -q "ok installed"; then
  log "unpacking .deps/*.deb into /tmp/deps"
  mkdir -p /tmp/deps
  for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
  PREFIX="$PREFIX;/tmp/deps/usr;/tmp/deps/usr/lib/x86_64-linux-gnu/cmake;/tmp/deps/usr/lib/cmake;/tmp/deps/usr/share/cmake"
  export LD_LIBRARY_PATH="/tmp/deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv 2>&1
  nvcc --version 2>&1 | tail -1
  "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
} | tee "$OUT/environment.txt"

# fp8.attention's cuDNN graphs need cudnn-frontend's headers. The GPU machine has no internet: a
# wheel placed in .whl/ (pip download --no-deps nvidia-cudnn-frontend==1.32.0 -d .whl) is unpacked and its
# include folder handed to CMake; without one, CMake looks in the venv and else builds without.
CUDNN_FE_ARGS=()
fe_wheel=$(ls .whl/nvidia_cudnn_frontend-*.whl 2>/dev/null | tail -1)
if [ -n "$fe_wheel" ]; then
  rm -rf .whl/cudnn_frontend && mkdir -p .whl/cudnn_frontend
  if "$PY" -m zipfile -e "$fe_wheel" .whl/cudnn_frontend >/dev/null 2>&1 && [ -f .whl/cudnn_frontend/include/cudnn_frontend.h ]; then
    CUDNN_FE_ARGS=(-DFP8T_CUDNN_FRONTEND_INCLUDE="$PWD/.whl/cudnn_frontend/include")
    log "cudnn-frontend headers from $fe_wheel"
  else
    log "warning: $fe_wheel holds no include/cudnn_frontend.h; building without cuDNN FP8 attention"
  fi
fi

TESTS="$BUILD_DIR/tests/fp8t_tests"
APP="$BUILD_DIR/fp8train"

# ---- build ---------------------------------------------------------------------------------
if want build; then
  t0=$(date +%s)
  log "configure + build in $BUILD_DIR (ninja -j$JOBS)"
  if cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$PREFIX" \
       "${CUDNN_FE_ARGS[@]}" >"$OUT/configure.log" 2>&1; then
    # The tests first: the GPU checks need only them; fp8train is needed for bench-gemm.
    # FP8T_BUILD_APP_ONLY=1: fp8train alone (a benchmark-only call).
    rc_tests=0
    if [ "${FP8T_BUILD_APP_ONLY:-0}" != 1 ]; then
      timeout "$(limit "${FP8T_BUILD_TIMEOUT:-1800}")" ninja -C "$BUILD_DIR" -j"$JOBS" fp8t_tests >"$OUT/build.log" 2>&1
      rc_tests=$?
    fi
    timeout "$(limit "${FP8T_BUILD_TIMEOUT:-1800}")" ninja -C "$BUILD_DIR" -j"$JOBS" fp8train >>"$OUT/build.log" 2>&1
    rc_app=$?
    if [ $rc_tests -eq 0 ] && [ $rc_app -eq 0 ]; then
      note build ok "fp8t_tests + fp8train in $(secs $t0) s"
    else
      note build FAIL "fp8t_tests rc=$rc_tests, fp8train rc=$rc_app (see build.log)"
      grep -E "error|FAILED" "$OUT/build.log" | head -20
    fi
  else
    note build FAIL "cmake configure failed (see configure.log)"
    tail -30 "$OUT/configure.log"
  fi
fi

# ---- GPU tests and compute-sanitizer -------------------------------------------------------
# The two sanitizer runs start in the background and share the GPU with the plain test run (none
# of them times anything); the benchmark below runs alone.
declare -A SAN_PID=() SAN_T0=()
if want sanitizer; then
  if [ -x "$TESTS" ] && command -v compute-sanitizer >/dev/null 2>&1; then
    for tool in memcheck racecheck; do
      log "compute-sanitizer --tool $tool on [kernels][cuda] (large shapes skipped), in the background"
      SAN_T0[$tool]=$(date +%s)
      FP8T_TEST_SMALL=1 timeout "$(limit "${FP8T_SANITIZER_TIMEOUT:-300}")" compute-sanitizer --tool "$tool" \
        --error-exitcode 99 "$TESTS" "[kernels][cuda]" >"$OUT/sanitizer-$tool.log" 2>&1 &
      SAN_PID[$tool]=$!
    done
  else
    note sanitizer FAIL "fp8t_tests or compute-sanitizer missing"
  fi
fi

if want tests; then
  if [ -x "$TESTS" ]; then
    t0=$(date +%s)
    # The timing cases ([timing]: they assert bandwidths and speed ratios) run later, alone on
    # the GPU: beside the sanitizer runs they measure a shared GPU (seen: the AdamW kernel at 960
    # GB/s there, 4130 GB/s alone).
    log "fp8t_tests [cuda]~[timing]"
    FP8T_TEST_REPORT=1 timeout "$(limit "${FP8T_TESTS_TIMEOUT:-300}")" "$TESTS" "[cuda]~[timing]" --durations yes >"$OUT/tests-cuda.log" 2>&1
    rc=$?
    result=$(grep -E "^(All tests passed|test cases:)" "$OUT/tests-cuda.log" | tail -1)
    grep -E "gemm worst|norm (ln|rms)" "$OUT/tests-cuda.log"
    if [ $rc -eq 0 ]; then note tests ok "$result ($(secs $t0) s)"; else note tests FAIL "rc=$rc: $result"; grep -B2 -A12 -E "FAILED|REQUIRE" "$OUT/tests-cuda.log" | head -60; fi
    # The CPU tests that only a CUDA build has (they run in CI's ctest too when the toolkit is
    # there): the codec against cuda_fp8.h and the cuBLASLt problem rules of lib/gemm.
    log "fp8t_tests [cuda_fp8_h],[gemm]~[cuda]"
    timeout "$(limit 300)" "$TESTS" "[cuda_fp8_h],[gemm]~[cuda]" >"$OUT/tests-cuda-build.log" 2>&1
    rc=$?
    result=$(grep -E "^(All tests passed|test cases:)" "$OUT/tests-cuda-build.log" | tail -1)
    if [ $rc -eq 0 ]; then note cpu-in-cuda ok "$result"; else note cpu-in-cuda FAIL "rc=$rc: $result"; fi
  else
    note tests FAIL "no $TESTS"
  fi
fi

for tool in "${!SAN_PID[@]}"; do
  wait "${SAN_PID[$tool]}"
  rc=$?
  summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/sanitizer-$tool.log" | tail -1)
  result=$(grep -E "^(All tests passed|test cases:)" "$OUT/sanitizer-$tool.log" | tail -1)
  if [ $rc -eq 0 ]; then note "$tool" ok "${summary:-no errors}; $result ($(secs ${SAN_T0[$tool]}) s)"
  elif [ $rc -eq 124 ]; then note "$tool" FAIL "timed out after $(secs ${SAN_T0[$tool]}) s (partial log)"
  else note "$tool" FAIL "rc=$rc ${summary}"; grep -E "^=========" "$OUT/sanitizer-$tool.log" | head -30; fi
done

# ---- timing tests, alone on the GPU ---------------------------------------------------------
if want tests && [ -x "$TESTS" ]; then
  t0=$(date +%s)
  log "fp8t_tests [cuda][timing] (alone on the GPU)"
  FP8T_TEST_REPORT=1 timeout "$(limit "${FP8T_TESTS_TIMEOUT:-300}")" "$TESTS" "[cuda][timing]" --durations yes >"$OUT/tests-timing.log" 2>&1
  rc=$?
  result=$(grep -E "^(All tests passed|test cases:)" "$OUT/tests-timing.log" | tail -1)
  if [ $rc -eq 0 ]; then note timing ok "$result ($(secs $t0) s)"; else note timing FAIL "rc=$rc: $result"; grep -B2 -A12 -E "FAILED" "$OUT/tests-timing.log" | head -40; fi
fi

# ---- GEMM benchmark ------------------------------------------------------------------------
if want bench; then
  t0=$(date +%s)
  if [ -x "$APP" ] && "$APP" bench-gemm --help >/dev/null 2>&1; then
    log "fp8train bench-gemm"
    timeout "$(limit "${FP8T_BENCH_TIMEOUT:-300}")" "$APP" bench-gemm --json "$OUT/bench-gemm.json" >"$OUT/bench-gemm.log" 2>&1
    rc=$?
  elif [ -x "$TESTS" ]; then
    log "fp8train bench-gemm unavailable; running the benchmark through fp8t_tests [bench-gemm]"
    FP8T_BENCH_JSON="$OUT/bench-gemm.json" timeout "$(limit "${FP8T_BENCH_TIMEOUT:-300}")" "$TESTS" "[bench-gemm]" >"$OUT/bench-gemm.log" 2>&1
    rc=$?
  else
    rc=127
  fi
  cat "$OUT/bench-gemm.log" 2>/dev/null | grep -vE "^(=|~|All tests|test cases)" | sed '/^$/d' | head -20
  if [ $rc -eq 0 ]; then note bench ok "bench-gemm.json ($(secs $t0) s)"; else note bench FAIL "rc=$rc (see bench-gemm.log)"; fi
fi

# ---- summary -------------------------------------------------------------------------------
echo
echo "==== device-test summary (logs in $OUT) ===="
for line in "${SUMMARY[@]}"; do echo "$line"; done
exit $FAILED
