// ModelRunner: runs forward steps of a DeepseekModel and hands back logits on the host.
// Owned by the engine thread; not thread-safe.
#ifndef MLASERVE_ENGINE_MODEL_RUNNER_H_
#define MLASERVE_ENGINE_MODEL_RUNNER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/forward_batch.h"
#include "engine/models/deepseek.h"

namespace mlaserve {

// Logits of one step on the host: row r belongs to StepSequence items[r].
struct StepLogits {
  int64_t vocab_size = 0;
  std::vector<int32_t> items;  // [num_rows]
  std::vector<float> data;     // [num_rows, vocab_size]

  absl::Span<const float> row(size_t r) const {
    return absl::MakeConstSpan(data).subspan(r * static_cast<size_t>(vocab_size),
                                             static_cast<size_t>(vocab_size));
  }
};

class ModelRunner {
 public:
  static absl::StatusOr<std::unique_ptr<ModelRunner>> Create(std::unique_ptr<DeepseekModel> model,
                                                             Backend* backend);

  // Runs one step over `seqs` (see StepSequence) and fills `logits` for those with
  // needs_logits, in the step's row order. Returns the backend's sticky error, if any.
  absl::Status Execute(absl::Span<const StepSequence> seqs, StepLogits* logits);

  DeepseekModel& model() { return *model_; }
  const ForwardLimits& limits() const { return builder_.limits(); }

 private:
  ModelRunner(std::unique_ptr<DeepseekModel> model, Backend* backend, ForwardBatchBuilder builder);

  std::unique_ptr<DeepseekModel> model_;
  Backend* backend_;
  ForwardBatchBuilder builder_;
  ForwardBatch batch_;
};

}  // namespace mlaserve

#endif  // MLASERVE_ENGINE_MODEL_RUNNER_H_
