// FeedOnlineTuner: drives the decode prefetch's online tuner (cpu_stream_tuning.h) with synthetic
// timings, for the tests of its rule and of what reports its changes.
#ifndef MLASERVE_TESTS_KERNELS_ONLINE_TUNING_FEED_H_
#define MLASERVE_TESTS_KERNELS_ONLINE_TUNING_FEED_H_

#include <cstdint>
#include <string>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_stream_tuning.h"

namespace mlaserve::test {

// Feeds the online tuner `calls` calls over one matrix, each timed as if it read at
// rate(tuning name) GB/s; stops at the first change of choice when `until_switch`.
inline void FeedOnlineTuner(int calls, double (*rate)(const std::string&), bool until_switch) {
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

// Enough calls for a candidate twice as fast as the choice to take over: each other candidate
// is tried every kOnlineExploreEvery calls in turn and needs a full window of ratios.
inline constexpr int kCallsToSwitch = 2 * kOnlineExploreEvery * 5 * kOnlineWindow;

}  // namespace mlaserve::test

#endif  // MLASERVE_TESTS_KERNELS_ONLINE_TUNING_FEED_H_
