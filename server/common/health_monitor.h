// HealthMonitor: the watchdog that keeps grpc.health.v1 truthful. The server is SERVING only
// when the model is loaded (the engine is set), the server is not draining, the engine has not
// failed, and an engine with work keeps finishing steps (no stall longer than stall_timeout).
//
// Thread-safety: Poll may be called from any thread, concurrently with the watchdog thread.
#ifndef MLASERVE_SERVER_COMMON_HEALTH_MONITOR_H_
#define MLASERVE_SERVER_COMMON_HEALTH_MONITOR_H_

#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "engine/engine.h"
#include "server/grpc/health_service.h"
#include "server/grpc/inference_service.h"

namespace mlaserve {

// Whether an engine that has work keeps finishing steps. Not thread-safe.
class StallDetector {
 public:
  // A zero `timeout` never reports a stall.
  explicit StallDetector(absl::Duration timeout) : timeout_(timeout) {}

  // `now` is on the engine's clock. Stalled: the engine has had work (running or waiting) for
  // longer than the timeout, and its latest step ended longer ago than that too.
  bool Stalled(const EngineStats& stats, absl::Time now);

 private:
  const absl::Duration timeout_;
  // When work was first seen after the engine was last seen idle.
  absl::Time busy_since_ = absl::InfiniteFuture();
};

class HealthMonitor {
 public:
  // Both services must outlive the monitor. Starts the watchdog thread, which polls every
  // `poll_interval`.
  HealthMonitor(HealthService* health, InferenceService* inference, absl::Duration stall_timeout,
                absl::Duration poll_interval);
  // Stops the watchdog thread.
  ~HealthMonitor();

  HealthMonitor(const HealthMonitor&) = delete;
  HealthMonitor& operator=(const HealthMonitor&) = delete;

  // Re-evaluates at once (the server calls it when it starts draining or the engine arrives);
  // logs every change of status with its reason.
  void Poll();

  // Why the server is not serving as of the latest Poll ("loading", "draining",
  // "engine_failed", "stalled"); empty while it is serving. The HTTP /health answers by it.
  std::string not_serving_reason() const;

 private:
  HealthService* const health_;
  InferenceService* const inference_;
  const absl::Duration poll_interval_;
  absl::Notification stop_;

  mutable absl::Mutex mu_;
  StallDetector stall_ ABSL_GUARDED_BY(mu_);
  std::string reason_ ABSL_GUARDED_BY(mu_);  // why not serving; empty when serving
  bool logged_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace mlaserve

#endif  // MLASERVE_SERVER_COMMON_HEALTH_MONITOR_H_
