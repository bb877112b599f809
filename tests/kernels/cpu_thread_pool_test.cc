// CpuThreadPool: every participant runs exactly once per Run, Barrier separates phases, and
// back-to-back, partial and spaced-out Runs (the spin and the sleep paths, and Runs spaced at
// the moment a worker falls asleep) neither lose a wake-up nor run a stale job.
// ExecutableSegmentOf, with which the pool tells return addresses in its caller's frames,
// agrees with the kernel's map of this process (/proc/self/maps).
#include "kernels/cpu/cpu_thread_pool.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
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

// Runs spaced by about the workers' spin, so that a worker starts to sleep at every moment
// relative to the next Run's start. Before the Run's generation was stored seq_cst, a worker
// could sleep through a Run (the pool's comment at WaitWhileEquals): three runs of this loop on
// a 2-vCPU Zen 4 host hung at 2.0, 2.2 and 4.7 million Runs, and 12 million passed after the
// change. The default count catches such a bug only sometimes (a few seconds of Runs);
// MLASERVE_POOL_STRESS_RUNS=4000000 soaks it. A hang fails the test from a watchdog.
TEST(CpuThreadPoolTest, StaysAwakeThroughRunsSpacedAtTheSpin) {
  const char* env = std::getenv("MLASERVE_POOL_STRESS_RUNS");
  const int64_t runs = env != nullptr ? std::atoll(env) : 100'000;
  CpuThreadPool pool(2);
  std::atomic<int64_t> done{0};
  std::atomic<bool> finished{false};
  std::thread watchdog([&] {
    int64_t last = -1;
    auto since = std::chrono::steady_clock::now();
    while (!finished.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      const int64_t now = done.load();
      if (now != last) {
        last = now;
        since = std::chrono::steady_clock::now();
      } else if (std::chrono::steady_clock::now() - since > std::chrono::seconds(5)) {
        std::fprintf(stderr, "a Run did not end within 5 s (after %lld Runs)\n",
                     static_cast<long long>(now));
        std::_Exit(1);
      }
    }
  });
  std::atomic<int64_t> calls{0};
  auto body = [&](int) { calls.fetch_add(1, std::memory_order_relaxed); };
  uint64_t state = 0x9e3779b97f4a7c15ull;
  for (int64_t i = 0; i < runs; ++i) {
    pool.Run(2, body);
    done.store(i + 1, std::memory_order_relaxed);
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    // Busy, not asleep: 0.9 to 1.1 times the spin.
    const int64_t pause = CpuThreadPool::kSpinNanos * 9 / 10 +
                          static_cast<int64_t>(state % (CpuThreadPool::kSpinNanos / 5));
    const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(pause);
    while (std::chrono::steady_clock::now() < until) {
    }
  }
  finished.store(true);
  watchdog.join();
  EXPECT_EQ(calls.load(), 2 * runs);
}

}  // namespace
}  // namespace mlaserve
