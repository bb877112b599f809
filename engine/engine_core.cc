#include "engine/engine_core.h"

#include <utility>

#include "engine/status_macros.h"
#include "kernels/check.h"

namespace mlaserve {
namespace {

double Seconds(absl::Time from, absl::Time to) { return absl::ToDoubleSeconds(to - from); }

}  // namespace

void EngineCore::Ending::Deliver() {
  if (update.completion.has_value()) {
    stream->Finish(std::move(update.token_ids), std::move(update.text), std::move(update.logprobs),
                   std::move(*update.completion));
  } else {
    stream->Fail(std::move(update.status));
  }
}

EngineCore::EngineCore(std::unique_ptr<ModelRunner> runner,
                       std::shared_ptr<const Tokenizer> tokenizer, const SchedulerOptions& options,
                       std::function<void(const StepObservation&)> on_step)
    : runner_(std::move(runner)),
      tokenizer_(std::move(tokenizer)),
      scheduler_(options),
      clock_(options.clock),
      on_step_(std::move(on_step)) {}

void EngineCore::Add(Request request, std::shared_ptr<RequestStream> stream) {
  MLASERVE_CHECK(request.sampling.seed.has_value());
  Live live;
  live.stream = stream;
  live.wants_logprobs = request.return_logprobs || request.top_logprobs > 0;
  live.num_prompt_tokens = static_cast<int32_t>(request.prompt_token_ids.size());
  live.arrival_time = request.arrival_time;
  if (tokenizer_ != nullptr) {
    live.text.emplace(*tokenizer_,
                      DetokenizerOptions{.stop = request.stopping.stop,
                                         .include_stop_str_in_output =
                                             request.stopping.include_stop_str_in_output});
  }
  const RequestId id = request.id;
  const absl::Status added = scheduler_.Add(std::make_unique<Sequence>(std::move(request)));
  if (!added.ok()) {
    Ending ending{.stream = std::move(stream), .update = {}};
    ending.update.status = added;
    endings_.push_back(std::move(ending));
    return;
  }
  live_.emplace(id, std::move(live));
}

void EngineCore::Abort(const RequestId& id) { scheduler_.Abort(id); }

absl::Status EngineCore::Step() {
  ScheduledBatch batch = scheduler_.Schedule();
  const absl::Time start = clock_();
  for (const SequenceOutput& ended : batch.finished) {
    End(ended, ended.finish_reason, "", {}, "", {}, start);
  }
  if (batch.items.empty()) return absl::OkStatus();
  PrepareStep(batch, start);
  RETURN_IF_ERROR(runner_->Execute(step_seqs_, &logits_));
  SampleTokens(batch);
  const std::vector<SequenceOutput> outputs = scheduler_.Postprocess(batch, next_tokens_);
  MLASERVE_CHECK(outputs.size() == choices_.size());
  const absl::Time done = clock_();
  inter_token_.clear();
  for (size_t i = 0; i < outputs.size(); ++i) Emit(outputs[i], std::move(choices_[i]), done);
  ++num_steps_;
  last_step_time_ = done;
  if (on_step_) {
    int32_t num_tokens = 0;
    for (const StepSequence& seq : step_seqs_) num_tokens += seq.num_new_tokens;
    on_step_(StepObservation{.kind = runner_->last_step(),
                             .num_tokens = num_tokens,
                             .duration = done - start,
                             .inter_token = inter_token_});
  }
  return absl::OkStatus();
}

void EngineCore::PrepareStep(const ScheduledBatch& batch, absl::Time now) {
  step_seqs_.clear();
  for (const ScheduledSeq& item : batch.items) {
    const Sequence& seq = *item.seq;
    Live& live = live_.at(seq.id);
    if (!live.scheduled_time.has_value()) live.scheduled_time = now;
    step_seqs_.push_back(StepSequence{.token_ids = seq.token_ids,
                                      .start_position = item.start_position,
                                      .num_new_tokens = item.num_new_tokens,
                                      .block_table = seq.block_table,
                                      .needs_logits = item.samples_token,
                                      .device_samplable = SamplesFromLogitsAlone(seq.sampling),
                                      .sampling = RowOptionsFor(seq.sampling, *seq.sampling.seed,
                                                                seq.num_output_tokens()),
                                      .top_logprobs = seq.top_logprobs});
  }
}

void EngineCore::SampleTokens(const ScheduledBatch& batch) {
  row_of_item_.assign(batch.items.size(), -1);
  for (size_t r = 0; r < logits_.items.size(); ++r) {
    MLASERVE_CHECK(logits_.items[r] >= 0 &&
                   logits_.items[r] < static_cast<int32_t>(batch.items.size()));
    row_of_item_[static_cast<size_t>(logits_.items[r])] = static_cast<int32_t>(r);
  }
  sampled_items_.clear();
  for (size_t i = 0; i < batch.items.size(); ++i) {
    if (!batch.items[i].samples_token) continue;
    MLASERVE_CHECK(row_of_item_[i] >= 0);
    sampled_items_.push_back(static_cast<int32_t>(i));
  }
  choices_.assign(sampled_items_.size(), TokenChoice{});
  // Each task writes its own choice; every draw depends on its row, options and seed alone.
  auto draw = [&](int64_t task, int lane) {
    const auto i = static_cast<size_t>(sampled_items_[static_cast<size_t>(task)]);
    const Sequence& seq = *batch.items[i].seq;
    const absl::Span<const int32_t> tokens(seq.token_ids);
    const auto row = static_cast<size_t>(row_of_item_[i]);
    TokenChoice& choice = choices_[static_cast<size_t>(task)];
    if (logits_.drawn_on_device) {
      const auto k = static_cast<size_t>(logits_.top_k);
      choice = ChoiceFromDraw(logits_.tokens[row], logits_.token_logprobs[row],
                              absl::MakeConstSpan(logits_.top_ids).subspan(row * k, k),
                              absl::MakeConstSpan(logits_.top_logprobs).subspan(row * k, k),
                              seq.top_logprobs);
    } else {
      choice = SampleToken(logits_.row(row), seq.sampling,
                           tokens.subspan(0, static_cast<size_t>(seq.num_prompt_tokens)),
                           tokens.subspan(static_cast<size_t>(seq.num_prompt_tokens)),
                           *seq.sampling.seed, seq.top_logprobs,
                           scratch_[static_cast<size_t>(lane)]);
    }
  };
  Backend& backend = runner_->backend();
  scratch_.resize(static_cast<size_t>(backend.host_lanes()));
  backend.RunHostTasks(static_cast<int64_t>(sampled_items_.size()), draw);
  next_tokens_.clear();
  for (const TokenChoice& choice : choices_) next_tokens_.push_back(choice.token);
}

void EngineCore::Emit(const SequenceOutput& output, TokenChoice choice, absl::Time now) {
  Live& live = live_.at(output.request_id);
  std::vector<int32_t> token_ids;
  std::string text;
  std::vector<TokenChoice> logprobs;
  std::optional<std::string> matched_stop;
  if (output.token.has_value()) {
    if (!live.first_token_time.has_value()) {
      live.first_token_time = now;
    } else {
      inter_token_.push_back(now - live.last_token_time);
    }
    live.last_token_time = now;
    ++live.num_streamed_tokens;
    token_ids.push_back(*output.token);
    if (live.wants_logprobs) logprobs.push_back(std::move(choice));
    if (live.text.has_value()) matched_stop = live.text->Add(*output.token, &text);
  }
  FinishReason reason = output.finish_reason;
  if (matched_stop.has_value()) {
    // A stop string ends the request even if the same token also hit a token-level limit.
    if (!output.finished) MLASERVE_CHECK(scheduler_.Finish(output.request_id, FinishReason::kStop));
    reason = FinishReason::kStop;
  }
  if (reason == FinishReason::kNone) {
    live.stream->Push(std::move(token_ids), std::move(text), std::move(logprobs));
    return;
  }
  End(output, reason, matched_stop.value_or(""), std::move(token_ids), std::move(text),
      std::move(logprobs), now);
}

void EngineCore::End(const SequenceOutput& output, FinishReason reason, std::string matched_stop,
                     std::vector<int32_t> token_ids, std::string text,
                     std::vector<TokenChoice> logprobs, absl::Time now) {
  auto it = live_.find(output.request_id);
  MLASERVE_CHECK(it != live_.end());
  Live& live = it->second;
  if (live.text.has_value() && !live.text->stopped()) {
    // Held-back text can complete a stop string only once it is flushed; that still is a stop.
    std::optional<std::string> flushed_stop = live.text->Finish(&text);
    if (flushed_stop.has_value() && reason == FinishReason::kLength) {
      reason = FinishReason::kStop;
      matched_stop = std::move(*flushed_stop);
    }
  }
  // The contract's completion_tokens == streamed ids rests on this.
  MLASERVE_CHECK(output.num_output_tokens == live.num_streamed_tokens);
  Completion completion;
  completion.finish_reason = reason;
  completion.matched_stop = std::move(matched_stop);
  completion.prompt_tokens = live.num_prompt_tokens;
  completion.completion_tokens = live.num_streamed_tokens;
  completion.cached_tokens = output.num_cached_tokens;
  completion.queue_seconds = Seconds(live.arrival_time, live.scheduled_time.value_or(now));
  if (live.first_token_time.has_value()) {
    completion.time_to_first_token_seconds = Seconds(live.arrival_time, *live.first_token_time);
  }
  completion.e2e_seconds = Seconds(live.arrival_time, now);
  Ending ending{.stream = std::move(live.stream), .update = {}};
  ending.update.token_ids = std::move(token_ids);
  ending.update.text = std::move(text);
  ending.update.logprobs = std::move(logprobs);
  ending.update.completion = std::move(completion);
  endings_.push_back(std::move(ending));
  live_.erase(it);
}

void EngineCore::FailAll(const absl::Status& status) {
  MLASERVE_CHECK(!status.ok());
  for (auto& [id, live] : live_) {
    Ending ending{.stream = std::move(live.stream), .update = {}};
    ending.update.status = status;
    endings_.push_back(std::move(ending));
  }
  live_.clear();
}

void EngineCore::AbortAll() {
  if (live_.empty()) return;
  for (const auto& [id, live] : live_) scheduler_.Abort(id);
  // With nothing left to schedule, the step only reports the aborted sequences.
  MLASERVE_CHECK(Step().ok());
  MLASERVE_CHECK(live_.empty());
}

void EngineCore::FillStats(EngineStats& stats) const {
  const KvBlockManager& kv = scheduler_.kv_block_manager();
  stats.num_running = scheduler_.num_running_seqs();
  stats.num_waiting = scheduler_.num_waiting_seqs();
  stats.kv_blocks_total = kv.num_usable_blocks();
  stats.kv_blocks_free = kv.num_free_blocks();
  stats.kv_block_size = kv.block_size();
  stats.kv_cache_usage = kv.usage();
  stats.max_num_seqs = scheduler_.options().max_num_seqs;
  stats.max_num_batched_tokens = scheduler_.options().max_num_batched_tokens;
  stats.steps_total = num_steps_;
  stats.last_step_time = last_step_time_;
  stats.prefix_cache_hit_tokens = kv.prefix_cache_hit_tokens();
  stats.prefix_cache_query_tokens = kv.prefix_cache_query_tokens();
  stats.num_preemptions = scheduler_.num_preemptions();
}

}  // namespace mlaserve
