#include "tools/bench/bench_inputs.h"

#include <algorithm>
#include <utility>

#include "kernels/check.h"
#include "kernels/dtype.h"

namespace mlaserve::bench {

Buffer::Buffer(Backend& backend, DType dtype, std::initializer_list<int64_t> shape) {
  int64_t numel = 1;
  for (int64_t s : shape) numel *= s;
  absl::StatusOr<DeviceBuffer> buffer = backend.Allocate(numel * DTypeSize(dtype));
  MLASERVE_CHECK_MSG(buffer.ok(), "benchmark buffer allocation failed");
  memory = *std::move(buffer);
  view = TensorView(memory.data(), dtype, shape);
}

Buffer::Buffer(Backend& backend, DType dtype, std::initializer_list<int64_t> shape,
               uint32_t seed)
    : Buffer(backend, dtype, shape) {
  // A hash of the index rather than a sequential generator: filling the 1.1 GB of expert
  // weights stays quick, and the values only need to be ordinary numbers.
  for (int64_t i = 0; i < view.numel(); ++i) {
    uint64_t h = (static_cast<uint64_t>(i) + seed * 0x9e3779b97f4a7c15ull) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
    const float x = static_cast<float>(h >> 40) * (2.0f / 16777216.0f) - 1.0f;
    if (dtype == DType::kBF16) {
      view.ptr<uint16_t>()[i] = F32ToBf16(x);
    } else {
      view.ptr<float>()[i] = x;
    }
  }
}

Buffer::Buffer(Backend& backend, std::initializer_list<int64_t> shape,
               const std::vector<int32_t>& values)
    : Buffer(backend, DType::kI32, shape) {
  for (size_t i = 0; i < values.size(); ++i) view.ptr<int32_t>()[i] = values[i];
}

Routing::Routing(Backend& backend, int64_t tokens, std::mt19937& rng)
    : sorted(backend, DType::kI32, {AlignedLength(tokens)}),
      blocks(backend, DType::kI32, {(AlignedLength(tokens) + kAlignBlock - 1) / kAlignBlock}),
      offsets(backend, DType::kI32, {kExperts + 1}),
      post_pad(backend, DType::kI32, {1}) {
  std::vector<int32_t> ids(tokens * kTopK), experts(kExperts);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int32_t e = 0; e < kExperts; ++e) experts[e] = e;
    std::shuffle(experts.begin(), experts.end(), rng);
    for (int64_t k = 0; k < kTopK; ++k) ids[t * kTopK + k] = experts[k];
  }
  Buffer topk_ids(backend, {tokens, kTopK}, ids);
  backend.MoeAlignBlockSize({.topk_ids = topk_ids.view,
                             .num_experts = static_cast<int>(kExperts),
                             .block_size = kAlignBlock,
                             .sorted_ids = sorted.view,
                             .block_expert_ids = blocks.view,
                             .expert_offsets = offsets.view,
                             .num_tokens_post_pad = post_pad.view});
  for (int64_t e = 0; e < kExperts; ++e) {
    active_experts += offsets.view.ptr<int32_t>()[e + 1] > offsets.view.ptr<int32_t>()[e];
  }
}

}  // namespace mlaserve::bench
