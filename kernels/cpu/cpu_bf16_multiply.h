// Which kernel build multiplies bf16 activations (--dtype=bfloat16) by bf16 weights on a
// processor with AVX512_BF16 and no usable AMX. The avx512_bf16 build issues VDPBF16PS (32
// products per instruction); the avx512 build widens each weight vector to f32 and issues two
// FMAs per 32 products. Which is faster depends on the processor, not on the instruction set:
// on an AMD EPYC (Zen 4) the dot product prefilled 1.6-1.8x faster than f32 mode, on an Intel
// Xeon (AVX-512 BF16, run without its tiles) 0.6-0.7x (docs/performance.md). So a bf16-mode
// backend on such a processor times both builds' GEMMs at start-up and keeps the dot product
// unless the FMAs are clearly faster. In f32 mode the two builds run the same code, and the
// amx_bf16 build multiplies its prompt rows on tiles, so neither is probed.
//
// Both builds multiply exactly (a bf16 x bf16 product is exact in f32) and differ only in the
// order of the sums, so the choice may change low bits of bf16-mode results between hosts: it is
// logged at start-up, and MLASERVE_CPU_ISA pins it (avx512_bf16 or avx512).
//
// Thread-safety: may be called from any thread; the probe runs once per process.
#ifndef MLASERVE_KERNELS_CPU_CPU_BF16_MULTIPLY_H_
#define MLASERVE_KERNELS_CPU_CPU_BF16_MULTIPLY_H_

#include <string>

#include "kernels/cpu/cpu_features.h"
#include "kernels/dtype.h"

namespace mlaserve {

struct Bf16MultiplyChoice {
  CpuIsa isa = CpuIsa::kScalar;
  // "fixed": nothing to choose (f32 activations, or a build other than avx512_bf16);
  // "MLASERVE_CPU_ISA": the environment chose the build; "probe": the timing below did.
  std::string source;
  // The probe's single-thread rates on its prompt-sized and decode-sized GEMMs together, in
  // GFLOP/s (0 without a probe): the avx512_bf16 build (dot) and the avx512 build (fma).
  double dot_gflops = 0;
  double fma_gflops = 0;
};

// The fraction by which the FMAs must beat the dot product for the probe to take them: hosts
// where the dot product is the faster one keep it in every start-up, whatever the noise.
inline constexpr double kBf16FmaMargin = 1.10;

// The kernel build for a backend with `activation_dtype` on this processor: SelectCpuIsa(),
// except with kBF16 activations where that is kAvx512Bf16 and MLASERVE_CPU_ISA is unset, where
// the probe decides (kAvx512 when fma_gflops > kBf16FmaMargin * dot_gflops; a few
// milliseconds on one thread, run on the first such call and remembered).
Bf16MultiplyChoice SelectIsaForActivations(DType activation_dtype);

// The probe alone, run anew (tests; `SelectIsaForActivations` remembers its first result).
// REQUIRES: the processor runs the avx512_bf16 build.
Bf16MultiplyChoice ProbeBf16Multiply();

}  // namespace mlaserve

#endif  // MLASERVE_KERNELS_CPU_CPU_BF16_MULTIPLY_H_
