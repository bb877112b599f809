#!/usr/bin/env bash
# Configures DIR (once) as the clang 14 build shared by scripts/clang_build.sh and
# scripts/fuzz.sh: every target, the libFuzzer targets included, warnings as errors.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=$1
if [ ! -f "$build_dir/build.ninja" ]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DMLASERVE_FUZZ=ON -DMLASERVE_BUILD_TESTS=ON -DMLASERVE_WERROR=ON >/dev/null
fi
