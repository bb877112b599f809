// Fiber: a stack and a saved register context that a scheduler switches into and out of on one
// OS thread (Boost.Context's fcontext, about 37 ns a round trip here). The simulator runs each
// simulated CUDA thread of a block as one fiber. Stacks are mmap'd with an inaccessible guard
// page below them, so an overflow faults instead of corrupting a neighbour, and are reused
// through a per-OS-thread pool. Under AddressSanitizer every switch is announced to it.
//
// Thread-compatible: a fiber is resumed only by the OS thread that created it.
#ifndef MLASERVE_KERNELS_CUDA_SIM_FIBER_H_
#define MLASERVE_KERNELS_CUDA_SIM_FIBER_H_

#include <cstddef>

namespace mlaserve::sim {

class Fiber {
 public:
  using Entry = void (*)(void* arg);
  // Usable stack bytes of every fiber (simulated kernels keep small frames).
  static constexpr size_t kStackBytes = size_t{256} << 10;

  // A suspended fiber that will run entry(arg) when first resumed.
  Fiber(Entry entry, void* arg);
  // A fiber destroyed before it finished is abandoned: its stack is reused without unwinding.
  ~Fiber();
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;

  // Runs the fiber until it calls Suspend() or its entry returns. REQUIRES: !done().
  void Resume();
  bool done() const { return done_; }

  // From inside a running fiber: returns control to the Resume() that started this stretch.
  static void Suspend();

 private:
  static void Trampoline(void* transfer);
  void SwitchOut(bool finishing);

  Entry entry_;
  void* arg_;
  void* stack_ = nullptr;    // lowest usable byte (the guard page lies below it)
  void* context_ = nullptr;  // the fiber's saved context while suspended
  void* caller_ = nullptr;   // the scheduler's saved context while the fiber runs
  bool done_ = false;
  // AddressSanitizer's bookkeeping of the stack being left (unused without ASan).
  void* fake_stack_ = nullptr;
  const void* caller_stack_bottom_ = nullptr;
  size_t caller_stack_size_ = 0;
};

}  // namespace mlaserve::sim

#endif  // MLASERVE_KERNELS_CUDA_SIM_FIBER_H_
