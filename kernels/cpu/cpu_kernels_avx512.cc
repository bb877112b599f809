// The AVX-512 builds of CpuKernels (compiled with -mavx512f/bw/vl/dq/bf16; see
// kernels/CMakeLists.txt): Avx512 uses no BF16 instruction, so it runs on every AVX-512
// processor; Avx512Bf16 adds the dot product. The traits are in cpu_avx512_traits.h.
#include "kernels/cpu/cpu_avx512_traits.h"
#include "kernels/cpu/cpu_gemm_impl.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_vector_impl.h"

namespace mlaserve {

const CpuKernels& Avx512Kernels() {
  static const CpuKernels kernels = cpu_impl::MakeCpuKernels<Avx512>(CpuIsa::kAvx512);
  return kernels;
}

const CpuKernels& Avx512Bf16Kernels() {
  static const CpuKernels kernels = cpu_impl::MakeCpuKernels<Avx512Bf16>(CpuIsa::kAvx512Bf16);
  return kernels;
}

}  // namespace mlaserve
