#include "kernels/cpu/cpu_thread_pool.h"

#include <chrono>

#include "kernels/check.h"

namespace mlaserve {
namespace {

constexpr uint32_t kActiveMask = 0xff;

}  // namespace

CpuThreadPool::CpuThreadPool(int num_threads) {
  static_assert(kMaxThreads <= static_cast<int>(kActiveMask));
  MLASERVE_CHECK(num_threads >= 1 && num_threads <= kMaxThreads);
  workers_.reserve(num_threads - 1);
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

CpuThreadPool::~CpuThreadPool() {
  stop_.store(true, std::memory_order_relaxed);
  generation_.fetch_add(kActiveMask + 1, std::memory_order_release);
  generation_.notify_all();
  for (std::thread& w : workers_) w.join();
}

void CpuThreadPool::RunJob(int threads, Job job, void* fn) {
  MLASERVE_CHECK(threads >= 1 && threads <= size());
  active_ = threads;
  if (threads == 1) {
    job(fn, 0);
    return;
  }
  job_ = job;
  fn_ = fn;
  caller_frame_ = static_cast<const char*>(__builtin_frame_address(0));
  caller_lines_ = wait_prefetch_ != nullptr ? *wait_prefetch_ : absl::Span<const void* const>();
  caller_busy_.store(true, std::memory_order_relaxed);
  barrier_arrived_.store(0, std::memory_order_relaxed);
  pending_.store(static_cast<uint32_t>(threads - 1), std::memory_order_relaxed);
  const uint32_t next =
      ((generation_.load(std::memory_order_relaxed) & ~kActiveMask) + kActiveMask + 1) |
      static_cast<uint32_t>(threads);
  generation_.store(next, std::memory_order_release);
  generation_.notify_all();
  job(fn, 0);
  caller_busy_.store(false, std::memory_order_relaxed);
  if (pending_.load(std::memory_order_acquire) != 0) {
    PrefetchForCaller(caller_frame_, caller_lines_);
  }
  for (uint32_t left = pending_.load(std::memory_order_acquire); left != 0;
       left = pending_.load(std::memory_order_acquire)) {
    WaitWhileEquals(pending_, left);
  }
}

void CpuThreadPool::WorkerLoop(int index) {
  uint32_t seen = 0;
  for (;;) {
    WaitWhileEquals(generation_, seen);
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_relaxed)) return;
    if (index < static_cast<int>(seen & kActiveMask)) {
      job_(fn_, index);
      if (caller_busy_.load(std::memory_order_relaxed)) {
        PrefetchForCaller(caller_frame_, caller_lines_);
      }
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
    }
  }
}

void CpuThreadPool::PrefetchForCaller(const char* frame, absl::Span<const void* const> lines) {
  // The frames the caller returns through, from an op's parallel region up to a replay's loop.
  constexpr int kFrameLines = 32;
  for (int i = 0; i < kFrameLines; ++i) __builtin_prefetch(frame + 64 * i);
  for (const void* line : lines) __builtin_prefetch(line);
}

void CpuThreadPool::Barrier() {
  const uint32_t round = barrier_generation_.load(std::memory_order_acquire);
  if (barrier_arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 ==
      static_cast<uint32_t>(active_)) {
    barrier_arrived_.store(0, std::memory_order_relaxed);
    barrier_generation_.fetch_add(1, std::memory_order_release);
    barrier_generation_.notify_all();
  } else {
    WaitWhileEquals(barrier_generation_, round);
  }
}

void CpuThreadPool::WaitWhileEquals(const std::atomic<uint32_t>& value, uint32_t old) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + std::chrono::nanoseconds(kSpinNanos);
  for (uint32_t i = 1; value.load(std::memory_order_acquire) == old; ++i) {
    if (i % 64 == 0 && Clock::now() > deadline) {
      value.wait(old, std::memory_order_acquire);
      return;
    }
    __builtin_ia32_pause();
  }
}

}  // namespace mlaserve
