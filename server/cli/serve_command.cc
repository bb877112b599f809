#include "server/cli/serve_command.h"

#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "engine/engine.h"
#include "engine/model_runner.h"
#include "engine/status_macros.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/tokenizer.h"
#include "kernels/dtype.h"
#include "server/cli/engine_flags.h"
#include "server/cli/metrics_flags.h"
#include "server/common/log.h"
#include "server/common/serving_engine.h"
#include "server/common/version.h"
#include "server/grpc/inference_server.h"
#include "server/http/http_server.h"

ABSL_FLAG(std::string, host, "0.0.0.0", "gRPC bind address (0.0.0.0 also serves IPv6)");
ABSL_FLAG(int, port, 50051, "gRPC port (Inference, grpc.health.v1, reflection)");
ABSL_FLAG(int, max_queue, 1024, "requests that may wait for admission; more: RESOURCE_EXHAUSTED");
ABSL_FLAG(double, drain_timeout_s, 30,
          "on SIGTERM/SIGINT, seconds running requests get to finish before they are aborted");
ABSL_FLAG(double, stall_timeout_s, 60,
          "health turns NOT_SERVING when an engine with work finishes no step for this long "
          "(0 = never)");
ABSL_FLAG(int, max_message_bytes, 16 << 20, "largest request message accepted");
ABSL_FLAG(int, max_concurrent_streams, 1024, "concurrent calls per client connection");
ABSL_FLAG(double, keepalive_time_s, 7200, "ping idle client connections this often");
ABSL_FLAG(double, keepalive_timeout_s, 20, "drop a connection whose ping gets no answer");
ABSL_FLAG(double, keepalive_min_client_interval_s, 10, "most frequent client pings allowed");
ABSL_FLAG(std::string, log_format, "text", "text | json (one line per event on stderr)");
ABSL_FLAG(std::string, tls_cert, "", "PEM server certificate chain; with --tls_key turns on TLS");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA bundle; when set, clients must present a certificate it signed (mTLS)");
ABSL_FLAG(std::string, auth_token_file, "",
          "file holding a bearer token every Inference call must carry as 'authorization: "
          "Bearer TOKEN' (health needs none; reflection is off)");
ABSL_FLAG(int64_t, max_prompt_bytes, int64_t{1} << 20,
          "longest text prompt (Generate, Tokenize) in bytes, refused before tokenization");
ABSL_FLAG(double, stream_write_timeout_s, 60,
          "cancel a Generate stream whose client takes no message for this long (0 = never)");
ABSL_FLAG(int, http_port, 8000,
          "OpenAI-compatible HTTP API (/v1/completions, /v1/chat/completions, /v1/models, "
          "/health); 0 turns it off");
ABSL_FLAG(int, http_threads, 2, "I/O threads of the HTTP API");
ABSL_FLAG(std::string, chat_template, "",
          "Jinja chat template file for /v1/chat/completions; default: the model's "
          "tokenizer_config.json chat_template");
ABSL_FLAG(bool, enable_prefix_caching, true, "reuse KV blocks of shared prompt prefixes");

namespace mlaserve {
namespace {

absl::Duration Seconds(const absl::Flag<double>& flag) {
  return absl::Seconds(absl::GetFlag(flag));
}

absl::StatusOr<InferenceServerOptions> ServerOptionsFromFlags() {
  InferenceServerOptions o;
  o.host = absl::GetFlag(FLAGS_host);
  o.port = absl::GetFlag(FLAGS_port);
  o.max_receive_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  o.max_concurrent_streams = absl::GetFlag(FLAGS_max_concurrent_streams);
  o.keepalive_time = Seconds(FLAGS_keepalive_time_s);
  o.keepalive_timeout = Seconds(FLAGS_keepalive_timeout_s);
  o.min_client_ping_interval = Seconds(FLAGS_keepalive_min_client_interval_s);
  o.tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
  o.tls_key_file = absl::GetFlag(FLAGS_tls_key);
  o.tls_client_ca_file = absl::GetFlag(FLAGS_tls_client_ca);
  o.stall_timeout = Seconds(FLAGS_stall_timeout_s);
  o.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  o.max_prompt_bytes = absl::GetFlag(FLAGS_max_prompt_bytes);
  o.stream_write_timeout = Seconds(FLAGS_stream_write_timeout_s);
  if (absl::GetFlag(FLAGS_drain_timeout_s) < 0) {
    return absl::InvalidArgumentError("--drain_timeout_s: must not be negative");
  }
  if (absl::GetFlag(FLAGS_max_queue) <= 0) {
    return absl::InvalidArgumentError("--max_queue: must be positive");
  }
  return o;
}

// `metrics` (may be null) observes every engine step.
absl::StatusOr<std::unique_ptr<ServingEngine>> LoadEngine(Metrics* metrics) {
  const std::string dir = ModelDirFromFlags();
  ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, BackendFromFlags());
  ASSIGN_OR_RETURN(ModelOptions model_options, ModelOptionsFromFlags(backend->activation_dtype()));
  ASSIGN_OR_RETURN(auto runner, ModelRunnerFromFlags(backend.get(), model_options));
  const int64_t max_model_len = runner->model().options().max_model_len;
  std::shared_ptr<const Tokenizer> tokenizer;
  if (std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json")) {
    ASSIGN_OR_RETURN(tokenizer, Tokenizer::Load(dir));
  } else {
    LogEvent("no_tokenizer", {{"model", dir}, {"effect", std::string("token_ids prompts only")}});
  }
  EngineOptions options;
  options.scheduler.max_num_seqs = absl::GetFlag(FLAGS_max_num_seqs);
  options.scheduler.max_num_batched_tokens = absl::GetFlag(FLAGS_max_num_batched_tokens);
  options.scheduler.max_model_len = static_cast<int32_t>(max_model_len);
  options.scheduler.max_num_waiting_seqs = absl::GetFlag(FLAGS_max_queue);
  options.scheduler.kv_cache.enable_prefix_caching = absl::GetFlag(FLAGS_enable_prefix_caching);
  if (metrics != nullptr) {
    options.on_step = [metrics](const StepObservation& step) { metrics->OnStep(step); };
  }
  ServingDescription description{
      .backend_name = std::string(backend->name()),
      .activation_dtype = std::string(DTypeName(backend->activation_dtype())),
      .kv_cache_dtype = std::string(DTypeName(model_options.kv_cache_dtype)),
      .graph_batch_sizes = runner->graph_buckets()};
  ASSIGN_OR_RETURN(
      std::unique_ptr<Engine> engine,
      Engine::Create(std::move(runner), std::move(backend), tokenizer, std::move(options)));
  // The directory's name ("DeepSeek-V2-Lite-Chat"), as Hugging Face names models.
  description.model_name = std::filesystem::path(dir).lexically_normal().filename();
  if (description.model_name.empty()) description.model_name = dir;
  return MakeServingEngine(std::move(engine), std::move(tokenizer), std::move(description));
}

// The chat template of /v1/chat/completions: --chat_template, else the model's; null when the
// model has none (chat requests then answer 400). A template that fails to compile fails
// start-up with its message.
absl::StatusOr<std::shared_ptr<const ChatTemplate>> LoadChatTemplate() {
  const std::string override_file = absl::GetFlag(FLAGS_chat_template);
  absl::StatusOr<ChatTemplate> loaded = ChatTemplate::Load(ModelDirFromFlags(), override_file);
  if (loaded.ok()) return std::make_shared<const ChatTemplate>(*std::move(loaded));
  if (absl::IsNotFound(loaded.status()) && override_file.empty()) {
    LogEvent("no_chat_template", {{"model", ModelDirFromFlags()},
                                  {"effect", std::string("chat completions answer 400")}});
    return nullptr;
  }
  return absl::Status(loaded.status().code(),
                      absl::StrCat("--chat_template: ", loaded.status().message()));
}

// The HTTP API, or null with --http_port=0. /health follows the gRPC health watchdog.
absl::StatusOr<std::unique_ptr<HttpServer>> StartHttpFromFlags(
    const InferenceServerOptions& grpc_options, const InferenceServer* grpc_server) {
  if (absl::GetFlag(FLAGS_http_port) == 0) return nullptr;
  HttpServerOptions options;
  options.host = grpc_options.host;
  options.port = absl::GetFlag(FLAGS_http_port);
  options.num_threads = absl::GetFlag(FLAGS_http_threads);
  options.write_timeout = grpc_options.stream_write_timeout;
  options.routes = {.max_prompt_bytes = grpc_options.max_prompt_bytes,
                    .observer = grpc_options.observer,
                    .not_serving_reason = [grpc_server] {
                      return grpc_server->health_monitor().not_serving_reason();
                    }};
  return HttpServer::Start(std::move(options));
}

// Blocks SIGTERM and SIGINT in this thread and every thread started later, and turns their
// first delivery into `shutdown`.
void WaitForSignalsInBackground(std::shared_ptr<absl::Notification> shutdown) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::thread([signals, shutdown = std::move(shutdown)] {
    int signal = 0;
    sigwait(&signals, &signal);
    LogEvent("signal", {{"signal", std::string(strsignal(signal))}});
    shutdown->Notify();
  }).detach();
}

absl::Status Run() {
  ASSIGN_OR_RETURN(LogFormat format, ParseLogFormat(absl::GetFlag(FLAGS_log_format)));
  SetLogFormat(format);
  ASSIGN_OR_RETURN(InferenceServerOptions server_options, ServerOptionsFromFlags());
  // Before any thread starts (the metrics server's too), so that every thread inherits the
  // blocked signals and SIGTERM reaches only the waiting thread.
  auto shutdown = std::make_shared<absl::Notification>();
  WaitForSignalsInBackground(shutdown);
  // Declared before the server and the engine, which call into the metrics: destroyed after.
  ASSIGN_OR_RETURN(MetricsFromFlags metrics, StartMetricsFromFlags());
  server_options.observer = metrics.metrics.get();

  LogEvent("starting", {{"version", std::string(Version())}});
  ASSIGN_OR_RETURN(std::unique_ptr<InferenceServer> server, InferenceServer::Start(server_options));
  ASSIGN_OR_RETURN(std::unique_ptr<HttpServer> http,
                   StartHttpFromFlags(server_options, server.get()));
  std::shared_ptr<const ChatTemplate> chat_template;
  if (http != nullptr) {
    ASSIGN_OR_RETURN(chat_template, LoadChatTemplate());
  }
  LogEvent("loading", {{"model", ModelDirFromFlags()}});
  const absl::Time load_start = absl::Now();
  ASSIGN_OR_RETURN(std::shared_ptr<ServingEngine> engine, LoadEngine(metrics.metrics.get()));
  const EngineStats stats = engine->stats();
  LogEvent("ready", {{"model", engine->description().model_name},
                     {"backend", engine->description().backend_name},
                     {"activation_dtype", engine->description().activation_dtype},
                     {"kv_cache_dtype", engine->description().kv_cache_dtype},
                     {"load_seconds", absl::ToDoubleSeconds(absl::Now() - load_start)},
                     {"max_context_tokens", int64_t{engine->info().max_context_tokens}},
                     {"kv_blocks", int64_t{stats.kv_blocks_total}},
                     {"kv_block_size", int64_t{stats.kv_block_size}},
                     {"metrics_port", int64_t{metrics.server ? metrics.server->port() : 0}},
                     {"http_port", int64_t{http ? http->port() : 0}}});
  if (metrics.metrics != nullptr) metrics.metrics->SetEngine(engine);
  if (http != nullptr) http->routes().SetEngine(engine, std::move(chat_template));
  server->SetEngine(std::move(engine));
  shutdown->WaitForNotification();
  // HTTP refuses new completions first; the engine drain then ends every running request,
  // and HTTP streams get their final chunks out before the I/O threads stop.
  if (http != nullptr) http->routes().StartDraining();
  server->DrainAndShutdown(Seconds(FLAGS_drain_timeout_s));
  if (http != nullptr) {
    const bool delivered = http->routes().WaitForNoGenerations(absl::Now() + absl::Seconds(5));
    http->Stop();
    LogEvent("http_drain_finished", {{"all_streams_delivered", delivered}});
  }
  return absl::OkStatus();
}

}  // namespace

int RunServeCommand() {
  const absl::Status status = Run();
  if (status.ok()) return 0;
  LogEvent("fatal", {{"code", std::string(absl::StatusCodeToString(status.code()))},
                     {"message", std::string(status.message())}});
  return 1;
}

}  // namespace mlaserve
