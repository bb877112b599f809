// Helpers for Engine tests: an engine over a tiny real checkpoint on the CPU backend, and
// collecting a stream's whole output.
#ifndef MLASERVE_TESTS_ENGINE_ENGINE_TEST_UTIL_H_
#define MLASERVE_TESTS_ENGINE_ENGINE_TEST_UTIL_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/engine.h"
#include "engine/request_stream.h"
#include "engine/tokenizer/tokenizer.h"
#include "kernels/backend.h"

namespace mlaserve::testing {

struct TestEngineOptions {
  std::string variant = "v3_noaux";
  int32_t max_num_seqs = 8;
  int32_t max_num_batched_tokens = 128;  // also the runner's tokens per step
  int32_t max_model_len = 256;
  int32_t block_size = 16;
  int32_t num_kv_blocks = 1 + 8 * (256 / 16);
  int32_t max_num_waiting_seqs = 1024;
  bool enable_prefix_caching = true;
  bool deterministic = true;
  std::vector<int32_t> eos_token_ids = {};      // empty: the model's
  std::vector<int32_t> graph_batch_sizes = {};  // decode batch sizes captured as graphs
  std::function<absl::Time()> clock = nullptr;
  std::function<void(const StepObservation&)> on_step = nullptr;  // EngineOptions::on_step
  std::shared_ptr<const Tokenizer> tokenizer = nullptr;
  // Replaces the CPU backend (the engine takes ownership).
  std::unique_ptr<Backend> backend = nullptr;
};

absl::StatusOr<std::unique_ptr<Engine>> MakeTestEngine(TestEngineOptions options);
// MakeTestEngine, failing the current test (and returning null) when it cannot be made.
std::unique_ptr<Engine> NewTestEngine(TestEngineOptions options = {});

// Everything a stream delivered, concatenated, up to and including its end.
struct StreamResult {
  std::vector<int32_t> token_ids;
  std::string text;
  std::vector<TokenChoice> logprobs;
  Completion completion;
  absl::Status status;
  int num_updates = 0;  // non-empty updates taken
};

// Takes from `stream` until it ends.
StreamResult Collect(RequestStream& stream);

// A greedy request for `prompt` generating exactly `max_tokens` (eos ignored).
Request GreedyRequest(std::vector<int32_t> prompt, int32_t max_tokens);

// `n` pseudo-random token ids in [0, 250), reproducible from `seed`.
std::vector<int32_t> RandomPrompt(uint64_t seed, int n);

// A byte-level tokenizer over the tiny models' 256-id vocabulary: ids 0..253 are single
// characters (printable ASCII first), 254 is <bos> and 255 <eos>, both special.
std::shared_ptr<const Tokenizer> TinyTokenizer();

// Knobs of a controlled backend, settable while the engine runs.
struct BackendControl {
  std::atomic<bool> fail{false};          // Synchronize (once per step) fails
  std::atomic<int64_t> step_delay_us{0};  // Synchronize sleeps first: slows every step
};

// A CPU backend obeying `control`.
std::unique_ptr<Backend> MakeControlledBackend(std::shared_ptr<BackendControl> control);

}  // namespace mlaserve::testing

#endif  // MLASERVE_TESTS_ENGINE_ENGINE_TEST_UTIL_H_
