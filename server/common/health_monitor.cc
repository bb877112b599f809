#include "server/common/health_monitor.h"

#include <algorithm>
#include <memory>

#include "server/common/log.h"

namespace mlaserve {

bool StallDetector::Stalled(const EngineStats& stats, absl::Time now) {
  if (stats.num_running + stats.num_waiting == 0) {
    busy_since_ = absl::InfiniteFuture();
    return false;
  }
  busy_since_ = std::min(busy_since_, now);
  if (timeout_ == absl::ZeroDuration()) return false;
  // Idle time before the work arrived does not count: the reference is the later of the
  // arrival and the latest step.
  return now - std::max(busy_since_, stats.last_step_time) > timeout_;
}

HealthMonitor::HealthMonitor(HealthService* health, InferenceService* inference,
                             absl::Duration stall_timeout, absl::Duration poll_interval)
    : health_(health), inference_(inference), poll_interval_(poll_interval), stall_(stall_timeout) {
  thread_ = std::thread([this] {
    do {
      Poll();
    } while (!stop_.WaitForNotificationWithTimeout(poll_interval_));
  });
}

HealthMonitor::~HealthMonitor() {
  stop_.Notify();
  thread_.join();
}

std::string HealthMonitor::not_serving_reason() const {
  absl::MutexLock lock(&mu_);
  return logged_ ? reason_ : std::string("loading");
}

void HealthMonitor::Poll() {
  const std::shared_ptr<ServingEngine> engine = inference_->engine();
  absl::MutexLock lock(&mu_);
  std::string reason;
  if (engine == nullptr) {
    reason = "loading";
  } else {
    const EngineStats stats = engine->stats();
    const bool stalled = stall_.Stalled(stats, engine->Now());
    if (inference_->draining() || stats.draining) {
      reason = "draining";
    } else if (stats.failed) {
      reason = "engine_failed";
    } else if (stalled) {
      reason = "stalled";
    }
  }
  health_->SetServing(reason.empty());
  if (logged_ && reason == reason_) return;
  logged_ = true;
  reason_ = reason;
  LogEvent("health", {{"status", std::string(reason.empty() ? "SERVING" : "NOT_SERVING")},
                      {"reason", reason.empty() ? std::string("ready") : reason}});
}

}  // namespace mlaserve
