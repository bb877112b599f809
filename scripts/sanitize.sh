#!/usr/bin/env bash
# Builds tests with sanitizers and runs them (docs/reliability.md):
#   address  build-asan/, -DMLASERVE_SANITIZE=address,undefined (ASan, LeakSanitizer, UBSan):
#            the engine and server tests, and, where the CUDA Toolkit is installed, the SIMT
#            simulator's tests and the CUDA kernel tests run on it
#   thread   build-tsan/, -DMLASERVE_SANITIZE=thread (TSan; tests/tsan_absl_sync.cc makes abseil
#            synchronization visible to it, tests/tsan.supp holds suppressions for Debian's
#            uninstrumented gRPC and abseil): the engine and server tests and the kernels'
#            thread pool test
# Every report stops the process that made it, so the test fails.
#
#   scripts/sanitize.sh [address] [thread]     (both when none is named)
set -euo pipefail
cd "$(dirname "$0")/.."
kinds=("$@")
[ ${#kinds[@]} -gt 0 ] || kinds=(address thread)
names() { for src in "$@"; do basename "$src" .cc; done; }
engine_tests=($(names tests/engine/*_test.cc tests/engine/*/*_test.cc))
server_tests=($(names tests/server/*/*_test.cc))
cuda_options=(-DMLASERVE_ENABLE_CUDA=OFF)
sim_tests=()
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  cuda_options=()
  sim_tests=($(names tests/kernels/cuda_sim/*_test.cc) \
             $(for t in tests/kernels/cuda/*_test.cc; do echo "$(basename "$t" .cc)_sim"; done))
fi

export ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:strict_string_checks=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
# The decode prefetch probe (kernels/cpu/cpu_stream_tuning.h) streams 3 GiB through instrumented
# kernels in every process that builds a CPU backend; a fixed choice spares that here
# (cpu_stream_tuning_test runs the probe itself).
export MLASERVE_CPU_PREFETCH=${MLASERVE_CPU_PREFETCH:-t1:1}
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:ignore_noninstrumented_modules=1:suppressions=$PWD/tests/tsan.supp"
for kind in "${kinds[@]}"; do
  case "$kind" in
    address) build_dir=build-asan; sanitizers=address,undefined
      tests=("${engine_tests[@]}" "${server_tests[@]}" "${sim_tests[@]}") ;;
    # The server tests rely on tests/tsan.supp: gRPC hands its callback objects between its
    # own threads through Debian's uninstrumented libgrpc, which TSan cannot see.
    # cpu_thread_pool_test adds the kernels' thread pool.
    thread) build_dir=build-tsan; sanitizers=thread
      tests=("${engine_tests[@]}" "${server_tests[@]}" cpu_thread_pool_test) ;;
    *) echo "sanitize: unknown kind $kind (address or thread)" >&2; exit 2 ;;
  esac
  options=(-DMLASERVE_ENABLE_CUDA=OFF)
  if [ "$kind" = address ]; then options=("${cuda_options[@]}"); fi
  cmake -S . -B "$build_dir" -G Ninja -DMLASERVE_SANITIZE="$sanitizers" "${options[@]}" >/dev/null
  cmake --build "$build_dir" --target "${tests[@]}" -- -j"$(nproc)"
  pattern=$(IFS='|'; echo "${tests[*]}")
  (cd "$build_dir" && ctest --output-on-failure -j"$(nproc)" -R "^($pattern)$")
done
