// Helpers for server tests: a scripted ServingEngine, a real engine on a tiny checkpoint, and
// an InferenceServer on a loopback port with client stubs.
#ifndef MLASERVE_TESTS_SERVER_SERVER_TEST_UTIL_H_
#define MLASERVE_TESTS_SERVER_SERVER_TEST_UTIL_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "kernels/dtype.h"
#include "mlaserve/v1/inference.grpc.pb.h"
#include "server/grpc/inference_server.h"
#include "server/common/serving_engine.h"

namespace mlaserve::testing {

// A ServingEngine whose streams the test drives by hand: Submit creates a stream and runs
// `on_submit` on it (which may push output before the reactor sees the stream); the test
// pushes more through stream(id). Abort ends a live stream with kAbort at once. Thread-safe.
class FakeEngine final : public ServingEngine {
 public:
  static constexpr int64_t kVocabSize = 256;
  static constexpr int32_t kMaxContextTokens = 128;

  FakeEngine();

  // Submit refuses with `status` (OK: accepts).
  void set_submit_status(absl::Status status);
  void set_on_submit(std::function<void(RequestStream&)> on_submit);
  void set_stats(const EngineStats& stats);
  void set_now(absl::Time now);

  std::vector<Request> submitted() const;
  std::vector<RequestId> aborted() const;
  std::shared_ptr<RequestStream> stream(const RequestId& id) const;
  // Waits up to `timeout` for `n` requests to have been submitted.
  bool WaitForSubmitted(size_t n, absl::Duration timeout) const;
  // Waits up to `timeout` for Abort(id).
  bool WaitForAbort(const RequestId& id, absl::Duration timeout) const;

  absl::StatusOr<std::shared_ptr<RequestStream>> Submit(Request request) override;
  bool Abort(const RequestId& id) override;
  void Drain(absl::Duration timeout) override;
  EngineStats stats() const override;
  const EngineInfo& info() const override { return info_; }
  absl::Time Now() const override;
  const Tokenizer* tokenizer() const override { return nullptr; }
  const ServingDescription& description() const override { return description_; }

 private:
  EngineInfo info_;
  const ServingDescription description_{.backend_name = "fake", .model_name = "fake-model"};
  mutable absl::Mutex mu_;
  absl::Status submit_status_ ABSL_GUARDED_BY(mu_);
  std::function<void(RequestStream&)> on_submit_ ABSL_GUARDED_BY(mu_);
  EngineStats stats_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Time> now_ ABSL_GUARDED_BY(mu_);
  std::vector<Request> submitted_ ABSL_GUARDED_BY(mu_);
  std::vector<RequestId> aborted_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<RequestId, std::shared_ptr<RequestStream>> streams_ ABSL_GUARDED_BY(mu_);
  int next_id_ ABSL_GUARDED_BY(mu_) = 0;
};

// A completion with `reason` for a stream that delivered `completion_tokens` tokens.
Completion MakeCompletion(FinishReason reason, int32_t completion_tokens);

// With RealEngineOptions::step_delay, a request this long runs for seconds on any machine, long
// enough to be cancelled, aborted or drained mid-stream.
inline constexpr uint32_t kLongRequestTokens = 4000;

struct RealEngineOptions {
  int32_t max_num_seqs = 8;
  int32_t max_num_waiting_seqs = 256;
  int32_t max_model_len = 4096;
  int32_t num_kv_blocks = 1 + 4 * 256;  // of 16 tokens: four full-length sequences
  DType kv_cache_dtype = DType::kF32;
  bool with_tokenizer = true;           // tests/server/data/tiny_tokenizer
  // Decode buckets replayed as graphs; those above max_num_seqs are left out.
  std::vector<int32_t> graph_batch_sizes = {1, 2, 4, 8};
  // Added to every engine step (the tiny model alone decodes thousands of tokens a second),
  // so that long requests stay in flight for the tests that act on them mid-stream.
  absl::Duration step_delay = absl::Milliseconds(1);
  std::function<void(const StepObservation&)> on_step;  // EngineOptions::on_step
};

// The engine of `mlaserve serve` on tests/data/models/v2_lite_dense_first (vocab 256, eos 255,
// bos 254) on the CPU backend.
absl::StatusOr<std::shared_ptr<ServingEngine>> MakeRealEngine(const RealEngineOptions& options);

// An InferenceServer on 127.0.0.1 (any free port) and stubs connected to it.
struct TestServer {
  std::unique_ptr<InferenceServer> server;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Inference::Stub> inference;
  std::unique_ptr<grpc::health::v1::Health::Stub> health;
};

// Starts a TestServer; `engine` may be null (SetEngine later). Fast health polling.
std::unique_ptr<TestServer> StartTestServer(std::shared_ptr<ServingEngine> engine,
                                            InferenceServerOptions options = {});

// Everything one Generate call returned.
struct GenerateResult {
  grpc::Status status;
  std::vector<v1::GenerateResponse> responses;
  std::vector<uint32_t> token_ids;  // of every Chunk, in order
  std::string text;
  int num_chunks = 0;
};

// Runs Generate to its end; `timeout` (if finite) becomes the call's deadline.
GenerateResult RunGenerate(v1::Inference::Stub& stub, const v1::GenerateRequest& request,
                           absl::Duration timeout = absl::InfiniteDuration());

// A greedy request for `prompt` generating `max_tokens` tokens (eos ignored).
v1::GenerateRequest GreedyRequest(std::vector<uint32_t> prompt, uint32_t max_tokens);

// Polls `condition` every 5 ms until it holds or `timeout` passes; returns its last value.
bool WaitFor(const std::function<bool()>& condition, absl::Duration timeout = absl::Seconds(10));

struct HealthAnswer {
  grpc::StatusCode code = grpc::StatusCode::OK;
  grpc::health::v1::HealthCheckResponse::ServingStatus status =
      grpc::health::v1::HealthCheckResponse::UNKNOWN;
};
HealthAnswer HealthCheck(grpc::health::v1::Health::Stub& stub, const std::string& service);

}  // namespace mlaserve::testing

#endif  // MLASERVE_TESTS_SERVER_SERVER_TEST_UTIL_H_
