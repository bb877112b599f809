// InferenceServer: the gRPC server of `mlaserve serve` — mlaserve.v1.Inference, grpc.health.v1
// and server reflection on one port — with the health watchdog and the graceful drain. It
// listens before the model is loaded, so health answers NOT_SERVING during the load.
//
// Thread-safety: SetEngine and DrainAndShutdown may be called from any thread, once each.
#ifndef MLASERVE_SERVER_GRPC_INFERENCE_SERVER_H_
#define MLASERVE_SERVER_GRPC_INFERENCE_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "server/common/health_monitor.h"
#include "server/grpc/health_service.h"
#include "server/grpc/inference_service.h"
#include "server/metrics/request_observer.h"
#include "server/common/serving_engine.h"

namespace mlaserve {

struct InferenceServerOptions {
  // "0.0.0.0" also serves IPv6 where the host has it; "::1", "[::1]" and names work as well.
  std::string host = "0.0.0.0";
  int port = 50051;  // 0: any free port (see InferenceServer::port)
  int max_receive_message_bytes = 16 << 20;
  int max_concurrent_streams = 1024;                     // per HTTP/2 connection
  absl::Duration keepalive_time = absl::Hours(2);        // server pings idle connections this often
  absl::Duration keepalive_timeout = absl::Seconds(20);  // ... and drops them without an answer
  absl::Duration min_client_ping_interval = absl::Seconds(10);  // clients may ping this often
  // PEM files. A certificate and key turn on TLS; a client CA also requires and verifies
  // client certificates (mTLS).
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_client_ca_file;
  // A file holding a static bearer token that every Inference call must carry (health needs
  // none). With a token, server reflection is off: it could not check the token.
  std::string auth_token_file;
  int64_t max_prompt_bytes = int64_t{1} << 20;  // text of Generate and Tokenize
  // A Generate stream whose client takes no message for this long is cancelled; zero: never.
  absl::Duration stream_write_timeout = absl::Seconds(60);
  absl::Duration stall_timeout = absl::Seconds(60);  // zero: no stall detection
  absl::Duration health_poll_interval = absl::Milliseconds(500);
  RequestObserver* observer = nullptr;  // may be null; must outlive the server
};

// The address gRPC binds for `host`:`port`: IPv6 literals get brackets, and "0.0.0.0" becomes
// "[::]" (dual-stack) when the host can open IPv6 sockets.
std::string ListenAddress(const std::string& host, int port);

class InferenceServer {
 public:
  // Binds and starts serving (NOT_SERVING until SetEngine). Errors: InvalidArgument for bad
  // options or unreadable TLS files (naming the flag), Unavailable when the port cannot be
  // bound.
  static absl::StatusOr<std::unique_ptr<InferenceServer>> Start(
      const InferenceServerOptions& options);

  // Shuts down at once if DrainAndShutdown was not called (open calls are cancelled).
  ~InferenceServer();

  InferenceServer(const InferenceServer&) = delete;
  InferenceServer& operator=(const InferenceServer&) = delete;

  int port() const { return port_; }

  // The model is loaded: serve it (health turns SERVING unless something else is wrong).
  void SetEngine(std::shared_ptr<ServingEngine> engine);

  // The SIGTERM sequence: health NOT_SERVING and new Generate calls UNAVAILABLE at once;
  // running requests get `drain_timeout` to finish, the rest end with FINISH_REASON_ABORT;
  // then health watches end and the gRPC server stops. Health, GetServerInfo and GetModelInfo
  // answer until the gRPC server stops.
  void DrainAndShutdown(absl::Duration drain_timeout);

  InferenceService& inference() { return inference_; }
  HealthService& health() { return health_; }
  const HealthMonitor& health_monitor() const { return *monitor_; }

 private:
  explicit InferenceServer(InferenceServiceOptions options);

  InferenceService inference_;
  HealthService health_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<HealthMonitor> monitor_;  // destroyed before the services it reads
  int port_ = 0;
  bool shut_down_ = false;
};

}  // namespace mlaserve

#endif  // MLASERVE_SERVER_GRPC_INFERENCE_SERVER_H_
