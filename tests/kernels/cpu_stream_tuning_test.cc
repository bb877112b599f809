// The decode prefetch tuning: the environment's choice wins over the probe, every tuning gives
// the oracle's decode GEMM result (a prefetch must never change a value), and names round-trip.
#include "kernels/cpu/cpu_stream_tuning.h"

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/ref/ref_backend.h"
#include "tests/kernels/kernel_test_util.h"

namespace mlaserve::test {
namespace {

TEST(CpuStreamTuningTest, EnvironmentChoiceIsInstalledOnce) {
  setenv("MLASERVE_CPU_PREFETCH", "t1:3", 1);
  CpuBackend cpu(1);  // installs the choice at construction
  const StreamTuningChoice& choice = TuneStreaming(cpu.context());
  EXPECT_EQ(choice.source, "MLASERVE_CPU_PREFETCH");
  EXPECT_EQ(StreamTuningName(choice.tuning), "t1:3");
  EXPECT_EQ(StreamTuningName(CurrentStreamTuning()), "t1:3");
  setenv("MLASERVE_CPU_PREFETCH", "none", 1);
  EXPECT_EQ(&TuneStreaming(cpu.context()), &choice);  // chosen once per process
  unsetenv("MLASERVE_CPU_PREFETCH");
}

TEST(CpuStreamTuningTest, ProbePicksAMeasuredCandidate) {
  CpuBackend cpu(2);
  const StreamTuningChoice choice = ProbeStreamTuning(cpu.context());
  EXPECT_EQ(choice.source, "probe");
  EXPECT_GT(choice.probe_gbps, 0.1);
  EXPECT_EQ(StreamTuningName(CurrentStreamTuning()), StreamTuningName(choice.tuning));
  const std::string name = StreamTuningName(choice.tuning);
  EXPECT_TRUE(name == "none" || name == "nta:1" || name == "nta:4" || name == "t1:1" ||
              name == "t1:2" || name == "t1:4")
      << name;
  // Every candidate is reported, the chosen one at the rate it won with.
  for (const char* c : {"none=", "nta:1=", "nta:4=", "t1:1=", "t1:2=", "t1:4="}) {
    EXPECT_NE(choice.probe_table.find(c), std::string::npos) << c << " in " << choice.probe_table;
  }
  char chosen[48];
  std::snprintf(chosen, sizeof(chosen), "%s=%.1f", name.c_str(), choice.probe_gbps);
  EXPECT_NE(choice.probe_table.find(chosen), std::string::npos) << choice.probe_table;
}

TEST(CpuStreamTuningTest, EveryTuningGivesTheOraclesDecodeGemm) {
  auto ref = MakeRefBackend(DType::kF32);
  CpuBackend cpu(2);
  std::mt19937 rng(5);
  const int64_t m = 3, n = 301, k = 1100;
  TestTensor a = RandomTensor(*ref, rng, DType::kF32, {m, k});
  TestTensor b = RandomTensor(*ref, rng, DType::kBF16, {n, k});
  TestTensor out_ref(*ref, DType::kF32, {m, n});
  ref->Gemm({.a = a.view(), .b = b.view(), .out = out_ref.view()});
  TestTensor a_cpu = a.CloneTo(cpu), b_cpu = b.CloneTo(cpu);
  for (StreamTuning t : {StreamTuning{0, false}, StreamTuning{1, true}, StreamTuning{4, true},
                         StreamTuning{2, false}}) {
    SetStreamTuning(t);
    TestTensor out(cpu, DType::kF32, {m, n});
    cpu.Gemm({.a = a_cpu.view(), .b = b_cpu.view(), .out = out.view()});
    ExpectClose(out.Read(), out_ref.Read(), 1e-5, 1e-5, StreamTuningName(t), out_ref.shape());
  }
}

}  // namespace
}  // namespace mlaserve::test
