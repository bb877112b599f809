// The portable build of CpuKernels: the same algorithms as the SIMD builds with one-lane
// "vectors", for processors without AVX2 and as a baseline in tests.
#include <cmath>
#include <cstdint>

#include "kernels/cpu/cpu_gemm_impl.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/cpu_vector_impl.h"

namespace mlaserve {
namespace {

struct Scalar {
  using F = float;
  static constexpr int kW = 1;
  static constexpr int kGemmMr = 4;
  static constexpr int kGemmNv = 4;
  static constexpr int kRegisters = 16;  // xmm registers, one float each

  static F Zero() { return 0.0f; }
  static F Set1(float x) { return x; }
  static F Load(const float* p) { return *p; }
  static F Load(const uint16_t* p) {
    const uint32_t u = static_cast<uint32_t>(*p) << 16;
    float f;
    __builtin_memcpy(&f, &u, sizeof f);
    return f;
  }
  template <class T>
  static F LoadN(const T* p, int64_t n) {
    return n > 0 ? Load(p) : 0.0f;
  }
  static void Store(float* p, F x) { *p = x; }
  static void StoreN(float* p, F x, int64_t n) {
    if (n > 0) *p = x;
  }
  static F Add(F a, F b) { return a + b; }
  static F Sub(F a, F b) { return a - b; }
  static F Mul(F a, F b) { return a * b; }
  static F Div(F a, F b) { return a / b; }
  static F Max(F a, F b) { return a > b ? a : b; }
  static F Fma(F a, F b, F c) { return a * b + c; }
  static float ReduceAdd(F x) { return x; }
  static float Lane0(F x) { return x; }
  static F Exp(F x) { return std::exp(x); }
  // Double "lanes", as in the SIMD builds; exp is std::exp itself.
  using D = double;
  static constexpr int kDw = 1;
  static D WidenN(const float* p, int64_t n) { return n > 0 ? *p : 0.0; }
  static void StoreDN(double* p, D x, int64_t n) {
    if (n > 0) *p = x;
  }
  static D SubD(D a, D b) { return a - b; }
  static D DivD(D a, D b) { return a / b; }
  static D Set1D(double x) { return x; }
  static D ExpD(D x) { return std::exp(x); }
  static void LoadBf16Pairs(const uint32_t* p, F& even, F& odd) {
    const uint32_t lo = *p << 16, hi = *p & 0xffff0000u;
    __builtin_memcpy(&even, &lo, sizeof even);
    __builtin_memcpy(&odd, &hi, sizeof odd);
  }
  static void Transpose32(const void* src, int64_t src_ld_bytes, void* dst, int64_t dst_ld) {
    __builtin_memcpy(dst, src, 4);
  }
};

}  // namespace

const CpuKernels& ScalarKernels() {
  static const CpuKernels kernels = cpu_impl::MakeCpuKernels<Scalar>(CpuIsa::kScalar);
  return kernels;
}

const CpuKernels& GetCpuKernels(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAmxBf16:
      return AmxBf16Kernels();
    case CpuIsa::kAvx512Bf16:
      return Avx512Bf16Kernels();
    case CpuIsa::kAvx512:
      return Avx512Kernels();
    case CpuIsa::kAvx2:
      return Avx2Kernels();
    case CpuIsa::kScalar:
      break;
  }
  return ScalarKernels();
}

}  // namespace mlaserve
