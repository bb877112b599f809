#include "kernels/cuda/sim/fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <boost/context/detail/fcontext.hpp>
#include <vector>

#include "kernels/check.h"

#if defined(__SANITIZE_ADDRESS__)
#define MLASERVE_SIM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MLASERVE_SIM_ASAN 1
#endif
#endif
#ifdef MLASERVE_SIM_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

namespace mlaserve::sim {
namespace {

namespace ctx = boost::context::detail;

size_t PageBytes() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

// Clears AddressSanitizer's poisoning of a fiber stack: the redzones of frames left on it by a
// fiber that never returned would otherwise outlive the stack, and flag reads of whatever the
// kernel maps at those addresses next (a checkpoint file, say) as stack-buffer underflows.
void UnpoisonStack(void* stack) {
#ifdef MLASERVE_SIM_ASAN
  __asan_unpoison_memory_region(stack, Fiber::kStackBytes);
#else
  (void)stack;
#endif
}

// Stacks of finished or abandoned fibers, kept for the next ones on this OS thread.
struct StackPool {
  std::vector<void*> free;
  ~StackPool() {
    for (void* s : free) {
      UnpoisonStack(s);
      munmap(static_cast<char*>(s) - PageBytes(), Fiber::kStackBytes + PageBytes());
    }
  }
};
thread_local StackPool t_stacks;
thread_local Fiber* t_current = nullptr;

void* TakeStack() {
  if (!t_stacks.free.empty()) {
    void* s = t_stacks.free.back();
    t_stacks.free.pop_back();
    UnpoisonStack(s);
    return s;
  }
  const size_t guard = PageBytes();
  void* base = mmap(nullptr, Fiber::kStackBytes + guard, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  MLASERVE_CHECK_MSG(base != MAP_FAILED, "simulator: fiber stack allocation failed");
  MLASERVE_CHECK(mprotect(base, guard, PROT_NONE) == 0);
  return static_cast<char*>(base) + guard;
}

}  // namespace

Fiber::Fiber(Entry entry, void* arg) : entry_(entry), arg_(arg), stack_(TakeStack()) {
  context_ = ctx::make_fcontext(static_cast<char*>(stack_) + kStackBytes, kStackBytes,
                                [](ctx::transfer_t t) { Trampoline(&t); });
}

Fiber::~Fiber() { t_stacks.free.push_back(stack_); }

void Fiber::Trampoline(void* transfer) {
  auto* t = static_cast<ctx::transfer_t*>(transfer);
  Fiber* self = static_cast<Fiber*>(t->data);
  self->caller_ = t->fctx;
#ifdef MLASERVE_SIM_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &self->caller_stack_bottom_, &self->caller_stack_size_);
#endif
  self->entry_(self->arg_);
  self->done_ = true;
  self->SwitchOut(/*finishing=*/true);
}

void Fiber::Resume() {
  MLASERVE_CHECK(!done_);
  Fiber* previous = t_current;
  t_current = this;
#ifdef MLASERVE_SIM_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, stack_, kStackBytes);
#endif
  ctx::transfer_t back = ctx::jump_fcontext(context_, this);
#ifdef MLASERVE_SIM_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  context_ = back.fctx;
  t_current = previous;
}

void Fiber::Suspend() {
  MLASERVE_CHECK_MSG(t_current != nullptr, "simulator: Suspend outside a fiber");
  t_current->SwitchOut(/*finishing=*/false);
}

void Fiber::SwitchOut(bool finishing) {
#ifdef MLASERVE_SIM_ASAN
  __sanitizer_start_switch_fiber(finishing ? nullptr : &fake_stack_, caller_stack_bottom_,
                                 caller_stack_size_);
#endif
  ctx::transfer_t back = ctx::jump_fcontext(caller_, nullptr);
  // Only a suspended (not a finished) fiber comes back here, from the next Resume().
  caller_ = back.fctx;
#ifdef MLASERVE_SIM_ASAN
  __sanitizer_finish_switch_fiber(fake_stack_, &caller_stack_bottom_, &caller_stack_size_);
#endif
}

}  // namespace mlaserve::sim
