// OpProfile: its clock against the kernel's reading of the processor (/proc/cpuinfo) and
// against steady_clock, and its per-name sums.
#include "kernels/op_profile.h"

#include <chrono>
#include <fstream>
#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/kernels/cpu_test_util.h"

namespace mlaserve {
namespace {

using test::ProcCpuinfoFlags;

std::string CurrentClocksource() {
  std::ifstream in("/sys/devices/system/clocksource/clocksource0/current_clocksource");
  std::string name;
  in >> name;
  return name;
}

TEST(OpProfileTest, CountsTheTimeStampCounterWhereLinuxTrustsIt) {
  const std::set<std::string> flags = ProcCpuinfoFlags();
  if (flags.empty()) GTEST_SKIP() << "/proc/cpuinfo has no flags line";
  // Linux sets nonstop_tsc from the same CPUID bit (0x80000007 EDX bit 8).
  EXPECT_EQ(OpProfile().counts_tsc(),
            flags.count("nonstop_tsc") > 0 && CurrentClocksource() == "tsc");
  EXPECT_FALSE(OpProfile(/*use_tsc=*/false).counts_tsc());
}

// Both clocks, converted, against steady_clock over the same 30 ms (both count wall time, so a
// preemption lengthens both alike).
TEST(OpProfileTest, NanosAgreeWithSteadyClock) {
  for (bool use_tsc : {true, false}) {
    SCOPED_TRACE(use_tsc ? "tsc" : "steady");
    OpProfile profile(use_tsc);
    using Clock = std::chrono::steady_clock;
    const Clock::time_point begin = Clock::now();
    const int64_t start = profile.Now();
    while (Clock::now() - begin < std::chrono::milliseconds(30)) {
    }
    const int64_t ticks = profile.Now() - start;
    const double steady_ns = std::chrono::duration<double, std::nano>(Clock::now() - begin).count();
    EXPECT_GT(ticks, 0);
    EXPECT_NEAR(profile.Nanos(ticks), steady_ns, 0.02 * steady_ns);
  }
}

TEST(OpProfileTest, SumsTicksPerNameAndInTotal) {
  OpProfile profile;
  // Two addresses of one name, as two translation units may hold the same literal.
  static const char kGemm[] = "Gemm";
  static const char kGemmCopy[] = "Gemm";
  static const char kAdd[] = "Add";
  profile.Add(kGemm, 100);
  profile.Add(kAdd, 7);
  profile.Add(kGemmCopy, 20);
  profile.Add(kGemm, 3);
  EXPECT_EQ(profile.total_ticks(), 130);
}

TEST(OpProfileTest, PrintsOneRowPerName) {
  static const char kGemm[] = "Gemm";
  static const char kGemmCopy[] = "Gemm";
  static const char kAdd[] = "Add";
  testing::internal::CaptureStderr();
  {
    OpProfile profile(/*use_tsc=*/false);  // ticks are nanoseconds
    profile.Add(kGemm, 2'000'000);
    profile.Add(kAdd, 1'000'000);
    profile.Add(kGemmCopy, 1'000'000);
  }
  const std::string printed = testing::internal::GetCapturedStderr();
  EXPECT_THAT(printed, testing::ContainsRegex("Gemm +2 calls +3\\.000 ms +75\\.0%"));
  EXPECT_THAT(printed, testing::ContainsRegex("Add +1 calls +1\\.000 ms +25\\.0%"));
  EXPECT_LT(printed.find("Gemm"), printed.find("Add"));  // the costliest first
  EXPECT_EQ(printed.find("Gemm"), printed.rfind("Gemm"));
}

TEST(OpProfileTest, AClaimedSlotAddsAsTheNameDoes) {
  static const char kGemm[] = "Gemm";
  static const char kNeverRun[] = "MergeAttn";
  testing::internal::CaptureStderr();
  {
    OpProfile profile(/*use_tsc=*/false);
    OpProfile::Slot* slot = profile.Claim(kGemm);
    EXPECT_EQ(profile.Claim(kGemm), slot);  // found again, not claimed twice
    profile.Claim(kNeverRun);               // a recorded op whose graph never ran
    OpProfile::AddTo(slot, 1'000'000);
    profile.Add(kGemm, 3'000'000);
    EXPECT_EQ(slot->calls, 2);
    EXPECT_EQ(profile.total_ticks(), 4'000'000);
  }
  const std::string printed = testing::internal::GetCapturedStderr();
  EXPECT_THAT(printed, testing::ContainsRegex("Gemm +2 calls +4\\.000 ms +100\\.0%"));
  EXPECT_EQ(printed.find("MergeAttn"), std::string::npos);
}

TEST(OpProfileTest, HoldsEverySlotThenStops) {
  static char names[OpProfile::kSlots + 1][2];
  OpProfile profile;
  for (int i = 0; i < OpProfile::kSlots; ++i) profile.Add(names[i], 1);
  EXPECT_EQ(profile.total_ticks(), OpProfile::kSlots);
  EXPECT_DEATH(profile.Add(names[OpProfile::kSlots], 1), "more op name addresses than slots");
}

}  // namespace
}  // namespace mlaserve
