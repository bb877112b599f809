// mlaserve-synthetic-server: the front ends of `mlaserve serve` (InferenceServer with the
// real service, reactors, validation and health; with --http_port the OpenAI HTTP API too)
// over a synthetic engine that computes nothing. Its engine thread runs steps back to back; each step appends one token to every
// live request, exactly as a decode step of the real engine would, with the text "a" (one
// character per token, so HTTP clients can count tokens), so what mlaserve-bench measures
// against it is the cost of the front end alone: conversion, streaming, coalescing, the
// protocol and the client.
//
//   mlaserve-synthetic-server --port=50052 [--http_port=8002] [--step_us=0]
#include <csignal>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "server/grpc/inference_server.h"
#include "server/http/http_server.h"
#include "server/common/serving_engine.h"

ABSL_FLAG(std::string, host, "127.0.0.1", "gRPC bind address");
ABSL_FLAG(int, port, 50052, "gRPC port");
ABSL_FLAG(int, http_port, 0, "OpenAI HTTP API port (0: off)");
ABSL_FLAG(int, http_threads, 2, "I/O threads of the HTTP API");
ABSL_FLAG(int, step_us, 0, "time one synthetic step takes (0: as fast as the loop runs)");
ABSL_FLAG(int, vocab_size, 32000, "vocabulary the synthetic model reports");
ABSL_FLAG(int, max_context_tokens, 1 << 20, "context limit the synthetic model reports");

namespace mlaserve {
namespace {

// One request in flight: its stream and how many tokens it still gets.
struct LiveRequest {
  std::shared_ptr<RequestStream> stream;
  int32_t prompt_tokens = 0;
  int32_t remaining = 0;
  int32_t emitted = 0;
  bool aborted = false;
  absl::Time arrival;
};

class SyntheticEngine final : public ServingEngine {
 public:
  SyntheticEngine(int32_t vocab_size, int32_t max_context_tokens, absl::Duration step)
      : step_(step) {
    info_.model_config.model_type = "synthetic";
    info_.model_config.vocab_size = vocab_size;
    info_.max_context_tokens = max_context_tokens;
    thread_ = std::thread([this] { Loop(); });
  }

  ~SyntheticEngine() override {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    thread_.join();
  }

  absl::StatusOr<std::shared_ptr<RequestStream>> Submit(Request request) override {
    absl::MutexLock lock(&mu_);
    if (draining_) return absl::UnavailableError("draining");
    if (request.id.empty()) request.id = "synthetic-" + std::to_string(next_id_++);
    for (const LiveRequest& live : live_) {
      if (live.stream->id() == request.id) {
        return absl::AlreadyExistsError("request_id " + request.id + " is running");
      }
    }
    const int32_t prompt = static_cast<int32_t>(request.prompt_token_ids.size());
    LiveRequest live{.stream = std::make_shared<RequestStream>(request.id),
                     .prompt_tokens = prompt,
                     .remaining = request.stopping.max_tokens.value_or(
                         info_.max_context_tokens - prompt),
                     .arrival = request.arrival_time};
    live_.push_back(live);
    return live.stream;
  }

  bool Abort(const RequestId& id) override {
    absl::MutexLock lock(&mu_);
    for (LiveRequest& live : live_) {
      if (live.stream->id() == id) {
        live.remaining = 0;
        live.aborted = true;
        return true;
      }
    }
    return false;
  }

  void Drain(absl::Duration timeout) override {
    const absl::Time give_up = absl::Now() + timeout;
    absl::MutexLock lock(&mu_);
    draining_ = true;
    const auto idle = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return live_.empty(); };
    mu_.AwaitWithDeadline(absl::Condition(&idle), give_up);
    for (LiveRequest& live : live_) {
      live.remaining = 0;
      live.aborted = true;
    }
    mu_.Await(absl::Condition(&idle));
  }

  EngineStats stats() const override {
    absl::MutexLock lock(&mu_);
    EngineStats stats;
    stats.num_running = static_cast<int32_t>(live_.size());
    stats.steps_total = steps_;
    stats.last_step_time = last_step_time_;
    stats.draining = draining_;
    return stats;
  }
  const EngineInfo& info() const override { return info_; }
  absl::Time Now() const override { return absl::Now(); }
  const Tokenizer* tokenizer() const override { return nullptr; }
  const ServingDescription& description() const override { return description_; }

 private:
  // One step: a token for every live request; finished ones complete and leave.
  void Loop() {
    for (;;) {
      std::vector<LiveRequest> finished;
      {
        absl::MutexLock lock(&mu_);
        const auto has_work = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
          return stop_ || !live_.empty();
        };
        mu_.Await(absl::Condition(&has_work));
        if (stop_) return;
        std::vector<LiveRequest> still_live;
        for (LiveRequest& live : live_) {
          if (live.remaining > 0) {
            live.stream->Push({static_cast<int32_t>(live.emitted % info_.model_config.vocab_size)},
                              "a", {});
            ++live.emitted;
            --live.remaining;
          }
          (live.remaining > 0 ? still_live : finished).push_back(std::move(live));
        }
        live_ = std::move(still_live);
        ++steps_;
        last_step_time_ = absl::Now();
      }
      for (LiveRequest& live : finished) Complete(live);
      if (step_ > absl::ZeroDuration()) absl::SleepFor(step_);
    }
  }

  void Complete(LiveRequest& live) {
    Completion completion;
    completion.finish_reason = live.aborted ? FinishReason::kAbort : FinishReason::kLength;
    completion.prompt_tokens = live.prompt_tokens;
    completion.completion_tokens = live.emitted;
    completion.e2e_seconds = absl::ToDoubleSeconds(absl::Now() - live.arrival);
    live.stream->Finish({}, "", {}, completion);
  }

  const absl::Duration step_;
  EngineInfo info_;
  const ServingDescription description_{.backend_name = "synthetic",
                                        .model_name = "synthetic",
                                        .graph_batch_sizes = {}};
  mutable absl::Mutex mu_;
  std::vector<LiveRequest> live_ ABSL_GUARDED_BY(mu_);
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t steps_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_step_time_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

int Main() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  InferenceServerOptions options;
  options.host = absl::GetFlag(FLAGS_host);
  options.port = absl::GetFlag(FLAGS_port);
  absl::StatusOr<std::unique_ptr<InferenceServer>> server = InferenceServer::Start(options);
  if (!server.ok()) {
    std::fprintf(stderr, "mlaserve-synthetic-server: %s\n", server.status().ToString().c_str());
    return 1;
  }
  auto engine = std::make_shared<SyntheticEngine>(
      absl::GetFlag(FLAGS_vocab_size), absl::GetFlag(FLAGS_max_context_tokens),
      absl::Microseconds(absl::GetFlag(FLAGS_step_us)));
  std::unique_ptr<HttpServer> http;
  if (absl::GetFlag(FLAGS_http_port) != 0) {
    HttpServerOptions http_options;
    http_options.host = options.host;
    http_options.port = absl::GetFlag(FLAGS_http_port);
    http_options.num_threads = absl::GetFlag(FLAGS_http_threads);
    absl::StatusOr<std::unique_ptr<HttpServer>> started = HttpServer::Start(http_options);
    if (!started.ok()) {
      std::fprintf(stderr, "mlaserve-synthetic-server: %s\n", started.status().ToString().c_str());
      return 1;
    }
    http = *std::move(started);
    http->routes().SetEngine(engine, nullptr);
  }
  (*server)->SetEngine(std::move(engine));
  std::fprintf(stderr, "mlaserve-synthetic-server: serving on port %d (HTTP %d)\n",
               (*server)->port(), http != nullptr ? http->port() : 0);
  int signal = 0;
  sigwait(&signals, &signal);
  if (http != nullptr) http->routes().StartDraining();
  (*server)->DrainAndShutdown(absl::Seconds(5));
  if (http != nullptr) http->Stop();
  return 0;
}

}  // namespace
}  // namespace mlaserve

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "the gRPC front end over a synthetic engine: mlaserve-synthetic-server --port=PORT");
  absl::ParseCommandLine(argc, argv);
  return mlaserve::Main();
}
