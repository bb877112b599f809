// WakeQueue: wake-ups run on the queue's thread, coalesce while queued, are not lost while
// their target runs, and Forget both unqueues and waits for a running target.
#include "server/grpc/wake_queue.h"

#include <atomic>
#include <memory>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace mlaserve {
namespace {

// Counts its wake-ups and records the thread; optionally blocks in OnWake until released.
class Target final : public WakeTarget {
 public:
  explicit Target(bool block_first = false) : block_first_(block_first) {}

  void OnWake() override {
    thread_ = std::this_thread::get_id();
    const int n = ++runs_;
    if (block_first_ && n == 1) {
      entered_.Notify();
      release_.WaitForNotification();
    }
    if (on_wake_) on_wake_(n);
  }

  int runs() const { return runs_.load(); }
  std::thread::id thread() const { return thread_; }
  void WaitEntered() { entered_.WaitForNotification(); }
  void Release() { release_.Notify(); }
  std::function<void(int)> on_wake_;

 private:
  const bool block_first_;
  std::atomic<int> runs_{0};
  std::thread::id thread_;
  absl::Notification entered_, release_;
};

// Waits until `target` has run `n` times (or 10 s pass).
bool WaitForRuns(const Target& target, int n) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (target.runs() < n && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  return target.runs() >= n;
}

TEST(WakeQueueTest, RunsOnItsOwnThreadNotTheWakers) {
  WakeQueue queue;
  Target target;
  queue.Wake(&target);
  ASSERT_TRUE(WaitForRuns(target, 1));
  EXPECT_NE(target.thread(), std::this_thread::get_id());
  queue.Forget(&target);
}

TEST(WakeQueueTest, WakeUpsWhileQueuedRunOnce) {
  WakeQueue queue;
  Target blocker(/*block_first=*/true), target;
  queue.Wake(&blocker);
  blocker.WaitEntered();  // the queue's thread is busy: what follows stays queued
  for (int i = 0; i < 5; ++i) queue.Wake(&target);
  blocker.Release();
  ASSERT_TRUE(WaitForRuns(target, 1));
  queue.Forget(&target);  // nothing of it is queued or running after this
  EXPECT_EQ(target.runs(), 1);
  queue.Forget(&blocker);
}

TEST(WakeQueueTest, WakeDuringItsOwnRunIsNotLost) {
  WakeQueue queue;
  Target target(/*block_first=*/true);
  queue.Wake(&target);
  target.WaitEntered();
  queue.Wake(&target);  // output arrived while the first wake-up was being handled
  target.Release();
  ASSERT_TRUE(WaitForRuns(target, 2));
  queue.Forget(&target);
  EXPECT_EQ(target.runs(), 2);
}

TEST(WakeQueueTest, ForgetWaitsForARunningTarget) {
  WakeQueue queue;
  Target target(/*block_first=*/true);
  std::atomic<bool> finished_running{false};
  target.on_wake_ = [&](int) { finished_running = true; };
  queue.Wake(&target);
  target.WaitEntered();
  std::atomic<bool> forgot{false};
  std::thread forgetter([&] {
    queue.Forget(&target);
    forgot = true;
    EXPECT_TRUE(finished_running.load()) << "Forget returned while OnWake was still running";
  });
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(forgot.load());
  target.Release();
  forgetter.join();
  EXPECT_TRUE(forgot.load());
}

TEST(WakeQueueTest, ForgetUnqueues) {
  WakeQueue queue;
  Target blocker(/*block_first=*/true), target, after;
  queue.Wake(&blocker);
  blocker.WaitEntered();
  queue.Wake(&target);
  queue.Wake(&after);
  queue.Forget(&target);
  blocker.Release();
  ASSERT_TRUE(WaitForRuns(after, 1));  // runs in order, so target would have run before it
  EXPECT_EQ(target.runs(), 0);
  queue.Forget(&after);
  queue.Forget(&blocker);
}

TEST(WakeQueueTest, DestructionRunsWhatIsQueued) {
  Target blocker(/*block_first=*/true), target;
  {
    WakeQueue queue;
    queue.Wake(&blocker);
    blocker.WaitEntered();
    queue.Wake(&target);
    blocker.Release();
  }
  EXPECT_EQ(target.runs(), 1);
}

}  // namespace
}  // namespace mlaserve
