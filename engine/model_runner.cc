#include "engine/model_runner.h"

#include <utility>

#include "engine/status_macros.h"

namespace mlaserve {

absl::StatusOr<std::unique_ptr<ModelRunner>> ModelRunner::Create(
    std::unique_ptr<DeepseekModel> model, Backend* backend) {
  ASSIGN_OR_RETURN(ForwardBatchBuilder builder,
                   ForwardBatchBuilder::Create(model->forward_limits(), backend));
  return std::unique_ptr<ModelRunner>(
      new ModelRunner(std::move(model), backend, std::move(builder)));
}

ModelRunner::ModelRunner(std::unique_ptr<DeepseekModel> model, Backend* backend,
                         ForwardBatchBuilder builder)
    : model_(std::move(model)), backend_(backend), builder_(std::move(builder)) {}

absl::Status ModelRunner::Execute(absl::Span<const StepSequence> seqs, StepLogits* logits) {
  builder_.Build(seqs, &batch_);
  const TensorView out = model_->Forward(batch_);
  logits->vocab_size = model_->config().vocab_size;
  logits->items.assign(batch_.logit_items.begin(), batch_.logit_items.end());
  logits->data.resize(static_cast<size_t>(out.numel()));
  if (out.numel() > 0) {
    backend_->CopyToHost(out, logits->data.data(), logits->data.size() * sizeof(float));
  }
  return backend_->Synchronize();
}

}  // namespace mlaserve
