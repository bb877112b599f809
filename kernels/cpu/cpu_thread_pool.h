// CpuThreadPool: the persistent team that runs the CPU backend's ops. Workers are started once
// and wait between ops by spinning briefly, then sleeping on a futex (std::atomic::wait).
//
// Why not OpenMP's team: libgomp's idle threads spin for milliseconds (GOMP_SPINCOUNT) before
// they sleep, which on a host shared with other work steals the core the op's other threads
// need. On the 2-vCPU development host under load, decode GEMVs ran 3x slower with it than with
// OMP_WAIT_POLICY=passive, which in turn costs ~20 µs per op when the host is idle. A bounded
// spin (kSpinNanos) keeps back-to-back ops at a few microseconds and gives the core away soon
// after. See docs/performance.md, "CPU kernels".
//
// Thread-compatible: one thread at a time calls Run (the backend's owner); Barrier is called
// only from inside a Run by its participants.
#ifndef MLASERVE_KERNELS_CPU_CPU_THREAD_POOL_H_
#define MLASERVE_KERNELS_CPU_CPU_THREAD_POOL_H_

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/types/span.h"
#include "kernels/code_segment.h"
#include "kernels/next_step_reader.h"

namespace mlaserve {

class CpuThreadPool {
 public:
  static constexpr int kMaxThreads = 255;

  // Starts num_threads - 1 workers (1 <= num_threads <= kMaxThreads); the caller of Run is
  // participant 0.
  explicit CpuThreadPool(int num_threads);
  ~CpuThreadPool();
  CpuThreadPool(const CpuThreadPool&) = delete;
  CpuThreadPool& operator=(const CpuThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs fn(t) for every t < threads, t = 0 on the calling thread, and returns when all have
  // returned. REQUIRES: 1 <= threads <= size(); not called from inside a Run.
  template <class Fn>
  void Run(int threads, Fn& fn) {
    RunJob(threads, [](void* f, int t) { (*static_cast<Fn*>(f))(t); }, &fn);
  }

  // Waits until all participants of the current Run have called Barrier (as many times).
  void Barrier();

  // Cache lines the caller reads right after a Run returns (the next op's dispatch, which a
  // graph replay publishes there), read again for every Run. The caller, once its part has
  // ended (whether or not workers still work), prefetches them, the frames it returns through
  // and the code at the return addresses those frames hold (any word of them that points into
  // the executable segment of this code: ExecutableSegmentOf), into its own caches; so does the
  // first worker to end while the caller still works, from where the caller's misses are served
  // by a neighbour's cache, not memory. A Run of one thread (the
  // caller alone, whom nobody waits for) prefetches the lines before it runs instead. The span's
  // address stays valid for the pool's life; the span may be empty, and the lines it names must
  // stay mapped until the Run returns. nullptr: only the frames and their code.
  void set_wait_prefetch(const absl::Span<const void* const>* lines) { wait_prefetch_ = lines; }

  // A reader the caller calls once its part of a Run has ended and the lines above are
  // requested, for what it reads after the Run (the next step's planning, after a replay's
  // last op: HostBackend::next_step_reader); the other threads may still work meanwhile. The
  // pool empties *reader before it calls it, so a later Run calls nothing until it is set
  // again. nullptr: none.
  void set_end_reader(NextStepReader* reader) { end_reader_ = reader; }

  // How long a waiting thread spins before it sleeps.
  static constexpr int64_t kSpinNanos = 50'000;

 private:
  using Job = void (*)(void* fn, int t);

  void RunJob(int threads, Job job, void* fn);
  void WorkerLoop(int index);
  // Prefetches the caller's frames, the code their return addresses point at, and the lines
  // published when the Run began.
  void PrefetchForCaller() const;
  // Prefetches two lines at each word of [frame, frame + bytes) that points into code_: a
  // return address, or a function pointer (one useless prefetch).
  void PrefetchReturnCode(const char* frame, int bytes) const;
  // Calls *end_reader_, if set, and empties it.
  void CallEndReader();
  // Returns once value != old, spinning for up to kSpinNanos first.
  static void WaitWhileEquals(const std::atomic<uint32_t>& value, uint32_t old);

  std::vector<std::thread> workers_;
  const AddressRange code_;  // ExecutableSegmentOf this pool's code
  const absl::Span<const void* const>* wait_prefetch_ = nullptr;
  NextStepReader* end_reader_ = nullptr;
  // Written by Run before it bumps generation_ (release) and read by the workers it activates
  // after (acquire); not written again until those workers are done.
  Job job_ = nullptr;
  void* fn_ = nullptr;
  int active_ = 0;
  const char* caller_frame_ = nullptr;  // RunJob's frame
  int caller_frame_bytes_ = 0;          // of the caller's stack from there, at most 2 KiB
  absl::Span<const void* const> caller_lines_;  // *wait_prefetch_ when the Run began
  // Set while the caller runs its part of the current Run and no worker has prefetched for
  // it yet: the first worker to end then claims the prefetch.
  std::atomic<bool> prefetch_for_caller_{false};
  // (Run count << 8) | participants of that Run (kMaxThreads fits the low byte): an idle worker learns from this word alone
  // that it is not needed, so it never reads job_ while the next Run writes it.
  std::atomic<uint32_t> generation_{0};
  std::atomic<bool> stop_{false};
  std::atomic<uint32_t> pending_{0};  // workers of the current Run still busy
  std::atomic<uint32_t> barrier_arrived_{0};
  std::atomic<uint32_t> barrier_generation_{0};
};

}  // namespace mlaserve

#endif  // MLASERVE_KERNELS_CPU_CPU_THREAD_POOL_H_
