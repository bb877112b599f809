// Inputs shared by the CPU kernel benchmarks (mlaserve-kernel-bench, mlaserve-kernel-ab): host
// buffers with ordinary values, and the aligned order of a uniformly random routing, at
// DeepSeek-V2-Lite's shapes.
#ifndef MLASERVE_TOOLS_BENCH_BENCH_INPUTS_H_
#define MLASERVE_TOOLS_BENCH_BENCH_INPUTS_H_

#include <cstdint>
#include <initializer_list>
#include <random>
#include <vector>

#include "kernels/backend.h"

namespace mlaserve::bench {

constexpr int64_t kHidden = 2048;
constexpr int64_t kDenseInter = 10944;
constexpr int64_t kExperts = 64;
constexpr int64_t kExpertInter = 1408;
constexpr int64_t kTopK = 6;
constexpr int kAlignBlock = 16;

// A buffer allocated by `backend` (a host backend: its memory is written in place):
// uninitialized, or uniform values in [-1, 1) of `dtype` when a seed is given, or the given
// integers.
struct Buffer {
  DeviceBuffer memory;
  TensorView view;

  Buffer(Backend& backend, DType dtype, std::initializer_list<int64_t> shape);
  Buffer(Backend& backend, DType dtype, std::initializer_list<int64_t> shape, uint32_t seed);
  Buffer(Backend& backend, std::initializer_list<int64_t> shape,
         const std::vector<int32_t>& values);
};

// The aligned order (MoeAlignBlockSize on `backend`) of one uniformly random routing of
// `tokens` tokens, each to kTopK distinct experts of kExperts.
struct Routing {
  static int64_t AlignedLength(int64_t tokens) {
    return tokens * kTopK + kExperts * (kAlignBlock - 1);
  }

  Routing(Backend& backend, int64_t tokens, std::mt19937& rng);

  Buffer sorted, blocks, offsets, post_pad;
  int64_t active_experts = 0;
};

}  // namespace mlaserve::bench

#endif  // MLASERVE_TOOLS_BENCH_BENCH_INPUTS_H_
