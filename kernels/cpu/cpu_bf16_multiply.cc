#include "kernels/cpu/cpu_bf16_multiply.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "kernels/check.h"
#include "kernels/cpu/cpu_kernels.h"

namespace mlaserve {
namespace {

// The probe's two GEMMs, both with their weights in L2 so that the multiply, not the memory,
// is timed: a block of prompt rows on the packed path and a full chunk of decode rows on the
// dot-product path, about 50 and 8 MFLOP.
struct ProbeShape {
  int64_t m, n, k;
  GemmPath path;
};
constexpr ProbeShape kShapes[] = {{96, 256, 1024, GemmPath::kPacked},
                                  {16, 256, 1024, GemmPath::kFixedDot}};

struct ProbeBuffers {
  std::vector<float> a, c;
  std::vector<uint16_t> b;
  float* scratch;

  ProbeBuffers() {
    int64_t a_floats = 0, b_elems = 0, c_floats = 0;
    for (const ProbeShape& s : kShapes) {
      a_floats = std::max(a_floats, s.m * s.k);
      b_elems = std::max(b_elems, s.n * s.k);
      c_floats = std::max(c_floats, s.m * s.n);
    }
    a.resize(a_floats);
    b.resize(b_elems);
    c.resize(c_floats);
    // Normal values of both signs (no denormal can slow one build down).
    for (size_t i = 0; i < a.size(); ++i) a[i] = 0.25f + static_cast<float>(i % 97) / 64.0f;
    for (size_t i = 0; i < b.size(); ++i) b[i] = (i % 3 == 0 ? 0xbc00 : 0x3c00) | (i % 61);
    scratch = static_cast<float*>(std::aligned_alloc(64, kGemmScratchFloats * sizeof(float)));
    MLASERVE_CHECK_MSG(scratch != nullptr, "bf16 multiply probe allocation failed");
  }
  ~ProbeBuffers() { std::free(scratch); }
};

// Seconds for `kernels` to run every probe shape once with bf16 activations.
double TimeShapes(const CpuKernels& kernels, ProbeBuffers& buf) {
  const auto start = std::chrono::steady_clock::now();
  for (const ProbeShape& s : kShapes) {
    kernels.gemm({.a = buf.a.data(), .lda = s.k, .b = buf.b.data(), .ldb = s.k,
                  .c = buf.c.data(), .ldc = s.n, .m = s.m, .k = s.k, .n_end = s.n,
                  .path = s.path, .a_bf16 = true},
                 buf.scratch);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

Bf16MultiplyChoice ProbeBf16Multiply() {
  MLASERVE_CHECK(DetectCpuIsa() >= CpuIsa::kAvx512Bf16);
  const CpuKernels& dot = Avx512Bf16Kernels();
  const CpuKernels& fma = Avx512Kernels();
  double flops = 0;
  for (const ProbeShape& s : kShapes) flops += 2.0 * static_cast<double>(s.m * s.n * s.k);
  ProbeBuffers buf;
  // Warm-up (caches, and the clock of a core that was idle), then rounds that alternate which
  // build goes first; each build is judged by its median round.
  for (int i = 0; i < 3; ++i) {
    TimeShapes(dot, buf);
    TimeShapes(fma, buf);
  }
  constexpr int kRounds = 9;
  double dot_s[kRounds], fma_s[kRounds];
  for (int r = 0; r < kRounds; ++r) {
    if (r % 2 == 0) {
      dot_s[r] = TimeShapes(dot, buf);
      fma_s[r] = TimeShapes(fma, buf);
    } else {
      fma_s[r] = TimeShapes(fma, buf);
      dot_s[r] = TimeShapes(dot, buf);
    }
  }
  std::sort(dot_s, dot_s + kRounds);
  std::sort(fma_s, fma_s + kRounds);
  Bf16MultiplyChoice choice;
  choice.source = "probe";
  choice.dot_gflops = flops / dot_s[kRounds / 2] / 1e9;
  choice.fma_gflops = flops / fma_s[kRounds / 2] / 1e9;
  choice.isa = choice.fma_gflops > kBf16FmaMargin * choice.dot_gflops ? CpuIsa::kAvx512
                                                                      : CpuIsa::kAvx512Bf16;
  return choice;
}

Bf16MultiplyChoice SelectIsaForActivations(DType activation_dtype) {
  Bf16MultiplyChoice choice;
  choice.isa = SelectCpuIsa();
  choice.source = "fixed";
  if (activation_dtype != DType::kBF16 || choice.isa != CpuIsa::kAvx512Bf16) return choice;
  if (std::getenv("MLASERVE_CPU_ISA") != nullptr) {
    choice.source = "MLASERVE_CPU_ISA";
    return choice;
  }
  static const Bf16MultiplyChoice probed = ProbeBf16Multiply();
  return probed;
}

}  // namespace mlaserve
