#!/usr/bin/env bash
# libFuzzer targets for the inputs a user hands fp8train: the YAML config loader and the data-file
# readers. A small separate build of just those sources with clang (no LibTorch), then a run.
#
#   scripts/fuzz.sh build                 # build-fuzz/fuzz_config, build-fuzz/fuzz_token_file
#   scripts/fuzz.sh run config 600        # fuzz one target for 600 s (corpus in build-fuzz/corpus-*)
#
# Needs clang and its libFuzzer runtime (Debian: apt-get install clang libclang-rt-14-dev) plus
# the yaml-cpp, spdlog and fmt packages of scripts/setup.sh. Not part of CI: the seeded-mutation
# Catch2 tests ("seeded random mutations" in tests/config and tests/data) are the CI variant.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${FP8T_FUZZ_DIR:-build-fuzz}
CXX=${CXX_FUZZ:-clang++}
FLAGS=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -I. -DSPDLOG_FMT_EXTERNAL -DSPDLOG_COMPILED_LIB)
mkdir -p "$OUT"
case "${1:-build}" in
  build)
    "$CXX" "${FLAGS[@]}" tests/fuzz/fuzz_config.cpp lib/config/*.cpp -lyaml-cpp -lspdlog -lfmt -o "$OUT/fuzz_config"
    "$CXX" "${FLAGS[@]}" tests/fuzz/fuzz_token_file.cpp lib/data/token_file.cpp lib/data/token_store.cpp \
      lib/data/data_file.cpp lib/data/text_source.cpp -o "$OUT/fuzz_token_file"
    # Seeds: the shipped configs; a tiny llm.c shard and nanoGPT file.
    mkdir -p "$OUT/corpus-config" "$OUT/corpus-token_file"
    cp configs/*.yaml "$OUT/corpus-config/"
    python3 - "$OUT/corpus-token_file" <<'PY'
import struct, sys
d = sys.argv[1]
toks = [i * 7919 % 50257 for i in range(64)]
open(f"{d}/v1.bin", "wb").write(struct.pack("<256i", 20240520, 1, len(toks), *([0] * 253)) + struct.pack(f"<{len(toks)}H", *toks))
open(f"{d}/v7.bin", "wb").write(struct.pack("<256i", 20240801, 7, len(toks), *([0] * 253)) + struct.pack(f"<{len(toks)}I", *toks))
open(f"{d}/nano.bin", "wb").write(struct.pack(f"<{len(toks)}H", *toks))
PY
    ;;
  run)
    target=${2:?config or token_file}; seconds=${3:-600}
    "$OUT/fuzz_$target" -max_total_time="$seconds" -print_final_stats=1 \
      -artifact_prefix="$OUT/crash-$target-" "$OUT/corpus-$target"
    ;;
  *) echo "usage: $0 build | run config|token_file [seconds]" >&2; exit 2 ;;
esac
