#include "kernels/shape_check.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace mlaserve {
namespace {

std::string Describe(const TensorView& v) {
  std::string s(DTypeName(v.dtype()));
  s += " [";
  for (int d = 0; d < v.ndim(); ++d) {
    if (d > 0) s += ", ";
    s += std::to_string(v.size(d));
  }
  s += "] strides [";
  for (int d = 0; d < v.ndim(); ++d) {
    if (d > 0) s += ", ";
    s += std::to_string(v.stride(d));
  }
  return s + "]";
}

std::string DescribeShape(std::initializer_list<int64_t> shape) {
  std::string s = "[";
  bool first = true;
  for (int64_t e : shape) {
    if (!first) s += ", ";
    first = false;
    s += e == kAnyDim ? std::string("*") : std::to_string(e);
  }
  return s + "]";
}

[[noreturn]] void Fail(const char* name, const std::string& why, const TensorView& v) {
  std::fprintf(stderr, "MLASERVE_CHECK failed: %s: %s; got %s\n", name, why.c_str(),
               v.empty() ? "an absent view" : Describe(v).c_str());
  std::abort();
}

}  // namespace

void CheckTensor(const TensorView& v, const char* name, DTypeSet dtypes,
                 std::initializer_list<int64_t> shape) {
  // The message is built only on failure: checks run on every op of the hot path, which must
  // not allocate.
  auto fail_shape = [&] { Fail(name, "expected shape " + DescribeShape(shape), v); };
  if (v.empty()) fail_shape();
  if (!dtypes.contains(v.dtype())) Fail(name, "unexpected dtype", v);
  if (v.ndim() != static_cast<int>(shape.size())) fail_shape();
  int d = 0;
  for (int64_t e : shape) {
    if (e != kAnyDim && v.size(d) != e) fail_shape();
    ++d;
  }
  if (v.ndim() > 0 && v.size(-1) > 1 && v.stride(-1) != 1) {
    Fail(name, "innermost dimension must be contiguous", v);
  }
}

void CheckContiguous(const TensorView& v, const char* name) {
  if (!v.is_contiguous()) Fail(name, "must be contiguous", v);
}

bool Overlaps(const TensorView& a, const TensorView& b) {
  if (a.empty() || b.empty() || a.numel() == 0 || b.numel() == 0) return false;
  auto span_bytes = [](const TensorView& v) {
    int64_t last = 0;
    for (int d = 0; d < v.ndim(); ++d) {
      MLASERVE_CHECK(v.stride(d) >= 0);
      last += (v.size(d) - 1) * v.stride(d);
    }
    return (last + 1) * static_cast<int64_t>(DTypeSize(v.dtype()));
  };
  const auto a0 = reinterpret_cast<uintptr_t>(a.data());
  const auto b0 = reinterpret_cast<uintptr_t>(b.data());
  return a0 < b0 + static_cast<uintptr_t>(span_bytes(b)) &&
         b0 < a0 + static_cast<uintptr_t>(span_bytes(a));
}

}  // namespace mlaserve

namespace mlaserve {

GemmShape CheckGemm(const GemmParams& p) {
  const bool batched = p.a.ndim() == 3;
  if (batched) {
    CheckTensor(p.a, "Gemm.a", DType::kF32, {kAnyDim, kAnyDim, kAnyDim});
  } else {
    CheckTensor(p.a, "Gemm.a", DType::kF32, {kAnyDim, kAnyDim});
  }
  const int64_t batch = batched ? p.a.size(0) : 1;
  const int64_t m = p.a.size(-2), k = p.a.size(-1);
  if (batched) {
    CheckTensor(p.b, "Gemm.b", kWeightDTypes, {batch, kAnyDim, k});
    CheckTensor(p.out, "Gemm.out", DType::kF32, {batch, m, p.b.size(1)});
  } else {
    CheckTensor(p.b, "Gemm.b", kWeightDTypes, {kAnyDim, k});
    CheckTensor(p.out, "Gemm.out", DType::kF32, {m, p.b.size(0)});
  }
  MLASERVE_CHECK(!Overlaps(p.out, p.a) && !Overlaps(p.out, p.b));
  return {batched, batch, m, k, p.b.size(-2)};
}

MoeExpertsShape CheckMoeExperts(const MoeExpertsParams& p) {
  MoeExpertsShape s{};
  CheckTensor(p.x, "MoeExperts.x", DType::kF32, {kAnyDim, kAnyDim});
  s.num_tokens = p.x.size(0);
  s.hidden = p.x.size(1);
  CheckTensor(p.w13, "MoeExperts.w13", kWeightDTypes, {kAnyDim, kAnyDim, s.hidden});
  CheckContiguous(p.w13, "MoeExperts.w13");
  s.num_experts = p.w13.size(0);
  s.inter = p.w13.size(1) / 2;
  MLASERVE_CHECK(p.w13.size(1) == 2 * s.inter);
  CheckTensor(p.w2, "MoeExperts.w2", kWeightDTypes, {s.num_experts, s.hidden, s.inter});
  CheckContiguous(p.w2, "MoeExperts.w2");
  CheckTensor(p.topk_weights, "MoeExperts.topk_weights", DType::kF32, {s.num_tokens, kAnyDim});
  s.top_k = p.topk_weights.size(1);
  s.num_pairs = s.num_tokens * s.top_k;
  s.block = p.block_size;
  MLASERVE_CHECK(s.block >= 1);
  s.len = s.num_pairs + s.num_experts * (s.block - 1);
  CheckTensor(p.sorted_ids, "MoeExperts.sorted_ids", DType::kI32, {s.len});
  CheckTensor(p.block_expert_ids, "MoeExperts.block_expert_ids", DType::kI32,
              {(s.len + s.block - 1) / s.block});
  CheckTensor(p.expert_offsets, "MoeExperts.expert_offsets", DType::kI32, {s.num_experts + 1});
  CheckTensor(p.num_tokens_post_pad, "MoeExperts.num_tokens_post_pad", DType::kI32, {1});
  CheckTensor(p.workspace_gate_up, "MoeExperts.workspace_gate_up", DType::kF32,
              {s.len, 2 * s.inter});
  CheckTensor(p.workspace_act, "MoeExperts.workspace_act", DType::kF32, {s.len, s.inter});
  CheckTensor(p.workspace_down, "MoeExperts.workspace_down", DType::kF32, {s.len, s.hidden});
  CheckTensor(p.out, "MoeExperts.out", DType::kF32, {s.num_tokens, s.hidden});
  s.total = p.num_tokens_post_pad.ptr<int32_t>()[0];
  MLASERVE_CHECK(s.total >= 0 && s.total <= s.len && s.total % s.block == 0);
  return s;
}

}  // namespace mlaserve
