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
#include "tests/kernels/online_tuning_feed.h"

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

// A single row keeps the choice unless its weights are read a pass at a time; more rows, or
// strided passes, take at least one tile ahead (into L2 for more rows, where later chunks
// re-read them).
TEST(CpuStreamTuningTest, SeveralRowsAndStridedPassesPrefetch) {
  const StreamTuning none{0, false}, nta{2, true};
  EXPECT_EQ(StreamTuningName(StreamTuningForRows(none, 1)), "none");
  EXPECT_EQ(StreamTuningName(StreamTuningForRows(nta, 1)), "nta:2");
  EXPECT_EQ(StreamTuningName(StreamTuningForRows(none, 1, /*strided=*/true)), "t1:1");
  EXPECT_EQ(StreamTuningName(StreamTuningForRows(nta, 1, /*strided=*/true)), "nta:2");
  EXPECT_EQ(StreamTuningName(StreamTuningForRows(none, 4)), "t1:1");
  EXPECT_EQ(StreamTuningName(StreamTuningForRows(nta, 4)), "t1:2");
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

// The changes the switch listener reported.
std::vector<StreamTuningSwitch>& Reported() {
  static std::vector<StreamTuningSwitch> reported;
  return reported;
}

TEST(OnlineStreamTuningTest, MovesToACandidateThatClearlyBeatsTheChoice) {
  Reported().clear();
  SetStreamTuningSwitchListener([](const StreamTuningSwitch& s) { Reported().push_back(s); });
  SetOnlineStreamTuning(true, {4, true});  // nta:4
  const int64_t before = OnlineStreamTuningSwitches();
  // t1:1 reads twice as fast; everything else a little slower than the choice.
  auto rates = [](const std::string& t) { return t == "t1:1" ? 20.0 : t == "nta:4" ? 10.0 : 9.0; };
  FeedOnlineTuner(kCallsToSwitch, rates, /*until_switch=*/true);
  EXPECT_EQ(OnlineStreamTuningSwitches(), before + 1);
  EXPECT_EQ(StreamTuningName(CurrentStreamTuning()), "t1:1");
  // The listener heard of it once, with the rates' ratio.
  ASSERT_EQ(Reported().size(), 1u);
  EXPECT_EQ(StreamTuningName(Reported()[0].from), "nta:4");
  EXPECT_EQ(StreamTuningName(Reported()[0].to), "t1:1");
  EXPECT_NEAR(Reported()[0].median_ratio, 2.0, 1e-9);
  EXPECT_EQ(Reported()[0].switches, before + 1);
  EXPECT_GT(Reported()[0].online_calls, kOnlineWindow);
  // From there nothing beats it.
  FeedOnlineTuner(4 * kOnlineExploreEvery * 5 * kOnlineWindow, rates, /*until_switch=*/false);
  EXPECT_EQ(OnlineStreamTuningSwitches(), before + 1);
  EXPECT_EQ(StreamTuningName(CurrentStreamTuning()), "t1:1");
  EXPECT_EQ(Reported().size(), 1u);
  SetStreamTuningSwitchListener(nullptr);
  SetOnlineStreamTuning(false, {1, true});
}

TEST(OnlineStreamTuningTest, KeepsTheChoiceWithinTheMargin) {
  SetOnlineStreamTuning(true, {0, false});  // none
  const int64_t before = OnlineStreamTuningSwitches();
  auto rates = [](const std::string& t) { return t == "none" ? 10.0 : 10.4; };  // +4 %
  FeedOnlineTuner(4 * kOnlineExploreEvery * 5 * kOnlineWindow, rates, /*until_switch=*/false);
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
