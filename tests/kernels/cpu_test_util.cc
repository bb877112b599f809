#include "tests/kernels/cpu_test_util.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/ref/ref_backend.h"

namespace mlaserve::test {

std::string ProcCpuinfoField(const std::string& key) {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key, 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const size_t start = line.find_first_not_of(' ', colon + 1);
    return start == std::string::npos ? "" : line.substr(start);
  }
  return "";
}

std::set<std::string> ProcCpuinfoFlags() {
  std::set<std::string> flags;
  std::istringstream words(ProcCpuinfoField("flags"));
  for (std::string w; words >> w;) flags.insert(w);
  return flags;
}

std::unique_ptr<CpuBackend> CpuVsRefTest::NewCpu(int threads, bool batch_invariant,
                                                 DType activations) const {
  // The AMX builds put the decode rows of every bf16 weight on tiles, so that the batch
  // invariance tests cover GemmPath::kFixedTiles (the default threshold leaves test-sized
  // weights on the dot products, which the avx512_bf16 instance covers).
  ::setenv("MLASERVE_CPU_DECODE_TILES", "all", 1);
  std::unique_ptr<CpuBackend> backend;
  if (GetParam() == kAmxEmulated) {
    backend = std::make_unique<CpuBackend>(AmxEmulatedKernels(), threads, batch_invariant,
                                           activations);
  } else {
    ::setenv("MLASERVE_CPU_ISA", GetParam().c_str(), 1);
    backend = std::make_unique<CpuBackend>(threads, batch_invariant, activations);
    ::unsetenv("MLASERVE_CPU_ISA");
  }
  ::unsetenv("MLASERVE_CPU_DECODE_TILES");
  return backend;
}

void CpuVsRefTest::SetUp() {
  if (GetParam() == kAmxEmulated && DetectCpuIsa() < CpuIsa::kAvx512Bf16) {
    GTEST_SKIP() << "the emulated AMX kernels need AVX512_BF16";
  }
  cpu_ = NewCpu(kThreads);
  cpu_invariant_ = NewCpu(kThreads, /*batch_invariant=*/true);
  cpu_bf16_ = NewCpu(kThreads, /*batch_invariant=*/false, DType::kBF16);
  cpu_invariant_bf16_ = NewCpu(kThreads, /*batch_invariant=*/true, DType::kBF16);
  if (GetParam() != kAmxEmulated && CpuIsaName(cpu_->isa()) != GetParam()) {
    GTEST_SKIP() << "this processor cannot run the " << GetParam() << " kernels";
  }
  ref_ = MakeRefBackend();
  ref_bf16_ = MakeRefBackend(DType::kBF16);
}

}  // namespace mlaserve::test
