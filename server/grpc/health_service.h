// HealthService: grpc.health.v1.Health (Check and Watch) for the services "" (the server) and
// "mlaserve.v1.Inference". Both share one status, which HealthMonitor sets from the engine's
// state; it starts NOT_SERVING. Check of any other name answers NOT_FOUND; Watch of one
// streams SERVICE_UNKNOWN, as the protocol asks.
//
// Thread-safety: all methods are thread-safe. Lock order: mu_, then a watcher's lock.
#ifndef MLASERVE_SERVER_GRPC_HEALTH_SERVICE_H_
#define MLASERVE_SERVER_GRPC_HEALTH_SERVICE_H_

#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace mlaserve {

inline constexpr std::string_view kInferenceServiceName = "mlaserve.v1.Inference";

class HealthService final : public grpc::health::v1::Health::CallbackService {
 public:
  using ServingStatus = grpc::health::v1::HealthCheckResponse::ServingStatus;

  HealthService() = default;
  // REQUIRES: no Watch call is open (Shutdown ends them).
  ~HealthService() override;

  // Sets the status of both services; every Watch call sees a change.
  void SetServing(bool serving);
  bool serving() const;
  // NOT_SERVING from now on, and ends every Watch call with UNAVAILABLE (new ones end at
  // once), so that the gRPC server can shut down without waiting for them.
  void Shutdown();

  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* context,
                                  const grpc::health::v1::HealthCheckRequest* request,
                                  grpc::health::v1::HealthCheckResponse* response) override;
  grpc::ServerWriteReactor<grpc::health::v1::HealthCheckResponse>* Watch(
      grpc::CallbackServerContext* context,
      const grpc::health::v1::HealthCheckRequest* request) override;

 private:
  class Watcher;

  void Remove(Watcher* watcher);

  mutable absl::Mutex mu_;
  bool serving_ ABSL_GUARDED_BY(mu_) = false;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  absl::CondVar no_watchers_;
  absl::flat_hash_set<Watcher*> watchers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mlaserve

#endif  // MLASERVE_SERVER_GRPC_HEALTH_SERVICE_H_
