// The decode prefetch tuning: the environment's choice wins over the probe, every tuning gives
// the oracle's decode GEMM result (a prefetch must never change a value), names round-trip, and
// the online tuner follows the rates it is given (synthetic call times) and changes no value of a
// decode row it times.
#include "kernels/cpu/cpu_stream_tuning.h"

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

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

// Feeds the online tuner `calls` calls over one matrix, each timed as if it read at
// rate(tuning name) GB/s; stops at the first switch when `until_switch`.
void FeedOnline(int calls, double (*rate)(const std::string&), bool until_switch) {
  static int weights;
  const int64_t before = OnlineStreamTuningSwitches();
  for (int i = 0; i < calls; ++i) {
    const OnlineStreamCall call = BeginOnlineStreamCall(&weights, kOnlineMinBytes);
    ASSERT_GE(call.candidate, 0);
    const double gbps = rate(StreamTuningName(CurrentStreamTuning()));
    EndOnlineStreamCall(call, static_cast<double>(kOnlineMinBytes) / (gbps * 1e9));
    if (until_switch && OnlineStreamTuningSwitches() > before) return;
  }
}

TEST(OnlineStreamTuningTest, MovesToACandidateThatClearlyBeatsTheChoice) {
  SetOnlineStreamTuning(true, {4, true});  // nta:4
  const int64_t before = OnlineStreamTuningSwitches();
  // t1:1 reads twice as fast; everything else a little slower than the choice.
  auto rates = [](const std::string& t) { return t == "t1:1" ? 20.0 : t == "nta:4" ? 10.0 : 9.0; };
  // Each other candidate is tried every kOnlineExploreEvery calls in turn; t1:1 needs a full
  // window of ratios.
  FeedOnline(2 * kOnlineExploreEvery * 5 * kOnlineWindow, rates, /*until_switch=*/true);
  EXPECT_EQ(OnlineStreamTuningSwitches(), before + 1);
  EXPECT_EQ(StreamTuningName(CurrentStreamTuning()), "t1:1");
  // From there nothing beats it.
  FeedOnline(4 * kOnlineExploreEvery * 5 * kOnlineWindow, rates, /*until_switch=*/false);
  EXPECT_EQ(OnlineStreamTuningSwitches(), before + 1);
  EXPECT_EQ(StreamTuningName(CurrentStreamTuning()), "t1:1");
  SetOnlineStreamTuning(false, {1, true});
}

TEST(OnlineStreamTuningTest, KeepsTheChoiceWithinTheMargin) {
  SetOnlineStreamTuning(true, {0, false});  // none
  const int64_t before = OnlineStreamTuningSwitches();
  auto rates = [](const std::string& t) { return t == "none" ? 10.0 : 10.4; };  // +4 %
  FeedOnline(4 * kOnlineExploreEvery * 5 * kOnlineWindow, rates, /*until_switch=*/false);
  EXPECT_EQ(OnlineStreamTuningSwitches(), before);
  EXPECT_EQ(StreamTuningName(CurrentStreamTuning()), "none");
  SetOnlineStreamTuning(false, {1, true});
}

TEST(OnlineStreamTuningTest, OnlyLargeCallsWhileOn) {
  int weights;
  SetOnlineStreamTuning(true, {1, false});
  EXPECT_EQ(BeginOnlineStreamCall(&weights, kOnlineMinBytes - 1).candidate, -1);
  EXPECT_GE(BeginOnlineStreamCall(&weights, kOnlineMinBytes).candidate, 0);
  SetOnlineStreamTuning(false, {1, false});
  EXPECT_EQ(BeginOnlineStreamCall(&weights, kOnlineMinBytes).candidate, -1);
}

// Decode rows the tuner times, exploring calls among them, give the same values every time.
TEST(OnlineStreamTuningTest, TimedDecodeRowsKeepTheirValues) {
  CpuBackend cpu(2);
  std::mt19937 rng(7);
  const int64_t k = 2048, n = kOnlineMinBytes / (k * 2);  // bf16 weights of exactly the minimum
  auto ref = MakeRefBackend(DType::kF32);
  TestTensor a = RandomTensor(*ref, rng, DType::kF32, {1, k}).CloneTo(cpu);
  TestTensor b = RandomTensor(*ref, rng, DType::kBF16, {n, k}).CloneTo(cpu);
  SetOnlineStreamTuning(true, {1, true});
  std::vector<float> first;
  for (int i = 0; i < 2 * kOnlineExploreEvery; ++i) {
    TestTensor out(cpu, DType::kF32, {1, n});
    cpu.Gemm({.a = a.view(), .b = b.view(), .out = out.view(), .decode_rows = 1});
    if (i == 0) {
      first = out.Read();
    } else {
      ASSERT_EQ(out.Read(), first) << "call " << i;
    }
  }
  SetOnlineStreamTuning(false, {1, true});
}

}  // namespace
}  // namespace mlaserve::test
