// InferenceService: mlaserve.v1.Inference on the gRPC callback API. Generate is a
// GenerateReactor; the other RPCs answer at once with unary reactors.
//
// The engine arrives after the server starts listening (SetEngine), so that health can say
// NOT_SERVING while the weights load; until then every RPC answers UNAVAILABLE. After
// StartDraining, Generate answers UNAVAILABLE while the rest keep answering.
//
// Every call of the service first passes `options.auth` (UNAUTHENTICATED otherwise).
//
// Thread-safety: all methods are thread-safe.
#ifndef MLASERVE_SERVER_GRPC_INFERENCE_SERVICE_H_
#define MLASERVE_SERVER_GRPC_INFERENCE_SERVICE_H_

#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "mlaserve/v1/inference.grpc.pb.h"
#include "server/grpc/auth.h"
#include "server/common/serving_engine.h"
#include "server/grpc/generate_reactor.h"
#include "server/grpc/wake_queue.h"
#include "server/metrics/request_observer.h"

namespace mlaserve {

// What the service enforces on every call.
struct InferenceServiceOptions {
  RequestObserver* observer = nullptr;  // may be null: no observation; must outlive the service
  BearerAuth auth;                      // no token: calls need no credentials
  int64_t max_prompt_bytes = int64_t{1} << 20;  // Generate and Tokenize text, before tokenizing
  // A Generate call whose client has not taken a written message for this long is cancelled
  // (and its request aborted), so a reader that stops reading holds no KV blocks and no
  // growing output buffer.
  absl::Duration stream_write_timeout = absl::Seconds(60);
};

class InferenceService final : public v1::Inference::CallbackService {
 public:
  explicit InferenceService(InferenceServiceOptions options);
  ~InferenceService() override;

  void SetEngine(std::shared_ptr<ServingEngine> engine);
  // Null until SetEngine.
  std::shared_ptr<ServingEngine> engine() const;

  // Refuses new Generate calls from now on.
  void StartDraining();
  bool draining() const;
  // Waits until no Generate call is open, or `deadline`; returns whether none is.
  bool WaitForNoCalls(absl::Time deadline);

  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* context, const v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* Abort(grpc::CallbackServerContext* context,
                                  const v1::AbortRequest* request,
                                  v1::AbortResponse* response) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const v1::TokenizeRequest* request,
                                     v1::TokenizeResponse* response) override;
  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* context,
                                       const v1::DetokenizeRequest* request,
                                       v1::DetokenizeResponse* response) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context,
                                         const v1::GetModelInfoRequest* request,
                                         v1::GetModelInfoResponse* response) override;
  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* context,
                                          const v1::GetServerInfoRequest* request,
                                          v1::GetServerInfoResponse* response) override;

 private:
  // Every so often, cancels the open calls whose client stopped reading (CancelIfStalled).
  void SweepStalledCalls();

  const InferenceServiceOptions options_;
  RequestObserver* const observer_;
  const absl::Time started_;
  RequestObserver default_observer_;
  // Where the Generate calls' stream wake-ups run, off the engine thread.
  WakeQueue wakes_;

  mutable absl::Mutex mu_;
  std::shared_ptr<ServingEngine> engine_ ABSL_GUARDED_BY(mu_);
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_set<GenerateReactor*> calls_ ABSL_GUARDED_BY(mu_);  // open Generate calls
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread stall_sweeper_;  // runs SweepStalledCalls; absent without a write timeout
};

}  // namespace mlaserve

#endif  // MLASERVE_SERVER_GRPC_INFERENCE_SERVICE_H_
