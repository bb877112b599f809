// WakeQueue: runs wake-ups on a thread of its own, so that whoever signals one (the engine
// thread, through a RequestStream ready callback) only queues it and goes on. GenerateReactor
// uses it to take its stream's output, build the response protos and start the gRPC write
// off the engine thread.
//
// A target woken again while it is queued is queued once (its OnWake takes everything pending
// anyway); one woken while its OnWake runs is queued again, so no wake-up is lost. Targets run
// one at a time, in the order they were first queued.
//
// Thread-safety: all methods are thread-safe. OnWake must not call Forget on its own target.
#ifndef MLASERVE_SERVER_GRPC_WAKE_QUEUE_H_
#define MLASERVE_SERVER_GRPC_WAKE_QUEUE_H_

#include <deque>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"

namespace mlaserve {

class WakeTarget {
 public:
  // Runs on the queue's thread after a Wake.
  virtual void OnWake() = 0;

 protected:
  ~WakeTarget() = default;
};

class WakeQueue {
 public:
  WakeQueue();
  // Runs what is still queued, then stops the thread.
  ~WakeQueue();

  WakeQueue(const WakeQueue&) = delete;
  WakeQueue& operator=(const WakeQueue&) = delete;

  // Queues `target` unless it is queued already. Never waits for a running OnWake.
  void Wake(WakeTarget* target);
  // Unqueues `target` and waits until its OnWake is not running: when Forget returns, the queue
  // no longer refers to it (until the next Wake), so it may be destroyed.
  void Forget(WakeTarget* target);

 private:
  void Run();

  absl::Mutex mu_;
  std::deque<WakeTarget*> queue_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<WakeTarget*> queued_ ABSL_GUARDED_BY(mu_);
  WakeTarget* running_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace mlaserve

#endif  // MLASERVE_SERVER_GRPC_WAKE_QUEUE_H_
