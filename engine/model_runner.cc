#include "engine/model_runner.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/status_macros.h"

namespace mlaserve {

absl::StatusOr<std::unique_ptr<ModelRunner>> ModelRunner::Create(
    std::unique_ptr<DeepseekModel> model, Backend* backend,
    const std::vector<int32_t>& graph_buckets) {
  for (int32_t bucket : graph_buckets) {
    if (bucket < 1 || bucket > model->options().max_num_seqs) {
      return absl::InvalidArgumentError(absl::StrCat(
          "graph batch size ", bucket, " is outside [1, max_num_seqs=",
          model->options().max_num_seqs, "]"));
    }
  }
  ASSIGN_OR_RETURN(ForwardBatchBuilder builder,
                   ForwardBatchBuilder::Create(model->forward_limits(), backend));
  std::unique_ptr<ModelRunner> runner(
      new ModelRunner(std::move(model), backend, std::move(builder)));
  RETURN_IF_ERROR(runner->graphs_.Capture(graph_buckets));
  return runner;
}

// graphs_ keeps pointers to model_ and builder_: both live in this object, which is never
// moved (it is only handed out by unique_ptr).
ModelRunner::ModelRunner(std::unique_ptr<DeepseekModel> model, Backend* backend,
                         ForwardBatchBuilder builder)
    : model_(std::move(model)),
      backend_(backend),
      builder_(std::move(builder)),
      graphs_(model_.get(), backend, &builder_) {}

TensorView ModelRunner::RunEager(absl::Span<const StepSequence> seqs) {
  builder_.Build(seqs, &batch_);
  if (batch_.num_prefill_seqs == 0) {
    ++eager_steps_.decode;
    last_step_.phase = StepPhase::kDecode;
  } else if (batch_.num_decodes == 0) {
    ++eager_steps_.prefill;
    last_step_.phase = StepPhase::kPrefill;
  } else {
    ++eager_steps_.mixed;
    last_step_.phase = StepPhase::kMixed;
  }
  return model_->Forward(batch_);
}

absl::Status ModelRunner::Execute(absl::Span<const StepSequence> seqs, StepLogits* logits) {
  const bool decode_only = std::all_of(seqs.begin(), seqs.end(),
                                       [](const StepSequence& s) { return s.num_new_tokens == 1; });
  const int32_t bucket = decode_only ? graphs_.BucketFor(static_cast<int64_t>(seqs.size())) : 0;
  last_step_ = StepKind{.phase = StepPhase::kDecode, .graph_batch_size = bucket};
  TensorView out = bucket > 0 ? graphs_.Replay(seqs, bucket, &batch_) : RunEager(seqs);
  out = out.Slice(0, 0, static_cast<int64_t>(batch_.logit_items.size()));
  logits->vocab_size = model_->config().vocab_size;
  logits->items.assign(batch_.logit_items.begin(), batch_.logit_items.end());
  logits->data.resize(static_cast<size_t>(out.numel()));
  if (out.numel() > 0) {
    backend_->CopyToHost(out, logits->data.data(), logits->data.size() * sizeof(float));
  }
  return backend_->Synchronize();
}

}  // namespace mlaserve
