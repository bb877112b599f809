// CpuThreadPool: every participant runs exactly once per Run, Barrier separates phases, and
// back-to-back, partial and spaced-out Runs (the spin and the sleep paths) neither lose a
// wake-up nor run a stale job. ExecutableSegmentOf, with which the pool tells return addresses
// in its caller's frames, agrees with the kernel's map of this process (/proc/self/maps).
#include "kernels/cpu/cpu_thread_pool.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/code_segment.h"

namespace mlaserve {
namespace {

TEST(CpuThreadPoolTest, EveryParticipantRunsOncePerRun) {
  CpuThreadPool pool(4);
  ASSERT_EQ(pool.size(), 4);
  for (int threads = 1; threads <= 4; ++threads) {
    std::vector<std::atomic<int>> calls(4);
    auto body = [&](int t) { calls[t].fetch_add(1); };
    pool.Run(threads, body);
    for (int t = 0; t < 4; ++t) EXPECT_EQ(calls[t].load(), t < threads ? 1 : 0) << threads;
  }
}

TEST(CpuThreadPoolTest, PrefetchesForTheCallerWhoeverEndsFirst) {
  // The caller ends its part first in even Runs (and prefetches while it waits), the workers in
  // odd ones (and prefetch while it still works); the published lines change between Runs, as a
  // replay's do. Every participant still runs once per Run, and under ThreadSanitizer
  // (scripts/sanitize.sh) nothing races the next Run.
  CpuThreadPool pool(3);
  std::vector<float> data(64 * 16);
  std::vector<const void*> lines;
  for (size_t i = 0; i < data.size(); i += 16) lines.push_back(&data[i]);
  absl::Span<const void* const> published;
  pool.set_wait_prefetch(&published);
  constexpr int kRuns = 200;
  std::vector<std::atomic<int>> calls(3);
  for (int run = 0; run < kRuns; ++run) {
    published = absl::MakeConstSpan(lines).subspan(static_cast<size_t>(run % 8), 8);
    auto body = [&](int t) {
      if ((t == 0) != (run % 2 == 0)) {
        const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(20);
        while (std::chrono::steady_clock::now() < until) {
        }
      }
      calls[t].fetch_add(1);
    };
    pool.Run(3, body);
  }
  published = {};
  for (int t = 0; t < 3; ++t) EXPECT_EQ(calls[t].load(), kRuns) << t;
}

TEST(CpuThreadPoolTest, CallsTheEndReaderOnceAfterTheCallersPart) {
  // The reader is still unread while the caller runs its part, is called once, and is cleared
  // by then, whether the caller ran alone or beside workers; a Run with none set calls nothing.
  CpuThreadPool pool(3);
  std::atomic<int> calls{0};
  NextStepReader end_reader;
  pool.set_end_reader(&end_reader);
  for (const int threads : {1, 2, 3, 3}) {
    calls = 0;
    end_reader = {.read = [](const void* c) {
                    static_cast<std::atomic<int>*>(const_cast<void*>(c))->fetch_add(1);
                  },
                  .context = &calls};
    std::atomic<int> calls_in_part{-1};
    auto body = [&](int t) {
      if (t == 0) calls_in_part = calls.load();
    };
    pool.Run(threads, body);
    EXPECT_EQ(calls_in_part.load(), 0) << threads;
    EXPECT_EQ(calls.load(), 1) << threads;
    EXPECT_EQ(end_reader.read, nullptr) << threads;
    pool.Run(threads, body);
    EXPECT_EQ(calls.load(), 1) << threads;
  }
}

// The /proc/self/maps line holding `address`: its range and permissions ("r-xp" ...).
struct Mapping {
  uintptr_t begin = 0, end = 0;
  std::string perms;
};
Mapping MappingOf(uintptr_t address) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    std::istringstream in(line);
    std::string range, perms;
    in >> range >> perms;
    const size_t dash = range.find('-');
    const uintptr_t begin = std::stoull(range.substr(0, dash), nullptr, 16);
    const uintptr_t end = std::stoull(range.substr(dash + 1), nullptr, 16);
    if (address >= begin && address < end) return {begin, end, perms};
  }
  return {};
}

int CodeInThisTest(int x) { return x + 1; }

TEST(CodeSegmentTest, FindsTheExecutableMappingOfCodeAndNothingForData) {
  const auto code = reinterpret_cast<uintptr_t>(&CodeInThisTest);
  const AddressRange segment = ExecutableSegmentOf(reinterpret_cast<const void*>(code));
  ASSERT_TRUE(segment.Contains(code));
  const Mapping mapping = MappingOf(code);
  EXPECT_EQ(mapping.perms.substr(0, 3), "r-x");
  // The segment lies in the mapping (its memory size may end inside the last page).
  EXPECT_GE(segment.begin, mapping.begin);
  EXPECT_LE(segment.begin + segment.size, mapping.end);
  // The code of a shared library (libc) is in its own segment, not this executable's.
  const auto libc = reinterpret_cast<uintptr_t>(&std::abort);
  EXPECT_EQ(MappingOf(libc).perms.substr(0, 3), "r-x");
  EXPECT_TRUE(ExecutableSegmentOf(reinterpret_cast<const void*>(libc)).Contains(libc));
  EXPECT_FALSE(segment.Contains(libc));
  // Stack, heap and read-only data are in no executable segment.
  int local = 0;
  const auto heap = std::make_unique<int>(0);
  static const char kConstant[] = "data";
  for (const void* data : {static_cast<const void*>(&local), static_cast<const void*>(heap.get()),
                           static_cast<const void*>(kConstant)}) {
    EXPECT_EQ(ExecutableSegmentOf(data).size, 0u) << data;
    EXPECT_NE(MappingOf(reinterpret_cast<uintptr_t>(data)).perms.substr(0, 3), "r-x") << data;
  }
}

TEST(CpuThreadPoolTest, CallerIsParticipantZero) {
  CpuThreadPool pool(3);
  std::thread::id seen;
  auto body = [&](int t) {
    if (t == 0) seen = std::this_thread::get_id();
  };
  pool.Run(3, body);
  EXPECT_EQ(seen, std::this_thread::get_id());
}

TEST(CpuThreadPoolTest, BarrierSeparatesPhases) {
  CpuThreadPool pool(3);
  constexpr int kPhases = 200;
  std::vector<std::atomic<int>> progress(3);
  std::atomic<int> violations{0};
  auto body = [&](int t) {
    for (int phase = 1; phase <= kPhases; ++phase) {
      progress[t].store(phase);
      pool.Barrier();
      // Everyone stored this phase; the second barrier keeps the next stores back.
      for (int u = 0; u < 3; ++u) {
        const int p = progress[u].load();
        if (p != phase) violations.fetch_add(1);
      }
      pool.Barrier();
    }
  };
  pool.Run(3, body);
  EXPECT_EQ(violations.load(), 0);
  for (int t = 0; t < 3; ++t) EXPECT_EQ(progress[t].load(), kPhases);
}

TEST(CpuThreadPoolTest, ManyBackToBackRunsOfVaryingWidth) {
  CpuThreadPool pool(3);
  std::atomic<int64_t> total{0};
  int64_t expected = 0;
  for (int i = 0; i < 20000; ++i) {
    const int threads = 1 + i % 3;
    auto body = [&](int t) { total.fetch_add(t + 1); };
    pool.Run(threads, body);
    expected += threads * (threads + 1) / 2;
  }
  EXPECT_EQ(total.load(), expected);
}

TEST(CpuThreadPoolTest, RunsAfterWorkersFellAsleep) {
  CpuThreadPool pool(2);
  std::atomic<int> calls{0};
  auto body = [&](int) { calls.fetch_add(1); };
  for (int i = 0; i < 5; ++i) {
    std::this_thread::sleep_for(std::chrono::nanoseconds(4 * CpuThreadPool::kSpinNanos));
    pool.Run(2, body);
  }
  EXPECT_EQ(calls.load(), 10);
}

}  // namespace
}  // namespace mlaserve
