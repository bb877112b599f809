#include "kernels/cpu/cpu_features.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>

namespace mlaserve {

std::string_view CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar:
      return "scalar";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx512:
      return "avx512";
    case CpuIsa::kAvx512Bf16:
      return "avx512_bf16";
  }
  return "?";
}

CpuIsa DetectCpuIsa() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    return __builtin_cpu_supports("avx512bf16") ? CpuIsa::kAvx512Bf16 : CpuIsa::kAvx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c")) {
    return CpuIsa::kAvx2;
  }
  return CpuIsa::kScalar;
}

CpuIsa SelectCpuIsa() {
  const CpuIsa detected = DetectCpuIsa();
  const char* env = std::getenv("MLASERVE_CPU_ISA");
  if (env == nullptr) return detected;
  const std::string_view want(env);
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Bf16}) {
    if (want == CpuIsaName(isa)) return std::min(isa, detected);
  }
  return detected;
}

}  // namespace mlaserve
