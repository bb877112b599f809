// Scheduler: continuous batching over a paged KV cache. Each step it decides which sequences
// compute which tokens, within a token budget and a sequence budget, and afterwards folds the
// sampled tokens back into the sequences.
//
// A step (Schedule) serves, in this order:
//   1. deadlines: a sequence whose deadline has passed is dropped before it takes compute;
//   2. decodes of running sequences, one token each, in rank order (priority, then arrival);
//      when the KV cache is full, the lowest-ranked running sequence not yet scheduled in this
//      step is preempted by recompute: it loses its blocks and its computed state, keeps its
//      tokens, and waits to re-prefill prompt + output (prefix caching usually hands most of its
//      blocks straight back);
//   3. prefill chunks of running sequences whose tokens are not all computed yet (chunked
//      prefill: several can be mid-prefill at once); a chunk is cut to the token budget and to
//      the KV room left;
//   4. admission of waiting sequences, strictly in effective-priority order: when the head does
//      not fit (KV, sequence budget), nothing behind it is admitted either, so a large request
//      cannot be starved by a stream of small ones.
//
// Priorities and aging. A waiting sequence's effective priority is
//   priority + steps_waited / aging_steps_per_priority        (ties: earlier arrival first),
// where steps are Schedule() calls. All waiting sequences age at the same rate, so the order is
// the fixed order of priority * A - arrival_step (A = aging_steps_per_priority) and needs no
// re-sorting. Bound: if X is admitted while Y still waits and X arrived after Y, then X arrived
// at most A * (priority_X - priority_Y) steps after Y. Hence Y is overtaken only by requests that
// arrive within A * (max_priority - priority_Y) steps of it; after waiting that long, nothing that
// arrives later is admitted before it.
//
// Thread-safety: none; owned by the engine thread. Deterministic: the same calls in the same
// order (and the same clock readings) give the same batches.
#ifndef MLASERVE_ENGINE_SCHEDULER_H_
#define MLASERVE_ENGINE_SCHEDULER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "engine/kv_block_manager.h"
#include "engine/request.h"
#include "engine/sequence.h"

namespace mlaserve {

struct SchedulerOptions {
  int32_t max_num_seqs = 256;             // running sequences (holding KV blocks) at once
  int32_t max_num_batched_tokens = 8192;  // tokens computed per step
  // Prompt + output tokens of one sequence; also capped by the KV pool (max_context_tokens()).
  int32_t max_model_len = 4096;
  int32_t max_num_waiting_seqs = 1024;    // Add() refuses new sequences beyond this
  int32_t aging_steps_per_priority = 64;  // steps of waiting that are worth one priority level
  std::vector<int32_t> eos_token_ids;
  KvBlockManagerOptions kv_cache;
  std::function<absl::Time()> clock;  // deadlines are checked against it; unset: absl::Now
};

// Refuses options the scheduler cannot run with, naming the field.
absl::Status ValidateSchedulerOptions(const SchedulerOptions& options);

// One sequence's work in a step: compute token_ids[start_position, start_position +
// num_new_tokens) with KV written through seq->block_table.
struct ScheduledSeq {
  Sequence* seq = nullptr;
  int32_t start_position = 0;  // == seq->num_computed_tokens when scheduled
  int32_t num_new_tokens = 0;
  // The chunk reaches the last known token, so its logits yield the next token: true for
  // decodes and for the chunk that completes a (re-)prefill.
  bool samples_token = false;
};

// What a step produced for one sequence.
struct SequenceOutput {
  RequestId request_id;
  std::optional<int32_t> token;  // the new output token; unset when none is streamed
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  // Usage so far.
  int32_t num_prompt_tokens = 0;
  int32_t num_cached_tokens = 0;
  int32_t num_output_tokens = 0;
};

struct ScheduledBatch {
  // Decodes first, then prefill chunks; every seq appears at most once. Each seq's block table
  // covers start_position + num_new_tokens tokens.
  std::vector<ScheduledSeq> items;
  int32_t num_decodes = 0;  // items[0, num_decodes) are decodes: one token, samples_token
  int32_t num_tokens = 0;   // sum of num_new_tokens; <= max_num_batched_tokens
  int32_t num_samples = 0;  // items with samples_token
  // Sequences ended by their deadline or by Abort() since the previous Schedule(); they are
  // gone from the scheduler and must be reported to their clients.
  std::vector<SequenceOutput> finished;
};

class Scheduler {
 public:
  // REQUIRES: ValidateSchedulerOptions(options).ok().
  explicit Scheduler(SchedulerOptions options);

  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a new sequence (fresh from Sequence(Request)). InvalidArgument for an empty prompt,
  // a prompt of max_context_tokens() or more, or max_tokens < 1; AlreadyExists for a live id;
  // ResourceExhausted when max_num_waiting_seqs sequences already wait.
  absl::Status Add(std::unique_ptr<Sequence> seq);

  // Plans the next step (see the file comment). The returned items point at sequences owned by
  // the scheduler; they stay valid until Postprocess(). Once a non-empty batch is returned,
  // Postprocess() must be called for it before Schedule(), Abort() or Finish().
  ScheduledBatch Schedule();

  // Applies a step's results. `next_tokens` holds one sampled token per item with samples_token,
  // in item order (batch.num_samples of them). Advances num_computed_tokens, offers completed
  // blocks to the prefix cache, appends sampled tokens and applies the token-level stop
  // conditions: eos (unless ignore_eos) and stop_token_ids end with kStop once min_tokens output
  // tokens exist, and the stop token itself is not appended nor streamed; max_tokens and the
  // context limit end with kLength. Finished sequences release their blocks and are destroyed.
  // Returns one output per item with samples_token, in item order. The outputs live in a buffer
  // that the next Postprocess() overwrites (reusing it saves an id copy per sequence per step).
  const std::vector<SequenceOutput>& Postprocess(const ScheduledBatch& batch,
                                                 absl::Span<const int32_t> next_tokens);

  // Ends a live sequence at once, in any state, freeing its blocks; it is reported with kAbort
  // in the next ScheduledBatch::finished. Unknown ids are ignored.
  void Abort(const RequestId& id);
  // Ends a live sequence the engine decided is done (a stop string: kStop), freeing its blocks.
  // Not reported back: the caller reports it. Returns false for an unknown id.
  bool Finish(const RequestId& id, FinishReason reason);

  // The live sequence with this id, or nullptr. Valid until it finishes.
  const Sequence* Find(const RequestId& id) const;

  int32_t num_waiting_seqs() const { return static_cast<int32_t>(waiting_.size()); }
  int32_t num_running_seqs() const { return static_cast<int32_t>(running_.size()); }
  bool has_unfinished_seqs() const { return !seqs_.empty(); }
  int64_t num_steps() const { return step_; }
  // Running sequences preempted so far.
  uint64_t num_preemptions() const { return num_preemptions_; }
  // Longest sequence (prompt + output) the scheduler lets grow: max_model_len, or less when
  // the KV pool cannot hold that many tokens.
  int32_t max_context_tokens() const { return max_context_tokens_; }
  const KvBlockManager& kv_block_manager() const { return kv_; }
  const SchedulerOptions& options() const { return options_; }

 private:
  // Waiting order: effective priority, then arrival (see the file comment).
  struct WaitingOrder {
    bool operator()(const Sequence* a, const Sequence* b) const;
    int64_t aging_steps_per_priority;
  };
  struct DeadlineOrder {
    bool operator()(const Sequence* a, const Sequence* b) const;
  };

  void DropExpired(absl::Time now);
  void ScheduleDecodes(ScheduledBatch& batch, int32_t& budget);
  void ScheduleRunningPrefills(std::vector<ScheduledSeq>& prefills, int32_t& budget);
  void AdmitWaiting(std::vector<ScheduledSeq>& prefills, int32_t& budget);

  ScheduledSeq Plan(Sequence* seq, int32_t num_new_tokens);
  // Lowest-ranked running sequence after running_[index] not scheduled in this step, or null.
  Sequence* FindVictimAfter(size_t index) const;
  void Preempt(Sequence* seq);
  void InsertRunning(Sequence* seq);
  void RemoveRunning(Sequence* seq);
  // Appends the stop-checked token; returns why the sequence ends, or kNone.
  FinishReason AcceptToken(Sequence& seq, int32_t token);
  static void FillOutput(const Sequence& seq, SequenceOutput& out);
  // Removes a live sequence from every queue, frees its blocks and destroys it.
  void End(Sequence* seq, FinishReason reason, bool report);

  const SchedulerOptions options_;
  KvBlockManager kv_;
  const int32_t max_context_tokens_;
  int64_t step_ = 0;
  uint64_t num_arrivals_ = 0;
  uint64_t num_preemptions_ = 0;
  bool in_flight_ = false;  // a non-empty batch awaits Postprocess()

  absl::flat_hash_map<RequestId, std::unique_ptr<Sequence>> seqs_;  // every live sequence
  std::vector<Sequence*> running_;  // rank order: priority descending, then arrival
  std::set<Sequence*, WaitingOrder> waiting_;
  std::set<Sequence*, DeadlineOrder> deadlines_;  // live sequences with a finite deadline
  std::vector<SequenceOutput> ended_;             // for the next ScheduledBatch::finished
  std::vector<SequenceOutput> outputs_;           // returned by Postprocess()
};

}  // namespace mlaserve

#endif  // MLASERVE_ENGINE_SCHEDULER_H_
