// Instruction-set selection for the CPU backend. The kernels exist in four builds (AVX-512 with
// the BF16 dot-product instructions, AVX-512, AVX2+FMA and portable scalar code); the best one
// the processor supports is chosen at run time, optionally capped by the environment so that
// tests can exercise every build on one machine.
#ifndef MLASERVE_KERNELS_CPU_CPU_FEATURES_H_
#define MLASERVE_KERNELS_CPU_CPU_FEATURES_H_

#include <string_view>

namespace mlaserve {

// Ordered from least to most capable.
enum class CpuIsa { kScalar, kAvx2, kAvx512, kAvx512Bf16 };

std::string_view CpuIsaName(CpuIsa isa);  // "scalar", "avx2", "avx512" or "avx512_bf16"

// The most capable ISA this processor runs: kAvx512 needs AVX-512 F/BW/VL/DQ, kAvx512Bf16 also
// AVX512_BF16, kAvx2 needs AVX2, FMA and F16C.
CpuIsa DetectCpuIsa();

// DetectCpuIsa(), capped by the environment variable MLASERVE_CPU_ISA
// (avx512_bf16 | avx512 | avx2 | scalar)
// when it is set. A request above what the processor supports yields the detected ISA; an
// unknown value is ignored. Read on each call (backends call it once, at construction).
CpuIsa SelectCpuIsa();

}  // namespace mlaserve

#endif  // MLASERVE_KERNELS_CPU_CPU_FEATURES_H_
