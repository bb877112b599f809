#include "engine/model_runner.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/request.h"
#include "engine/status_macros.h"

namespace mlaserve {
namespace {

// 4-byte words of one row's sampling::RowOptions in the draws' buffer.
constexpr int64_t kDrawWordsPerRow = sizeof(sampling::RowOptions) / sizeof(int32_t);

}  // namespace

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
  const int64_t num_kv_blocks = model->options().num_kv_blocks;
  ASSIGN_OR_RETURN(ForwardBatchBuilder builder,
                   ForwardBatchBuilder::Create(model->forward_limits(), backend));
  std::unique_ptr<ModelRunner> runner(
      new ModelRunner(std::move(model), backend, std::move(builder)));
  DeepseekModel& m = *runner->model_;
  // Graphs are bound to the cache they read, so they are measured over a minimal one (block 0
  // and one more) before the real cache is sized, and captured over the real one after.
  RETURN_IF_ERROR(m.AllocateKvCache(2));
  ASSIGN_OR_RETURN(runner->draws_,
                   backend->Allocate(sizeof(int32_t) * static_cast<size_t>(m.options().max_num_seqs) *
                                     (kDrawWordsPerRow + 2 + 2 * kMaxTopLogprobs)));
  MemoryUsage planned = runner->memory();
  ASSIGN_OR_RETURN(planned.graph_bytes, runner->graphs_.MeasureMemory(graph_buckets));
  planned.kv_cache_bytes = m.KvCacheBytes(num_kv_blocks);
  const uint64_t capacity = backend->memory_capacity();
  if (planned.total() > capacity) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "a KV cache of ", num_kv_blocks - 1, " blocks of ", m.options().block_size, " tokens (",
        planned.kv_cache_bytes, " bytes) does not fit: with weights (", planned.weight_bytes,
        "), workspaces (", planned.workspace_bytes, ") and decode graphs (", planned.graph_bytes,
        ") it needs ", planned.total(), " bytes; the ", std::string(backend->name()),
        " backend has ", capacity));
  }
  RETURN_IF_ERROR(m.AllocateKvCache(num_kv_blocks));
  RETURN_IF_ERROR(runner->graphs_.Capture(graph_buckets));
  const MemoryUsage used = runner->memory();
  std::fprintf(stderr,
               "mlaserve: memory: weights %llu, KV cache %llu (%lld blocks, %s), workspaces %llu, "
               "decode graphs %llu bytes; total %llu of %llu\n",
               static_cast<unsigned long long>(used.weight_bytes),
               static_cast<unsigned long long>(used.kv_cache_bytes),
               static_cast<long long>(num_kv_blocks),
               std::string(DTypeName(m.options().kv_cache_dtype)).c_str(),
               static_cast<unsigned long long>(used.workspace_bytes),
               static_cast<unsigned long long>(used.graph_bytes),
               static_cast<unsigned long long>(used.total()),
               static_cast<unsigned long long>(capacity));
  return runner;
}

MemoryUsage ModelRunner::memory() const {
  return MemoryUsage{.weight_bytes = model_->weight_bytes(),
                     .kv_cache_bytes = model_->kv_cache_bytes(),
                     .workspace_bytes = model_->workspace_bytes() + builder_.buffer_bytes() +
                                        draws_.bytes(),
                     .graph_bytes = graphs_.memory_bytes()};
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
  // A replayed step is planned, and its logits described, before its ops run: after them the
  // weights they streamed have evicted everything read here, so that little is left to do then.
  Graph* graph = nullptr;
  TensorView out;
  absl::Span<const int32_t> items;
  if (bucket > 0) {
    const GraphRunner::DecodeStep step = graphs_.Prepare(seqs, bucket);
    graph = step.graph;
    out = step.logits;
    items = step.logit_items;
  } else {
    out = RunEager(seqs);
    items = batch_.logit_items;
  }
  out = out.Slice(0, 0, static_cast<int64_t>(items.size()));
  logits->vocab_size = model_->config().vocab_size;
  logits->items.assign(items.begin(), items.end());
  const auto n = static_cast<size_t>(out.numel());
  logits->drawn_on_device = false;
  // Where the logits lie is known before the ops that write them run.
  const void* host = backend_->HostAddress(out);
  logits->values = host != nullptr ? absl::MakeConstSpan(static_cast<const float*>(host), n)
                                   : absl::Span<const float>();
  if (graph != nullptr) {
    replaying_ = {.seqs = seqs, .bucket = bucket, .logits = logits};
    graph->Replay({.read = &ModelRunner::ReadNextStep, .context = this});
    replaying_ = {};
  }
  if (host == nullptr) {
    const bool samplable =
        std::all_of(logits->items.begin(), logits->items.end(),
                    [&](int32_t item) { return seqs[static_cast<size_t>(item)].device_samplable; });
    if (samplable) {
      DrawOnDevice(seqs, out, logits);
    } else {
      logits->storage.resize(n);
      if (n > 0) backend_->CopyToHost(out, logits->storage.data(), n * sizeof(float));
      logits->values = logits->storage;
    }
  }
  return backend_->Synchronize();
}

void ModelRunner::ReadNextStep(const void* runner) {
  const auto& self = *static_cast<const ModelRunner*>(runner);
  const Replaying& step = self.replaying_;
  const auto& vocab_size = self.model_->config().vocab_size;
  KeepLoads(SumLines(&self.model_, sizeof(self.model_)) +
            SumLines(&self.backend_, sizeof(self.backend_)) +
            SumLines(&self.last_step_, sizeof(self.last_step_)) +
            SumLines(&vocab_size, sizeof(vocab_size)) +
            SumLines(self.backend_, 1) +  // where HostAddress is looked up
            SumLines(step.logits, sizeof(*step.logits)) +
            SumLines(step.logits->items.data(), step.logits->items.size() * sizeof(int32_t)) +
            self.graphs_.SumPrepareLines(step.seqs, step.bucket));
}

void ModelRunner::DrawOnDevice(absl::Span<const StepSequence> seqs, const TensorView& out,
                               StepLogits* logits) {
  const int64_t rows = out.size(0);
  int32_t k = 0;
  for (int32_t item : logits->items) k = std::max(k, seqs[static_cast<size_t>(item)].top_logprobs);
  k = static_cast<int32_t>(std::min<int64_t>(k, logits->vocab_size));
  logits->drawn_on_device = true;
  logits->top_k = k;
  if (rows == 0) return;
  // Words: options [rows, 8] | tokens [rows] | logprobs [rows] | top ids [rows, k] | top lps.
  std::vector<int32_t>& words = draws_host_;
  words.resize(static_cast<size_t>(rows * (kDrawWordsPerRow + 2 + 2 * k)));
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(words.data() + r * kDrawWordsPerRow,
                &seqs[static_cast<size_t>(logits->items[r])].sampling,
                sizeof(sampling::RowOptions));
  }
  int32_t* base = static_cast<int32_t*>(draws_.data());
  const TensorView options(base, DType::kI32, {rows, kDrawWordsPerRow});
  backend_->CopyFromHost(words.data(), static_cast<size_t>(rows * kDrawWordsPerRow) * 4, options);
  int32_t* results = base + rows * kDrawWordsPerRow;
  backend_->SampleTokens({.logits = out,
                          .options = options,
                          .token_ids = TensorView(results, DType::kI32, {rows}),
                          .logprobs = TensorView(results + rows, DType::kF32, {rows})});
  if (k > 0) {
    backend_->TopLogprobs({.logits = out,
                           .top_ids = TensorView(results + 2 * rows, DType::kI32, {rows, k}),
                           .top_logprobs = TensorView(results + 2 * rows + rows * k,
                                                      DType::kF32, {rows, k})});
  }
  const int64_t result_words = rows * (2 + 2 * k);
  int32_t* host = words.data() + rows * kDrawWordsPerRow;
  backend_->CopyToHost(TensorView(results, DType::kI32, {result_words}), host,
                       static_cast<size_t>(result_words) * sizeof(int32_t));
  logits->tokens.assign(host, host + rows);
  logits->token_logprobs.resize(static_cast<size_t>(rows));
  std::memcpy(logits->token_logprobs.data(), host + rows, static_cast<size_t>(rows) * 4);
  logits->top_ids.assign(host + 2 * rows, host + 2 * rows + rows * k);
  logits->top_logprobs.resize(static_cast<size_t>(rows * k));
  std::memcpy(logits->top_logprobs.data(), host + 2 * rows + rows * k,
              static_cast<size_t>(rows * k) * 4);
}

}  // namespace mlaserve
