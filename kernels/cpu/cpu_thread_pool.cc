#include "kernels/cpu/cpu_thread_pool.h"

#include <algorithm>
#include <chrono>

#include <pthread.h>

#include "kernels/check.h"

namespace mlaserve {
namespace {

constexpr uint32_t kActiveMask = 0xff;

// The caller's frames a waiting thread prefetches: from RunJob's frame up, through the op
// that called it, to the replay's loop and the step around it.
constexpr intptr_t kFrameBytes = 2048;

// The end (highest address) of the calling thread's stack, or 0 where it cannot be told.
uintptr_t StackEnd() {
  thread_local uintptr_t end = 0;
  if (end == 0) {
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
      void* base = nullptr;
      size_t size = 0;
      if (pthread_attr_getstack(&attr, &base, &size) == 0) {
        end = reinterpret_cast<uintptr_t>(base) + size;
      }
      pthread_attr_destroy(&attr);
    }
  }
  return end;
}

}  // namespace

CpuThreadPool::CpuThreadPool(int num_threads)
    : code_(ExecutableSegmentOf(reinterpret_cast<const void*>(&WaitWhileEquals))) {
  static_assert(kMaxThreads <= static_cast<int>(kActiveMask));
  MLASERVE_CHECK(num_threads >= 1 && num_threads <= kMaxThreads);
  workers_.reserve(num_threads - 1);
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

CpuThreadPool::~CpuThreadPool() {
  stop_.store(true, std::memory_order_relaxed);
  generation_.fetch_add(kActiveMask + 1, std::memory_order_seq_cst);
  generation_.notify_all();
  for (std::thread& w : workers_) w.join();
}

void CpuThreadPool::RunJob(int threads, Job job, void* fn) {
  MLASERVE_CHECK(threads >= 1 && threads <= size());
  active_ = threads;
  if (threads == 1) {
    // Nobody waits while the caller runs a job alone, so nobody prefetches for it at the end:
    // the caller requests the lines it reads next before it starts, and they arrive meanwhile.
    if (wait_prefetch_ != nullptr) {
      for (const void* line : *wait_prefetch_) __builtin_prefetch(line);
    }
    job(fn, 0);
    CallEndReader();
    return;
  }
  job_ = job;
  fn_ = fn;
  caller_frame_ = static_cast<const char*>(__builtin_frame_address(0));
  caller_frame_bytes_ = static_cast<int>(std::clamp<intptr_t>(
      static_cast<intptr_t>(StackEnd() - reinterpret_cast<uintptr_t>(caller_frame_)), 0,
      kFrameBytes));
  caller_lines_ = wait_prefetch_ != nullptr ? *wait_prefetch_ : absl::Span<const void* const>();
  prefetch_for_caller_.store(true, std::memory_order_relaxed);
  barrier_arrived_.store(0, std::memory_order_relaxed);
  pending_.store(static_cast<uint32_t>(threads - 1), std::memory_order_relaxed);
  const uint32_t next =
      ((generation_.load(std::memory_order_relaxed) & ~kActiveMask) + kActiveMask + 1) |
      static_cast<uint32_t>(threads);
  // seq_cst, not release: notify_all skips the wake when it reads no sleeper in libstdc++'s
  // waiter count, and that read must not pass this store (WaitWhileEquals).
  generation_.store(next, std::memory_order_seq_cst);
  generation_.notify_all();
  job(fn, 0);
  prefetch_for_caller_.store(false, std::memory_order_relaxed);
  // Also when every worker has ended: the lines are requested together here, where the dispatch
  // after the Run would miss on them one after another (each names the next).
  PrefetchForCaller();
  CallEndReader();
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
      // The first worker to end while the caller works prefetches for it; one copy of the
      // lines in a neighbour's cache serves the caller, so the others do not.
      if (prefetch_for_caller_.load(std::memory_order_relaxed) &&
          prefetch_for_caller_.exchange(false, std::memory_order_relaxed)) {
        PrefetchForCaller();
      }
      if (pending_.fetch_sub(1, std::memory_order_seq_cst) == 1) pending_.notify_one();
    }
  }
}

void CpuThreadPool::PrefetchForCaller() const {
  for (intptr_t i = 0; i < caller_frame_bytes_; i += 64) __builtin_prefetch(caller_frame_ + i);
  for (const void* line : caller_lines_) __builtin_prefetch(line);
  // Then the code those frames return to, which an op that streamed its weights evicted too:
  // the return path would read it line by line from memory.
  PrefetchReturnCode(caller_frame_, caller_frame_bytes_);
}

// Reads the caller's frames while the caller may run (a worker that ended first): the return
// addresses there do not change until the Run returns, but locals of the op beside them may
// (a claim counter), and a stale or torn word costs at most a useless prefetch. Hence relaxed
// atomic loads, kept out of the sanitizers' view (AddressSanitizer poisons the redzones
// between those locals).
__attribute__((no_sanitize("address", "thread"))) void CpuThreadPool::PrefetchReturnCode(
    const char* frame, int bytes) const {
  const auto* words = reinterpret_cast<const uintptr_t*>(frame);
  for (int i = 0; i < bytes / static_cast<int>(sizeof(uintptr_t)); ++i) {
    const uintptr_t word = __atomic_load_n(&words[i], __ATOMIC_RELAXED);
    if (code_.Contains(word)) {
      __builtin_prefetch(reinterpret_cast<const void*>(word));
      __builtin_prefetch(reinterpret_cast<const void*>(word + 64));
    }
  }
}

void CpuThreadPool::CallEndReader() {
  if (end_reader_ == nullptr || end_reader_->read == nullptr) return;
  const NextStepReader reader = *end_reader_;
  *end_reader_ = {};
  reader.read(reader.context);
}

void CpuThreadPool::Barrier() {
  const uint32_t round = barrier_generation_.load(std::memory_order_acquire);
  if (barrier_arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 ==
      static_cast<uint32_t>(active_)) {
    barrier_arrived_.store(0, std::memory_order_relaxed);
    barrier_generation_.fetch_add(1, std::memory_order_seq_cst);
    barrier_generation_.notify_all();
  } else {
    WaitWhileEquals(barrier_generation_, round);
  }
}

// Every change a sleeper waits for is made seq_cst before its notify: libstdc++ 12's notify
// reads a count of sleepers (seq_cst) and makes no futex call when it reads none, while a
// sleeper counts itself (a seq_cst read-modify-write) before the futex compares the value. A
// release store let that read pass the store on x86 (a store-load reordering), so a worker
// could count itself, find the old value and sleep through the Run: a two-thread pool hung
// after 2.0, 2.2 and 4.7 million Runs of a loop whose caller paused about kSpinNanos between
// Runs (cpu_thread_pool_test, StaysAwakeThroughRunsSpacedAtTheSpin), and not in 12 million
// since.
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
