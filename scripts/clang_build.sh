#!/usr/bin/env bash
# Compiles every target (tests, tools, fuzz targets, the CUDA simulator build where nvcc exists)
# with clang 14 and -Werror into build-fuzz/, the directory scripts/fuzz.sh runs from, so the
# tree is proven to build with both compilers at the cost of one extra build. Part of
# scripts/test.sh (MLASERVE_TEST_CLANG=0 skips it).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${MLASERVE_FUZZ_BUILD_DIR:-build-fuzz}
MLASERVE_BOOTSTRAP=fuzz scripts/bootstrap.sh
scripts/configure_clang.sh "$build_dir"
cmake --build "$build_dir" -- -j"$(nproc)"
