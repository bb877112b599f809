#include "server/grpc/inference_server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/util/read_file.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "server/common/log.h"

namespace mlaserve {
namespace {

// How long streams that the engine has ended get to deliver their last messages.
constexpr absl::Duration kFinalWriteGrace = absl::Seconds(5);
// How long the gRPC server waits for calls still open after that before cancelling them.
constexpr absl::Duration kShutdownGrace = absl::Seconds(1);

bool Ipv6Available() {
  const int fd = socket(AF_INET6, SOCK_STREAM, 0);
  if (fd < 0) return false;
  close(fd);
  return true;
}

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* flag) {
  absl::StatusOr<std::string> content = ReadWholeFile(path);
  if (!content.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", content.status().message()));
  }
  if (content->empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": \"", path, "\" is empty"));
  }
  return content;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> Credentials(
    const InferenceServerOptions& o) {
  if (o.tls_cert_file.empty() != o.tls_key_file.empty()) {
    return absl::InvalidArgumentError("--tls_cert and --tls_key must be given together");
  }
  if (o.tls_cert_file.empty()) {
    if (!o.tls_client_ca_file.empty()) {
      return absl::InvalidArgumentError("--tls_client_ca needs --tls_cert and --tls_key");
    }
    return grpc::InsecureServerCredentials();
  }
  absl::StatusOr<std::string> cert = ReadPem(o.tls_cert_file, "tls_cert");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadPem(o.tls_key_file, "tls_key");
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions ssl(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  if (!o.tls_client_ca_file.empty()) {
    absl::StatusOr<std::string> ca = ReadPem(o.tls_client_ca_file, "tls_client_ca");
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *std::move(ca);
    ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  ssl.pem_key_cert_pairs.push_back({*std::move(key), *std::move(cert)});
  return grpc::SslServerCredentials(ssl);
}

absl::Status ValidateOptions(const InferenceServerOptions& o) {
  if (o.port < 0 || o.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--port: ", o.port, " is not in [0, 65535]"));
  }
  if (o.host.empty()) return absl::InvalidArgumentError("--host: must not be empty");
  if (o.max_receive_message_bytes <= 0) {
    return absl::InvalidArgumentError("--max_message_bytes: must be positive");
  }
  if (o.max_concurrent_streams <= 0) {
    return absl::InvalidArgumentError("--max_concurrent_streams: must be positive");
  }
  if (o.keepalive_time <= absl::ZeroDuration() || o.keepalive_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "--keepalive_time_s and --keepalive_timeout_s: must be "
        "positive");
  }
  if (o.min_client_ping_interval < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--keepalive_min_client_interval_s: must not be negative");
  }
  if (o.max_prompt_bytes <= 0) {
    return absl::InvalidArgumentError("--max_prompt_bytes: must be positive");
  }
  if (o.stream_write_timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--stream_write_timeout_s: must not be negative");
  }
  if (o.stall_timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--stall_timeout_s: must not be negative");
  }
  return absl::OkStatus();
}

int Milliseconds(absl::Duration d) {
  return static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(d), INT32_MAX));
}

}  // namespace

std::string ListenAddress(const std::string& host, int port) {
  if (host == "0.0.0.0" && Ipv6Available()) return absl::StrCat("[::]:", port);
  if (host.find(':') != std::string::npos && host.front() != '[') {
    return absl::StrCat("[", host, "]:", port);
  }
  return absl::StrCat(host, ":", port);
}

InferenceServer::InferenceServer(InferenceServiceOptions options)
    : inference_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<InferenceServer>> InferenceServer::Start(
    const InferenceServerOptions& options) {
  if (absl::Status valid = ValidateOptions(options); !valid.ok()) return valid;
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials = Credentials(options);
  if (!credentials.ok()) return credentials.status();
  absl::StatusOr<BearerAuth> auth = BearerAuth::FromFile(options.auth_token_file);
  if (!auth.ok()) return auth.status();
  if (!auth->enabled()) grpc::reflection::InitProtoReflectionServerBuilderPlugin();

  std::unique_ptr<InferenceServer> server(
      new InferenceServer({.observer = options.observer,
                           .auth = *std::move(auth),
                           .max_prompt_bytes = options.max_prompt_bytes,
                           .stream_write_timeout = options.stream_write_timeout}));
  const std::string address = ListenAddress(options.host, options.port);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, *credentials, &server->port_);
  builder.RegisterService(&server->inference_);
  builder.RegisterService(&server->health_);
  builder.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, options.max_concurrent_streams);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, Milliseconds(options.keepalive_time));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                             Milliseconds(options.keepalive_timeout));
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             Milliseconds(options.min_client_ping_interval));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // Without this a second daemon on the same port would start and share the traffic.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("--host/--port: cannot listen on ", address, " (in use or not local?)"));
  }
  LogEvent("listening", {{"address", address},
                         {"port", int64_t{server->port_}},
                         {"tls", !options.tls_cert_file.empty()},
                         {"mtls", !options.tls_client_ca_file.empty()},
                         {"auth_token", !options.auth_token_file.empty()}});
  server->monitor_ = std::make_unique<HealthMonitor>(
      &server->health_, &server->inference_, options.stall_timeout, options.health_poll_interval);
  return server;
}

InferenceServer::~InferenceServer() {
  monitor_.reset();
  if (server_ != nullptr && !shut_down_) {
    health_.Shutdown();
    server_->Shutdown(std::chrono::system_clock::now());
  }
}

void InferenceServer::SetEngine(std::shared_ptr<ServingEngine> engine) {
  inference_.SetEngine(std::move(engine));
  monitor_->Poll();
}

void InferenceServer::DrainAndShutdown(absl::Duration drain_timeout) {
  LogEvent("drain_started", {{"timeout_seconds", absl::ToDoubleSeconds(drain_timeout)}});
  inference_.StartDraining();
  monitor_->Poll();
  if (std::shared_ptr<ServingEngine> engine = inference_.engine()) engine->Drain(drain_timeout);
  const bool delivered = inference_.WaitForNoCalls(absl::Now() + kFinalWriteGrace);
  health_.Shutdown();
  server_->Shutdown(absl::ToChronoTime(absl::Now() + kShutdownGrace));
  shut_down_ = true;
  LogEvent("drain_finished", {{"all_streams_delivered", delivered}});
}

}  // namespace mlaserve
