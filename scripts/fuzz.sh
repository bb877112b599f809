#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang into build-fuzz/ and runs each for
# SECONDS (default 20), starting from its committed seeds in tests/fuzz/corpus/<name>/ (and
# the dictionary tests/fuzz/<name>.dict where there is one).
# New inputs go to build-fuzz/corpus/<name>/, crashes to build-fuzz/artifacts/. Exits non-zero
# on the first target that finds a crash, leak, hang or sanitizer report.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]     e.g. scripts/fuzz.sh 600 tokenizer_fuzz
# MLASERVE_FUZZ_SEED fixes libFuzzer's random seed (the short run of scripts/test.sh uses 1).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
shift $(( $# > 0 ? 1 : 0 ))
build_dir=${MLASERVE_FUZZ_BUILD_DIR:-build-fuzz}
MLASERVE_BOOTSTRAP=fuzz scripts/bootstrap.sh
scripts/configure_clang.sh "$build_dir"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for src in tests/fuzz/*_fuzz.cc; do targets+=("$(basename "$src" .cc)"); done
fi
cmake --build "$build_dir" --target "${targets[@]}" -- -j"$(nproc)"
mkdir -p "$build_dir/artifacts"
for target in "${targets[@]}"; do
  name=${target%_fuzz}
  mkdir -p "$build_dir/corpus/$name"
  options=()
  if [ -f "tests/fuzz/$name.dict" ]; then options+=(-dict="tests/fuzz/$name.dict"); fi
  if [ -n "${MLASERVE_FUZZ_SEED:-}" ]; then options+=(-seed="$MLASERVE_FUZZ_SEED"); fi
  echo "fuzz: $target for ${seconds}s" >&2
  "$build_dir/bin/$target" "$build_dir/corpus/$name" "tests/fuzz/corpus/$name" "${options[@]}" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$build_dir/artifacts/$target-" 2>"$build_dir/$target.log" || {
    tail -n 60 "$build_dir/$target.log" >&2
    echo "fuzz: $target failed; the input is in $build_dir/artifacts/" >&2
    exit 1
  }
  grep -E '^stat::number_of_executed_units|^Done' "$build_dir/$target.log" >&2 || true
done
