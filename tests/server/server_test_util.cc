#include "tests/server/server_test_util.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <utility>

#include "engine/model_loader.h"
#include "engine/model_runner.h"
#include "engine/status_macros.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

namespace mlaserve::testing {
namespace {

std::string EnvOr(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : fallback;
}

// The CPU backend on one thread, with every step (each Synchronize) lasting `delay` longer.
class PacedCpuBackend final : public CpuBackend {
 public:
  explicit PacedCpuBackend(absl::Duration delay) : CpuBackend(1), delay_(delay) {}
  absl::Status Synchronize() override {
    absl::SleepFor(delay_);
    return CpuBackend::Synchronize();
  }

 private:
  const absl::Duration delay_;
};

}  // namespace

FakeEngine::FakeEngine() {
  info_.model_config.model_type = "deepseek_v2";
  info_.model_config.vocab_size = kVocabSize;
  info_.max_context_tokens = kMaxContextTokens;
  info_.eos_token_ids = {255};
  stats_.kv_blocks_total = 8;
  stats_.kv_blocks_free = 8;
  stats_.kv_block_size = 16;
}

void FakeEngine::set_submit_status(absl::Status status) {
  absl::MutexLock lock(&mu_);
  submit_status_ = std::move(status);
}

void FakeEngine::set_on_submit(std::function<void(RequestStream&)> on_submit) {
  absl::MutexLock lock(&mu_);
  on_submit_ = std::move(on_submit);
}

void FakeEngine::set_stats(const EngineStats& stats) {
  absl::MutexLock lock(&mu_);
  stats_ = stats;
}

void FakeEngine::set_now(absl::Time now) {
  absl::MutexLock lock(&mu_);
  now_ = now;
}

std::vector<Request> FakeEngine::submitted() const {
  absl::MutexLock lock(&mu_);
  return submitted_;
}

std::vector<RequestId> FakeEngine::aborted() const {
  absl::MutexLock lock(&mu_);
  return aborted_;
}

std::shared_ptr<RequestStream> FakeEngine::stream(const RequestId& id) const {
  absl::MutexLock lock(&mu_);
  auto it = streams_.find(id);
  return it == streams_.end() ? nullptr : it->second;
}

bool FakeEngine::WaitForSubmitted(size_t n, absl::Duration timeout) const {
  return WaitFor([&] { return submitted().size() >= n; }, timeout);
}

bool FakeEngine::WaitForAbort(const RequestId& id, absl::Duration timeout) const {
  return WaitFor(
      [&] {
        const std::vector<RequestId> ids = aborted();
        return std::find(ids.begin(), ids.end(), id) != ids.end();
      },
      timeout);
}

absl::StatusOr<std::shared_ptr<RequestStream>> FakeEngine::Submit(Request request) {
  std::function<void(RequestStream&)> on_submit;
  std::shared_ptr<RequestStream> stream;
  {
    absl::MutexLock lock(&mu_);
    if (!submit_status_.ok()) return submit_status_;
    if (request.id.empty()) request.id = "fake-" + std::to_string(next_id_++);
    stream = std::make_shared<RequestStream>(request.id);
    streams_[request.id] = stream;
    submitted_.push_back(std::move(request));
    on_submit = on_submit_;
  }
  if (on_submit) on_submit(*stream);
  return stream;
}

bool FakeEngine::Abort(const RequestId& id) {
  std::shared_ptr<RequestStream> stream;
  {
    absl::MutexLock lock(&mu_);
    aborted_.push_back(id);
    auto it = streams_.find(id);
    if (it == streams_.end() || it->second->ended()) return false;
    stream = it->second;
  }
  stream->Finish({}, "", {}, MakeCompletion(FinishReason::kAbort, 0));
  return true;
}

void FakeEngine::Drain(absl::Duration timeout) {
  {
    absl::MutexLock lock(&mu_);
    stats_.draining = true;
    submit_status_ = absl::UnavailableError("draining");
  }
  const auto all_ended = [this] {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, stream] : streams_) {
      if (!stream->ended()) return false;
    }
    return true;
  };
  if (WaitFor(all_ended, timeout)) return;
  absl::flat_hash_map<RequestId, std::shared_ptr<RequestStream>> streams;
  {
    absl::MutexLock lock(&mu_);
    streams = streams_;
  }
  for (const auto& [id, stream] : streams) {
    if (!stream->ended()) stream->Finish({}, "", {}, MakeCompletion(FinishReason::kAbort, 0));
  }
}

EngineStats FakeEngine::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

absl::Time FakeEngine::Now() const {
  absl::MutexLock lock(&mu_);
  return now_.value_or(absl::Now());
}

Completion MakeCompletion(FinishReason reason, int32_t completion_tokens) {
  Completion c;
  c.finish_reason = reason;
  c.completion_tokens = completion_tokens;
  return c;
}

absl::StatusOr<std::shared_ptr<ServingEngine>> MakeRealEngine(const RealEngineOptions& options) {
  const std::string data = EnvOr("MLASERVE_TEST_DATA", "tests/data");
  const std::string source = EnvOr("MLASERVE_SOURCE_DIR", ".");
  std::unique_ptr<Backend> backend = std::make_unique<PacedCpuBackend>(options.step_delay);
  ModelOptions model_options;
  model_options.max_num_tokens = 128;
  model_options.max_num_seqs = options.max_num_seqs;
  model_options.max_model_len = options.max_model_len;
  model_options.block_size = 16;
  model_options.num_kv_blocks = options.num_kv_blocks;
  model_options.context_chunk_tokens = 64;
  model_options.kv_cache_dtype = options.kv_cache_dtype;
  ASSIGN_OR_RETURN(auto model, LoadDeepseekModel(data + "/models/v2_lite_dense_first",
                                                 backend.get(), model_options));
  std::vector<int32_t> buckets;  // ModelRunner requires buckets <= max_num_seqs
  for (int32_t b : options.graph_batch_sizes) {
    if (b <= options.max_num_seqs) buckets.push_back(b);
  }
  ASSIGN_OR_RETURN(auto runner, ModelRunner::Create(std::move(model), backend.get(), buckets));
  ServingDescription description{.backend_name = "cpu",
                                 .kv_cache_dtype = std::string(DTypeName(options.kv_cache_dtype)),
                                 .model_name = "v2_lite_dense_first",
                                 .graph_batch_sizes = runner->graph_buckets()};
  std::shared_ptr<const Tokenizer> tokenizer;
  if (options.with_tokenizer) {
    ASSIGN_OR_RETURN(tokenizer, Tokenizer::Load(source + "/tests/server/data/tiny_tokenizer"));
  }
  EngineOptions engine_options;
  engine_options.scheduler.max_num_seqs = options.max_num_seqs;
  engine_options.scheduler.max_num_batched_tokens = 128;
  engine_options.scheduler.max_model_len = options.max_model_len;
  engine_options.scheduler.max_num_waiting_seqs = options.max_num_waiting_seqs;
  engine_options.on_step = options.on_step;
  ASSIGN_OR_RETURN(auto engine, Engine::Create(std::move(runner), std::move(backend), tokenizer,
                                               std::move(engine_options)));
  return std::shared_ptr<ServingEngine>(
      MakeServingEngine(std::move(engine), tokenizer, std::move(description)));
}

std::unique_ptr<TestServer> StartTestServer(std::shared_ptr<ServingEngine> engine,
                                            InferenceServerOptions options) {
  options.host = "127.0.0.1";
  options.port = 0;
  options.health_poll_interval = absl::Milliseconds(10);
  auto test = std::make_unique<TestServer>();
  absl::StatusOr<std::unique_ptr<InferenceServer>> server = InferenceServer::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  if (!server.ok()) return nullptr;
  test->server = *std::move(server);
  if (engine != nullptr) test->server->SetEngine(std::move(engine));
  test->channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(test->server->port()),
                                      grpc::InsecureChannelCredentials());
  test->inference = v1::Inference::NewStub(test->channel);
  test->health = grpc::health::v1::Health::NewStub(test->channel);
  return test;
}

GenerateResult RunGenerate(v1::Inference::Stub& stub, const v1::GenerateRequest& request,
                           absl::Duration timeout) {
  grpc::ClientContext context;
  if (timeout != absl::InfiniteDuration()) {
    context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  }
  GenerateResult result;
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
      stub.Generate(&context, request);
  v1::GenerateResponse response;
  while (reader->Read(&response)) {
    if (response.has_chunk()) {
      ++result.num_chunks;
      result.token_ids.insert(result.token_ids.end(), response.chunk().token_ids().begin(),
                              response.chunk().token_ids().end());
      result.text += response.chunk().text();
    }
    result.responses.push_back(response);
  }
  result.status = reader->Finish();
  return result;
}

v1::GenerateRequest GreedyRequest(std::vector<uint32_t> prompt, uint32_t max_tokens) {
  v1::GenerateRequest request;
  request.mutable_token_ids()->mutable_ids()->Add(prompt.begin(), prompt.end());
  request.mutable_sampling()->set_temperature(0.0f);
  request.mutable_stopping()->set_max_tokens(max_tokens);
  request.mutable_stopping()->set_ignore_eos(true);
  return request;
}

bool WaitFor(const std::function<bool()>& condition, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!condition()) {
    if (absl::Now() >= deadline) return condition();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

HealthAnswer HealthCheck(grpc::health::v1::Health::Stub& stub, const std::string& service) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = stub.Check(&context, request, &response);
  return {status.error_code(), response.status()};
}

}  // namespace mlaserve::testing
