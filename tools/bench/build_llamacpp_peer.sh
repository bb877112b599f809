#!/usr/bin/env bash
# Builds llamacpp-peer (tools/bench/llamacpp_peer.cc) against the prebuilt llama.cpp CPU
# libraries of the npm package that the peer benchmark installs (BENCH_DIR/peer_llamacpp.sh),
# into OUT (default build/llamacpp-peer): the binary and those libraries beside it, found
# through its rpath. The headers come from the llama.cpp sources of the same release, which the
# package carries as a git bundle. OUT runs on any x86-64 Linux machine it is copied to, Node.js
# or not (about 20 MB).
#
# usage: tools/bench/build_llamacpp_peer.sh BENCH_DIR [OUT]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
[ $# -ge 1 ] || { echo "usage: $0 BENCH_DIR [OUT]" >&2; exit 2; }
bench=$(cd "$1" && pwd)
out=${2:-$root/build/llamacpp-peer}
"$bench/peer_llamacpp.sh" --install-only
modules="$bench/.cache/npm/node_modules"
libs="$modules/@node-llama-cpp/linux-x64/bins/linux-x64"
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
git clone -q --no-checkout "$modules/node-llama-cpp/llama/gitRelease.bundle" "$src/llama.cpp"
git -C "$src/llama.cpp" checkout -q HEAD -- include ggml/include
mkdir -p "$out"
cp "$libs"/libllama.v*.so "$libs"/libggml*.so "$out"/  # not libllama-common: the addon's
link=()
for lib in libllama libggml libggml-base; do
  link+=("-l:$(basename "$(ls "$out/$lib".v*.so "$out/$lib.so" 2>/dev/null | head -1)")")
done
g++ -std=c++17 -O2 -Wall -Wextra -I"$src/llama.cpp/include" -I"$src/llama.cpp/ggml/include" \
    "$root/tools/bench/llamacpp_peer.cc" -o "$out/llamacpp-peer" -L"$out" "${link[@]}" \
    -Wl,-rpath,'$ORIGIN'
echo "$out/llamacpp-peer"
