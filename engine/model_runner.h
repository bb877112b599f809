// ModelRunner: runs forward steps of a DeepseekModel and hands back logits on the host.
// Owned by the engine thread; not thread-safe.
#ifndef MLASERVE_ENGINE_MODEL_RUNNER_H_
#define MLASERVE_ENGINE_MODEL_RUNNER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/forward_batch.h"
#include "engine/graph_runner.h"
#include "engine/models/deepseek.h"

namespace mlaserve {

// Logits of one step on the host: row r belongs to StepSequence items[r]. Valid until the
// next Execute: on a backend whose memory the host reads directly, `values` points into the
// model's logits buffer; otherwise the logits are copied into `storage` — unless every row is
// StepSequence::device_samplable: then the tokens are drawn on the device (Backend::
// SampleTokens, TopLogprobs), only the draws are copied back, and `values` is empty.
struct StepLogits {
  int64_t vocab_size = 0;
  std::vector<int32_t> items;      // [num_rows]
  absl::Span<const float> values;  // [num_rows, vocab_size], or empty
  std::vector<float> storage;
  // The device's draws: each row's token and its raw log-softmax, and the ids and logprobs of
  // its top_k best tokens in descending order (top_k = the most alternatives a row asked for).
  bool drawn_on_device = false;
  std::vector<int32_t> tokens;          // [num_rows]
  std::vector<float> token_logprobs;    // [num_rows]
  int64_t top_k = 0;
  std::vector<int32_t> top_ids;         // [num_rows, top_k]
  std::vector<float> top_logprobs;      // [num_rows, top_k]

  absl::Span<const float> row(size_t r) const {
    return values.subspan(r * static_cast<size_t>(vocab_size), static_cast<size_t>(vocab_size));
  }
};

// Steps run eagerly, by phase (decode-only steps that no graph bucket holds count as decode).
struct EagerStepCounts {
  uint64_t prefill = 0;  // prefill chunks only
  uint64_t decode = 0;   // decodes only
  uint64_t mixed = 0;    // both
};

// What a step computed: prompt chunks only, decodes only, or both.
enum class StepPhase { kPrefill, kDecode, kMixed };

// Backend memory held for serving, by use.
struct MemoryUsage {
  uint64_t weight_bytes = 0;
  uint64_t kv_cache_bytes = 0;
  uint64_t workspace_bytes = 0;  // the model's activation buffers and rope table, step metadata
  uint64_t graph_bytes = 0;      // the captured decode graphs' own storage (Graph::memory_bytes)

  uint64_t total() const { return weight_bytes + kv_cache_bytes + workspace_bytes + graph_bytes; }
};

// How one Execute ran.
struct StepKind {
  StepPhase phase = StepPhase::kDecode;
  int32_t graph_batch_size = 0;  // the decode bucket replayed; 0: the step ran eagerly
};

class ModelRunner {
 public:
  // Captures a decode graph for each of `graph_buckets` (each <= the model's max_num_seqs;
  // empty: every step runs eagerly) and allocates the model's KV cache of
  // options().num_kv_blocks blocks. The graphs' memory is measured first, so that the cache is
  // only allocated when weights, workspaces, graphs and cache together fit the backend's
  // memory_capacity(); otherwise returns kResourceExhausted with the figures. Logs the totals.
  static absl::StatusOr<std::unique_ptr<ModelRunner>> Create(
      std::unique_ptr<DeepseekModel> model, Backend* backend,
      const std::vector<int32_t>& graph_buckets = {});

  // Runs one step over `seqs` (see StepSequence) and fills `logits` in the step's row order:
  // a row for every sequence with needs_logits (decode steps replayed from a graph return a
  // row for every sequence). Returns the backend's sticky error, if any.
  absl::Status Execute(absl::Span<const StepSequence> seqs, StepLogits* logits);

  DeepseekModel& model() { return *model_; }
  Backend& backend() { return *backend_; }
  const ForwardLimits& limits() const { return builder_.limits(); }
  std::vector<int32_t> graph_buckets() const { return graphs_.buckets(); }
  std::map<int32_t, uint64_t> graph_replays() const { return graphs_.replays(); }
  const EagerStepCounts& eager_steps() const { return eager_steps_; }
  // What this runner and its model hold on the backend (the figures Create checked).
  MemoryUsage memory() const;
  // The latest Execute's phase and graph bucket.
  const StepKind& last_step() const { return last_step_; }

 private:
  ModelRunner(std::unique_ptr<DeepseekModel> model, Backend* backend, ForwardBatchBuilder builder);
  TensorView RunEager(absl::Span<const StepSequence> seqs);
  // Draws the rows of `out` on the device into `logits` (every row device_samplable).
  void DrawOnDevice(absl::Span<const StepSequence> seqs, const TensorView& out,
                    StepLogits* logits);
  // The replay's NextStepReader (Graph::Replay): loads one byte of each line the step being
  // replayed read while it was planned, which the next step most likely reads again.
  static void ReadNextStep(const void* runner);

  std::unique_ptr<DeepseekModel> model_;
  Backend* backend_;
  ForwardBatchBuilder builder_;
  GraphRunner graphs_;
  // The device draws' buffer, 4-byte words for max_num_seqs rows: the rows' sampling options
  // (8 each), then tokens, logprobs (1 each), top ids and top logprobs (kMaxTopLogprobs each), so that
  // one copy brings a step's draws back.
  DeviceBuffer draws_;
  std::vector<int32_t> draws_host_;  // staging on the host, reused across steps
  ForwardBatch batch_;  // the latest eager step's plan (a replay writes its bucket's layout)
  // The step being replayed, for ReadNextStep.
  struct Replaying {
    absl::Span<const StepSequence> seqs;
    int32_t bucket = 0;
    const StepLogits* logits = nullptr;
  };
  Replaying replaying_;
  EagerStepCounts eager_steps_;
  StepKind last_step_;
};

}  // namespace mlaserve

#endif  // MLASERVE_ENGINE_MODEL_RUNNER_H_
