// Linked into the tests of ThreadSanitizer builds only (tests/CMakeLists.txt). Debian's
// libabsl_synchronization is not built with TSan, so TSan cannot see the happens-before
// edges of absl::Mutex, CondVar and Notification and reports every access they guard as a
// race. The linker sends the project's calls to their entry points (-Wl,--wrap=SYMBOL) to the
// __wrap_ functions here, which call the library (__real_) and tell TSan about the release
// before and the acquire after. Accesses not guarded by these primitives are still checked.
// The symbol names are those of Debian's abseil 20220623 (inline namespace debian3).
#include <sanitizer/tsan_interface.h>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

using absl::Condition;
using absl::CondVar;
using absl::Duration;
using absl::Mutex;
using absl::Notification;
using absl::Time;

extern "C" {

#define MLASERVE_WRAP(ret, symbol, params, args, before, after) \
  ret __real_##symbol params;                                   \
  ret __wrap_##symbol params {                                  \
    before;                                                     \
    ret result = __real_##symbol args;                          \
    after;                                                      \
    return result;                                              \
  }
#define MLASERVE_WRAP_VOID(symbol, params, args, before, after) \
  void __real_##symbol params;                                  \
  void __wrap_##symbol params {                                 \
    before;                                                     \
    __real_##symbol args;                                       \
    after;                                                      \
  }

// Mutex: Lock, ReaderLock acquire; Unlock, ReaderUnlock release.
MLASERVE_WRAP_VOID(_ZN4absl7debian35Mutex4LockEv, (Mutex * mu), (mu), (void)0, __tsan_acquire(mu))
MLASERVE_WRAP_VOID(_ZN4absl7debian35Mutex10ReaderLockEv, (Mutex * mu), (mu), (void)0,
                   __tsan_acquire(mu))
MLASERVE_WRAP_VOID(_ZN4absl7debian35Mutex6UnlockEv, (Mutex * mu), (mu), __tsan_release(mu), (void)0)
MLASERVE_WRAP_VOID(_ZN4absl7debian35Mutex12ReaderUnlockEv, (Mutex * mu), (mu), __tsan_release(mu),
                   (void)0)
// Await* may evaluate the condition, with the mutex held, after the wrapper's release and
// before the library actually releases the mutex; the condition is therefore wrapped to
// acquire before and release after each evaluation.
namespace {
struct GuardedCondition {
  Mutex* mu;
  const Condition* condition;
};
bool EvalGuarded(GuardedCondition* g) {
  __tsan_acquire(g->mu);
  const bool result = g->condition->Eval();
  __tsan_release(g->mu);
  return result;
}
}  // namespace

void __real__ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE(Mutex* mu, const Condition& c);
void __wrap__ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE(Mutex* mu, const Condition& c) {
  GuardedCondition g{mu, &c};
  __tsan_release(mu);
  __real__ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE(mu, Condition(&EvalGuarded, &g));
  __tsan_acquire(mu);
}
bool __real__ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE(
    Mutex* mu, const Condition& c, Duration d);
bool __wrap__ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE(
    Mutex* mu, const Condition& c, Duration d) {
  GuardedCondition g{mu, &c};
  __tsan_release(mu);
  const bool result =
      __real__ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE(
          mu, Condition(&EvalGuarded, &g), d);
  __tsan_acquire(mu);
  return result;
}
bool __real__ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE(
    Mutex* mu, const Condition& c, Time t);
bool __wrap__ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE(
    Mutex* mu, const Condition& c, Time t) {
  GuardedCondition g{mu, &c};
  __tsan_release(mu);
  const bool result = __real__ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE(
      mu, Condition(&EvalGuarded, &g), t);
  __tsan_acquire(mu);
  return result;
}

// CondVar: waiting releases and reacquires the mutex.
MLASERVE_WRAP_VOID(_ZN4absl7debian37CondVar4WaitEPNS0_5MutexE, (CondVar * cv, Mutex* mu), (cv, mu),
                   __tsan_release(mu), __tsan_acquire(mu))
MLASERVE_WRAP(bool, _ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE,
              (CondVar * cv, Mutex* mu, Duration d), (cv, mu, d), __tsan_release(mu),
              __tsan_acquire(mu))
MLASERVE_WRAP(bool, _ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE,
              (CondVar * cv, Mutex* mu, Time t), (cv, mu, t), __tsan_release(mu),
              __tsan_acquire(mu))

// Notification: Notify releases, a wait that saw it acquires.
MLASERVE_WRAP_VOID(_ZN4absl7debian312Notification6NotifyEv, (Notification * n), (n),
                   __tsan_release(n), (void)0)
MLASERVE_WRAP_VOID(_ZNK4absl7debian312Notification19WaitForNotificationEv, (const Notification* n),
                   (n), (void)0, __tsan_acquire(const_cast<Notification*>(n)))
MLASERVE_WRAP(bool, _ZNK4absl7debian312Notification30WaitForNotificationWithTimeoutENS0_8DurationE,
              (const Notification* n, Duration d), (n, d), (void)0,
              if (result) __tsan_acquire(const_cast<Notification*>(n)))

}  // extern "C"
