// The AMX build of CpuKernels (compiled with the AVX-512 flags plus -mamx-tile/-mamx-bf16; see
// kernels/CMakeLists.txt): the AVX-512 BF16 build with the packed GEMM on tiles
// (cpu_amx_gemm_impl.h). AmxEmulatedKernels runs the same code over the software tiles.
#include "kernels/cpu/cpu_amx_gemm_impl.h"
#include "kernels/cpu/cpu_amx_tiles.h"
#include "kernels/cpu/cpu_avx512_traits.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_vector_impl.h"

namespace mlaserve {
namespace {

template <class Tiles>
CpuKernels MakeAmxKernels() {
  CpuKernels k = cpu_impl::MakeCpuKernels<Avx512Bf16>(CpuIsa::kAmxBf16);
  k.gemm = &cpu_impl::AmxGemmImpl<Tiles>::Run;
  k.expert_rows_by_dot = false;  // the experts' packed rows run on tiles
  k.fixed_tiles = true;
  return k;
}

}  // namespace

const CpuKernels& AmxBf16Kernels() {
  static const CpuKernels kernels = MakeAmxKernels<HardwareTiles>();
  return kernels;
}

const CpuKernels& AmxEmulatedKernels() {
  static const CpuKernels kernels = MakeAmxKernels<EmulatedTiles>();
  return kernels;
}

}  // namespace mlaserve
