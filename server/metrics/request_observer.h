// RequestObserver: the events of Generate calls, for metrics (contracts/metrics.md). The
// service calls it where the events happen; the default does nothing, so the service runs
// without one. Latencies come with the events, measured by the engine's clock: those of a
// request in its Completion, the inter-token gaps per step (EngineOptions::on_step).
//
// Thread-safety: methods are called from gRPC threads and from the engine thread, for many
// requests at once; implementations must be thread-safe, cheap and non-blocking (they run
// while a stream's lock is held).
#ifndef MLASERVE_SERVER_METRICS_REQUEST_OBSERVER_H_
#define MLASERVE_SERVER_METRICS_REQUEST_OBSERVER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/request_stream.h"

namespace mlaserve {

class RequestObserver {
 public:
  virtual ~RequestObserver() = default;

  // A validated request was admitted by the engine.
  virtual void OnAdmitted(int32_t num_prompt_tokens) {}
  // A Chunk carrying `num_tokens` new tokens was handed to gRPC.
  virtual void OnTokensSent(int32_t num_tokens) {}
  // The stream reached Complete (every finish reason, ABORT included).
  virtual void OnCompleted(const Completion& completion) {}
  // The call ended with an error status: refused, failed, past its deadline or cancelled.
  virtual void OnFailed(absl::StatusCode code) {}
};

}  // namespace mlaserve

#endif  // MLASERVE_SERVER_METRICS_REQUEST_OBSERVER_H_
