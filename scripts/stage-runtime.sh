#!/usr/bin/env bash
# Lays out what the container image's runtime stage carries, under DEST:
#   DEST/usr/local/bin/mlaserve
#   DEST/usr/local/bin/mlaserve_cuda_plugin.so   the CUDA backend, where it was built (loaded only
#                                     when the daemon uses a device)
#   DEST/usr/local/lib/mlaserve/      the shared libraries it links (as ldd resolves them here),
#                                     less the C library's own, which every base image has
#   DEST/etc/ld.so.conf.d/mlaserve.conf
#   DEST/<source dir>/models/mlaserve-tiny-moe   the embedded default model, at the path compiled
#                                     into the binary (so `mlaserve` with no --model finds it)
# Usage: scripts/stage-runtime.sh [BUILD_DIR] DEST     (BUILD_DIR: $MLASERVE_BUILD_DIR or build)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -eq 2 ]; then build_dir=$1; dest=$2
elif [ $# -eq 1 ]; then build_dir=${MLASERVE_BUILD_DIR:-build}; dest=$1
else echo "usage: $0 [BUILD_DIR] DEST" >&2; exit 2; fi

binary="$build_dir/bin/mlaserve"
[ -x "$binary" ] || { echo "stage-runtime: $binary not built" >&2; exit 1; }
mkdir -p "$dest/usr/local/bin" "$dest/usr/local/lib/mlaserve" "$dest/etc/ld.so.conf.d"
install -m 0755 "$binary" "$dest/usr/local/bin/mlaserve"

# The C library (and the GPU driver, which the container runtime mounts) stay out.
skip='^(linux-vdso|ld-linux|libc|libm|libpthread|libdl|librt|libresolv|libutil|libcuda|libnvidia-)[.-]'
objects=("$binary")
plugin="$build_dir/bin/mlaserve_cuda_plugin.so"
if [ -f "$plugin" ]; then
  install -m 0644 "$plugin" "$dest/usr/local/bin/mlaserve_cuda_plugin.so"
  objects+=("$plugin")
fi
scripts/copy-shared-libs.sh "$dest/usr/local/lib/mlaserve" "$skip" "${objects[@]}"
echo /usr/local/lib/mlaserve > "$dest/etc/ld.so.conf.d/mlaserve.conf"

model_dest="$dest$(pwd)/models/mlaserve-tiny-moe"
mkdir -p "$model_dest"
cp -r models/mlaserve-tiny-moe/. "$model_dest/"
