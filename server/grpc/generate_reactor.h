// GenerateReactor: one Generate call. It validates and submits the request, then relays the
// request's RequestStream to the client with at most one write in flight: whatever the engine
// produces while a write is in flight is taken at once when it completes and sent as one
// coalesced Chunk. The engine thread only queues a wake-up (RequestStream ready callback into
// the service's WakeQueue) and never waits for a client: taking the output, building the
// protos and starting the write happen on the WakeQueue's thread, or on a gRPC thread when a
// write completes.
//
// Every way a call can end frees the request's KV blocks: a finished stream has already been
// released by the engine; a client cancel or an expired gRPC deadline (OnCancel), a failed
// write and a client that stops reading (CancelIfStalled) abort the request in the engine.
//
// Lifetime: created by InferenceService::Generate, deletes itself in OnDone.
// Thread-safety: reactions (gRPC threads) and wake-ups (the WakeQueue's thread) may run
// concurrently; mu_ serializes them.
#ifndef MLASERVE_SERVER_GRPC_GENERATE_REACTOR_H_
#define MLASERVE_SERVER_GRPC_GENERATE_REACTOR_H_

#include <functional>
#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "mlaserve/v1/inference.grpc.pb.h"
#include "server/common/serving_engine.h"
#include "server/grpc/wake_queue.h"
#include "server/metrics/request_observer.h"

namespace mlaserve {

// What a Generate call is held to beyond request validation.
struct GenerateLimits {
  int64_t max_prompt_bytes = int64_t{1} << 20;  // text prompts, checked before tokenizing
  absl::Duration write_timeout = absl::Seconds(60);  // see CancelIfStalled
};

class GenerateReactor final : public grpc::ServerWriteReactor<v1::GenerateResponse>,
                              private WakeTarget {
 public:
  // `engine` is null while the model loads; `admission` non-OK refuses the call with it (the
  // server is draining). `observer` and `wakes` must outlive the call; `on_done(this)` runs in
  // OnDone, just before the reactor is deleted.
  GenerateReactor(grpc::CallbackServerContext* context, std::shared_ptr<ServingEngine> engine,
                  RequestObserver* observer, WakeQueue* wakes, GenerateLimits limits,
                  std::function<void(GenerateReactor*)> on_done);

  // Validates `request`, submits it and starts streaming, or ends the call with the error.
  // Called once, right after construction, on the handler's thread.
  void Start(const v1::GenerateRequest& request, const absl::Status& admission);

  // Cancels the call (which aborts its request) when one message has been waiting for the
  // client to take it for longer than the write timeout at `now`: a client that stops reading
  // cannot keep the request running or its output buffered. Called periodically by the
  // service, never from a reaction; `this` must not be done yet.
  void CancelIfStalled(absl::Time now);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  // Validates and submits the request.
  absl::StatusOr<std::shared_ptr<RequestStream>> Submit(const v1::GenerateRequest& proto,
                                                        const absl::Status& admission);
  // The stream has output (queued by its ready callback; runs on the WakeQueue's thread).
  void OnWake() override;
  // Starts the next write or the Finish, if nothing is in flight.
  void PumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes the stream's pending output: returns the message to write next, if any, and records
  // what follows it (pending_complete_, final_status_).
  std::optional<v1::GenerateResponse> TakeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WriteLocked(v1::GenerateResponse response) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishLocked(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the call because the client is gone (cancel, deadline, failed write). Returns the id
  // to abort in the engine (the caller does so after releasing mu_), if the stream is live.
  std::optional<RequestId> AbandonLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  grpc::CallbackServerContext* const context_;
  const std::shared_ptr<ServingEngine> engine_;
  RequestObserver* const observer_;
  WakeQueue* const wakes_;
  const GenerateLimits limits_;
  const std::function<void(GenerateReactor*)> on_done_;

  absl::Mutex mu_;
  std::shared_ptr<RequestStream> stream_ ABSL_GUARDED_BY(mu_);
  v1::GenerateResponse response_ ABSL_GUARDED_BY(mu_);  // the message being written
  // A Complete that follows the chunk in flight.
  std::optional<v1::GenerateResponse> pending_complete_ ABSL_GUARDED_BY(mu_);
  // How the call ends once everything before it is written.
  std::optional<absl::Status> final_status_ ABSL_GUARDED_BY(mu_);
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time write_started_ ABSL_GUARDED_BY(mu_);  // of the write in flight
  bool stall_cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;      // Finish was called
  bool stream_ended_ ABSL_GUARDED_BY(mu_) = false;  // the terminal update was taken
  bool client_gone_ ABSL_GUARDED_BY(mu_) = false;   // cancelled or a write failed
  bool sent_first_ ABSL_GUARDED_BY(mu_) = false;    // request_id goes on the first message
};

}  // namespace mlaserve

#endif  // MLASERVE_SERVER_GRPC_GENERATE_REACTOR_H_
