// EngineCore: the engine thread's half of the Engine (engine/engine.h): the scheduler, the model
// runner and the per-request output state. Runs steps and turns their results into stream
// updates. Not thread-safe: only the engine thread touches it.
#ifndef MLASERVE_ENGINE_ENGINE_CORE_H_
#define MLASERVE_ENGINE_ENGINE_CORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "engine/engine_stats.h"
#include "engine/model_runner.h"
#include "engine/request_stream.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/tokenizer/incremental_detokenizer.h"

namespace mlaserve {

class EngineCore {
 public:
  // A stream's terminal update, held back until the caller has published the step's effects
  // (freed blocks), so that a consumer who sees the end also sees them.
  struct Ending {
    std::shared_ptr<RequestStream> stream;
    StreamUpdate update;  // ends_stream()
    // Pushes the update to the stream.
    void Deliver();
  };

  // REQUIRES: ValidateSchedulerOptions(options).ok(), options.clock set. `on_step` (may be
  // empty) sees every step that ran the model (EngineOptions::on_step).
  EngineCore(std::unique_ptr<ModelRunner> runner, std::shared_ptr<const Tokenizer> tokenizer,
             const SchedulerOptions& options,
             std::function<void(const StepObservation&)> on_step = nullptr);

  EngineCore(const EngineCore&) = delete;
  EngineCore& operator=(const EngineCore&) = delete;

  // Queues a request validated by Engine::Submit. REQUIRES: request.sampling.seed is set. When
  // the scheduler refuses it (its queue filled up meanwhile) the stream ends with that status.
  void Add(Request request, std::shared_ptr<RequestStream> stream);
  // Ends a live request with kAbort at the next Step(); unknown ids are ignored.
  void Abort(const RequestId& id);
  // Runs one step (see engine/engine.h). On a model error, returns it and leaves the step's
  // batch unfinished: the caller must FailAll() and run no further step.
  absl::Status Step();
  // Ends every live request with `status` (not OK).
  void FailAll(const absl::Status& status);
  // Ends every live request with kAbort now. REQUIRES: no failed step.
  void AbortAll();
  // Terminal updates of the requests ended since the previous call, in order.
  std::vector<Ending> TakeEndings() { return std::exchange(endings_, {}); }

  // Whether a live request exists; Step() makes progress exactly when one does.
  bool has_work() const { return !live_.empty(); }
  // Fills the fields the core knows (all but draining, failed and the inbox).
  void FillStats(EngineStats& stats) const;
  const Scheduler& scheduler() const { return scheduler_; }
  bool has_tokenizer() const { return tokenizer_ != nullptr; }

 private:
  struct Live {
    std::shared_ptr<RequestStream> stream;
    std::optional<IncrementalDetokenizer> text;  // unset without a tokenizer
    bool wants_logprobs = false;
    int32_t num_prompt_tokens = 0;
    int32_t num_streamed_tokens = 0;
    absl::Time arrival_time;
    std::optional<absl::Time> scheduled_time;
    std::optional<absl::Time> first_token_time;
    absl::Time last_token_time;  // valid once first_token_time is set
  };

  // Fills step_seqs_ from the batch and stamps first scheduling times.
  void PrepareStep(const ScheduledBatch& batch, absl::Time now);
  // Samples one token per item with samples_token into next_tokens_ / choices_, the rows on
  // the backend's host threads (Backend::RunHostTasks).
  void SampleTokens(const ScheduledBatch& batch);
  // Streams one sampled token and ends the stream when the sequence finished.
  void Emit(const SequenceOutput& output, TokenChoice choice, absl::Time now);
  // Queues the terminal update (with held-back text) and forgets the request.
  void End(const SequenceOutput& output, FinishReason reason, std::string matched_stop,
           std::vector<int32_t> token_ids, std::string text, std::vector<TokenChoice> logprobs,
           absl::Time now);

  std::unique_ptr<ModelRunner> runner_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  Scheduler scheduler_;
  const std::function<absl::Time()> clock_;
  const std::function<void(const StepObservation&)> on_step_;
  absl::flat_hash_map<RequestId, Live> live_;
  std::vector<Ending> endings_;

  // Per-step buffers, reused so that a warmed-up step allocates little.
  std::vector<StepSequence> step_seqs_;
  StepLogits logits_;
  std::vector<int32_t> row_of_item_;
  std::vector<int32_t> next_tokens_;
  std::vector<TokenChoice> choices_;
  std::vector<SamplerScratch> scratch_;  // one per Backend::host_lanes()
  std::vector<int32_t> sampled_items_;    // the batch items SampleTokens draws for, in order
  std::vector<absl::Duration> inter_token_;  // StepObservation::inter_token of the step

  uint64_t num_steps_ = 0;
  absl::Time last_step_time_ = absl::InfinitePast();
};

}  // namespace mlaserve

#endif  // MLASERVE_ENGINE_ENGINE_CORE_H_
