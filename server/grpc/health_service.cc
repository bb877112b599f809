#include "server/grpc/health_service.h"

#include <optional>

namespace mlaserve {
namespace {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

bool IsKnown(const std::string& service) {
  return service.empty() || service == kInferenceServiceName;
}

HealthCheckResponse::ServingStatus StatusOf(bool serving) {
  return serving ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING;
}

}  // namespace

// One Watch call: writes the latest status whenever it differs from the last one written,
// with at most one write in flight, so a burst of changes collapses to the final status.
class HealthService::Watcher final : public grpc::ServerWriteReactor<HealthCheckResponse> {
 public:
  Watcher(HealthService* service, bool known) : service_(service), known_(known) {}

  // Sends `serving` (or SERVICE_UNKNOWN for an unknown service) unless already sent.
  void Update(bool serving) {
    absl::MutexLock lock(&mu_);
    latest_ = known_ ? StatusOf(serving) : HealthCheckResponse::SERVICE_UNKNOWN;
    PumpLocked();
  }

  // Ends the call once the latest status has been written.
  void End() {
    absl::MutexLock lock(&mu_);
    ending_ = true;
    PumpLocked();
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    write_in_flight_ = false;
    if (!ok) client_gone_ = true;
    PumpLocked();
  }

  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    client_gone_ = true;
    PumpLocked();
  }

  void OnDone() override {
    // gRPC runs OnDone after Watch has returned and after every other reaction, but orders
    // them inside its own library, which ThreadSanitizer cannot see. Watch and every reaction
    // hold mu_, so taking it here makes that order visible (docs/reliability.md).
    { absl::MutexLock lock(&mu_); }
    service_->Remove(this);
    delete this;
  }

 private:
  void PumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_ || write_in_flight_) return;
    // A status not yet written goes out before the end (a drain sets NOT_SERVING, then
    // ends the call, possibly while the previous status is still in flight).
    if (latest_.has_value() && sent_ != latest_ && !client_gone_) {
      sent_ = latest_;
      response_.set_status(*latest_);
      write_in_flight_ = true;
      StartWrite(&response_);
      return;
    }
    if (ending_ || client_gone_) {
      finished_ = true;
      Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server is shutting down"));
    }
  }

  HealthService* const service_;
  const bool known_;
  absl::Mutex mu_;
  HealthCheckResponse response_ ABSL_GUARDED_BY(mu_);
  std::optional<HealthCheckResponse::ServingStatus> latest_ ABSL_GUARDED_BY(mu_);
  std::optional<HealthCheckResponse::ServingStatus> sent_ ABSL_GUARDED_BY(mu_);
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool ending_ ABSL_GUARDED_BY(mu_) = false;       // End was called
  bool client_gone_ ABSL_GUARDED_BY(mu_) = false;  // cancelled or a write failed
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

HealthService::~HealthService() {
  absl::MutexLock lock(&mu_);
  while (!watchers_.empty()) no_watchers_.Wait(&mu_);
}

void HealthService::SetServing(bool serving) {
  absl::MutexLock lock(&mu_);
  if (shut_down_ || serving_ == serving) return;
  serving_ = serving;
  for (Watcher* watcher : watchers_) watcher->Update(serving_);
}

bool HealthService::serving() const {
  absl::MutexLock lock(&mu_);
  return serving_;
}

void HealthService::Shutdown() {
  absl::MutexLock lock(&mu_);
  shut_down_ = true;
  serving_ = false;
  for (Watcher* watcher : watchers_) watcher->End();
}

void HealthService::Remove(Watcher* watcher) {
  absl::MutexLock lock(&mu_);
  watchers_.erase(watcher);
  if (watchers_.empty()) no_watchers_.SignalAll();
}

grpc::ServerUnaryReactor* HealthService::Check(grpc::CallbackServerContext* context,
                                               const HealthCheckRequest* request,
                                               HealthCheckResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (!IsKnown(request->service())) {
    reactor->Finish(grpc::Status(grpc::StatusCode::NOT_FOUND,
                                 "service: \"" + request->service() + "\" is not served here"));
    return reactor;
  }
  response->set_status(StatusOf(serving()));
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerWriteReactor<HealthCheckResponse>* HealthService::Watch(
    grpc::CallbackServerContext* context, const HealthCheckRequest* request) {
  auto* watcher = new Watcher(this, IsKnown(request->service()));
  absl::MutexLock lock(&mu_);
  watchers_.insert(watcher);
  if (shut_down_) {
    watcher->End();
  } else {
    watcher->Update(serving_);
  }
  return watcher;
}

}  // namespace mlaserve
