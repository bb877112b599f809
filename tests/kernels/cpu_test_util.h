// Fixture shared by the CPU-against-oracle tests: each test runs once per kernel build
// (amx_bf16, avx512_bf16, avx512, avx2, scalar), forced through MLASERVE_CPU_ISA and skipped
// for a build the processor cannot run, and once on the AMX build over software tiles. Inputs
// are made on the ref backend and cloned to the CPU backend.
#ifndef MLASERVE_TESTS_KERNELS_CPU_TEST_UTIL_H_
#define MLASERVE_TESTS_KERNELS_CPU_TEST_UTIL_H_

#include <memory>
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/kernels/parity/parity.h"

namespace mlaserve::test {

// The kernel's own reading of the processor, for tests to check cpuid-based code against: the
// first processor's "key : value" field of /proc/cpuinfo ("" when absent), and the words of
// its flags line (empty when there is none).
std::string ProcCpuinfoField(const std::string& key);
std::set<std::string> ProcCpuinfoFlags();

// Parameter: the ISA name ("amx_bf16", "avx512_bf16", "avx512", "avx2" or "scalar"), or
// kAmxEmulated: the AMX build over the software tiles (AmxEmulatedKernels), which runs
// wherever avx512_bf16 does.
inline constexpr char kAmxEmulated[] = "amx_emulated";

class CpuVsRefTest : public ::testing::TestWithParam<std::string> {
 protected:
  // Two threads: every op takes its multithreaded path, and odd sizes split unevenly.
  static constexpr int kThreads = 2;

  void SetUp() override;
  // A backend of this test's ISA (or the emulated AMX build) on `threads` threads.
  std::unique_ptr<CpuBackend> NewCpu(int threads, bool batch_invariant = false,
                                     DType activations = DType::kF32) const;

  Backend& ref() { return *ref_; }
  Backend& cpu() { return *cpu_; }
  // The same ISA and threads with batch_invariant set (--deterministic).
  Backend& cpu_invariant() { return *cpu_invariant_; }
  // Both backends with bf16 activations (--dtype=bfloat16).
  Backend& ref_bf16() { return *ref_bf16_; }
  Backend& cpu_bf16() { return *cpu_bf16_; }
  // bf16 activations with batch_invariant set (--dtype=bfloat16 --deterministic).
  Backend& cpu_invariant_bf16() { return *cpu_invariant_bf16_; }
  // The backends the shared parity bodies (tests/kernels/parity) compare.
  ParityBackends parity() { return {ref(), ref_bf16(), cpu(), cpu_bf16()}; }

 private:
  std::unique_ptr<Backend> ref_;
  std::unique_ptr<Backend> ref_bf16_;
  std::unique_ptr<CpuBackend> cpu_;
  std::unique_ptr<CpuBackend> cpu_invariant_;
  std::unique_ptr<CpuBackend> cpu_bf16_;
  std::unique_ptr<CpuBackend> cpu_invariant_bf16_;
};

// Instantiates a CpuVsRefTest-derived suite for every ISA.
#define MLASERVE_INSTANTIATE_CPU_ISAS(suite)                                              \
  INSTANTIATE_TEST_SUITE_P(Isa, suite,                                                    \
                           ::testing::Values("amx_bf16", "amx_emulated", "avx512_bf16",   \
                                             "avx512", "avx2", "scalar"),                 \
                           [](const ::testing::TestParamInfo<std::string>& info) {        \
                             return info.param;                                           \
                           })

}  // namespace mlaserve::test

#endif  // MLASERVE_TESTS_KERNELS_CPU_TEST_UTIL_H_
