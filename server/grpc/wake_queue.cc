#include "server/grpc/wake_queue.h"

#include <algorithm>

namespace mlaserve {

WakeQueue::WakeQueue() : thread_([this] { Run(); }) {}

WakeQueue::~WakeQueue() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void WakeQueue::Wake(WakeTarget* target) {
  absl::MutexLock lock(&mu_);
  if (!queued_.insert(target).second) return;
  queue_.push_back(target);
}

void WakeQueue::Forget(WakeTarget* target) {
  absl::MutexLock lock(&mu_);
  if (queued_.erase(target) > 0) queue_.erase(std::find(queue_.begin(), queue_.end(), target));
  const auto idle = [this, target]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return running_ != target;
  };
  mu_.Await(absl::Condition(&idle));
}

void WakeQueue::Run() {
  absl::MutexLock lock(&mu_);
  const auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !queue_.empty() || stopping_;
  };
  while (true) {
    mu_.Await(absl::Condition(&ready));
    if (queue_.empty()) return;  // stopping, and nothing left to run
    WakeTarget* target = queue_.front();
    queue_.pop_front();
    queued_.erase(target);
    running_ = target;
    mu_.Unlock();
    target->OnWake();
    mu_.Lock();
    running_ = nullptr;
  }
}

}  // namespace mlaserve
