#!/usr/bin/env bash
# Packs what scripts/hardware-checks.sh runs into one compressed archive (about 12 MB), for a
# machine with an NVIDIA GPU that has the driver and CUDA 13's cuBLAS but none of the build's
# other libraries (no compiler or package install needed there):
#   bin/    mlaserve, mlaserve-bench, mlaserve-kernel-ab, mlaserve-graph-bench,
#           mlaserve_cuda_plugin.so, every *_gpu test and the CPU tests of the host's
#           processor (cpu_*_test, deepseek_golden_test, engine_invariance_test), stripped
#   lib/    the shared libraries they link, less the C library's, the C++ runtime's (the
#           target's own is newer, and its other programs need it), the GPU driver's and
#           cuBLAS (hundreds of MB; the CUDA runtime's copy there is used)
#   llama/  BUILD_DIR/llamacpp-peer when built (tools/bench/build_llamacpp_peer.sh): llama.cpp
#           beside mlaserve on the target's CPU
#   bench/  make_model.py and a built membw from BENCH_DIR (the peer benchmark folder), when
#           given: the synthetic model is written on the target
# usage: scripts/stage-hardware-checks.sh BUILD_DIR OUT.tar.xz [BENCH_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: $0 BUILD_DIR OUT.tar.xz [BENCH_DIR]" >&2; exit 2; }
build_dir=$1 out=$(realpath -m "$2") bench=${3:-}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/bench/.cache/bin"
for name in mlaserve mlaserve-bench mlaserve-kernel-ab mlaserve-graph-bench \
    mlaserve_cuda_plugin.so; do
  [ -f "$build_dir/bin/$name" ] || { echo "stage-hardware-checks: $build_dir/bin/$name not built" >&2; exit 1; }
  cp "$build_dir/bin/$name" "$stage/bin/"
done
cp "$build_dir"/bin/*_gpu "$build_dir"/bin/cpu_*_test "$build_dir/bin/deepseek_golden_test" \
    "$build_dir/bin/engine_invariance_test" "$stage/bin/"
strip --strip-unneeded "$stage"/bin/*
objects=("$stage"/bin/*)
if [ -n "$bench" ]; then
  cp "$bench/make_model.py" "$bench/membw.c" "$stage/bench/"
  gcc -O2 -mavx2 -fopenmp "$bench/membw.c" -o "$stage/bench/.cache/bin/membw"
  objects+=("$stage/bench/.cache/bin/membw")
fi
if [ -x "$build_dir/llamacpp-peer/llamacpp-peer" ]; then
  cp -r "$build_dir/llamacpp-peer" "$stage/llama"
fi
skip='^(linux-vdso|ld-linux|libc|libm|libpthread|libdl|librt|libresolv|libutil|libcuda|libnvidia-|libcublas|libcublasLt|libstdc\+\+|libgcc_s)[.-]'
scripts/copy-shared-libs.sh "$stage/lib" "$skip" "${objects[@]}"
tar -C "$stage" -cf - . | xz -T0 -6 > "$out"
echo "$out"
