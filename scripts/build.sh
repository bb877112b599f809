#!/usr/bin/env bash
# Configures (once) and builds into build/ with Ninja. Extra arguments go to cmake at
# configure time, e.g. scripts/build.sh -DMLASERVE_SANITIZE=address,undefined
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${MLASERVE_BUILD_DIR:-build}
if [ ! -f "$build_dir/build.ninja" ] || [ $# -gt 0 ]; then
  cmake -S . -B "$build_dir" -G Ninja "$@" >/dev/null
fi
cmake --build "$build_dir" -- -j"$(nproc)"
