#include "engine/scheduler.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/check.h"

namespace mlaserve {
namespace {

bool Contains(const std::vector<int32_t>& ids, int32_t token) {
  return std::find(ids.begin(), ids.end(), token) != ids.end();
}

bool IsWaiting(const Sequence& seq) {
  return seq.status == SequenceStatus::kWaiting || seq.status == SequenceStatus::kPreempted;
}

int64_t EffectiveRank(const Sequence& seq, int64_t aging_steps_per_priority) {
  return static_cast<int64_t>(seq.priority) * aging_steps_per_priority - seq.arrival_step;
}

}  // namespace

absl::Status ValidateSchedulerOptions(const SchedulerOptions& options) {
  auto require = [](bool ok, const char* field, const char* what) {
    return ok ? absl::OkStatus()
              : absl::InvalidArgumentError(absl::StrCat("scheduler option ", field, " ", what));
  };
  for (absl::Status status : {
           require(options.max_num_seqs >= 1, "max_num_seqs", "must be at least 1"),
           require(options.max_num_batched_tokens >= 1, "max_num_batched_tokens",
                   "must be at least 1"),
           require(options.max_model_len >= 2, "max_model_len", "must be at least 2"),
           require(options.max_num_waiting_seqs >= 1, "max_num_waiting_seqs", "must be at least 1"),
           require(options.aging_steps_per_priority >= 1, "aging_steps_per_priority",
                   "must be at least 1"),
           require(options.kv_cache.num_blocks >= 2, "kv_cache.num_blocks",
                   "must be at least 2 (block 0 is reserved)"),
           require(options.kv_cache.block_size >= 1, "kv_cache.block_size", "must be at least 1"),
       }) {
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

bool Scheduler::WaitingOrder::operator()(const Sequence* a, const Sequence* b) const {
  const int64_t rank_a = EffectiveRank(*a, aging_steps_per_priority);
  const int64_t rank_b = EffectiveRank(*b, aging_steps_per_priority);
  if (rank_a != rank_b) return rank_a > rank_b;
  return a->arrival_order < b->arrival_order;
}

bool Scheduler::DeadlineOrder::operator()(const Sequence* a, const Sequence* b) const {
  if (a->deadline != b->deadline) return a->deadline < b->deadline;
  return a->arrival_order < b->arrival_order;
}

Scheduler::Scheduler(SchedulerOptions options)
    : options_(std::move(options)),
      kv_(options_.kv_cache),
      max_context_tokens_(static_cast<int32_t>(
          std::min<int64_t>(options_.max_model_len,
                            static_cast<int64_t>(kv_.num_usable_blocks()) * kv_.block_size()))),
      waiting_(WaitingOrder{options_.aging_steps_per_priority}) {
  MLASERVE_CHECK(ValidateSchedulerOptions(options_).ok());
}

absl::Status Scheduler::Add(std::unique_ptr<Sequence> seq) {
  MLASERVE_CHECK(seq != nullptr && seq->status == SequenceStatus::kWaiting &&
                 seq->num_computed_tokens == 0 && seq->block_table.empty() &&
                 seq->num_tokens() == seq->num_prompt_tokens);
  if (seq->num_prompt_tokens == 0) {
    return absl::InvalidArgumentError("the prompt must be non-empty");
  }
  if (seq->num_prompt_tokens >= max_context_tokens_) {
    return absl::InvalidArgumentError(absl::StrCat("the prompt has ", seq->num_prompt_tokens,
                                                   " tokens; the context limit is ",
                                                   max_context_tokens_));
  }
  if (seq->stopping.max_tokens.has_value() && *seq->stopping.max_tokens < 1) {
    return absl::InvalidArgumentError("max_tokens must be at least 1");
  }
  if (seqs_.contains(seq->id)) {
    return absl::AlreadyExistsError(absl::StrCat("request ", seq->id, " is already running"));
  }
  if (num_waiting_seqs() >= options_.max_num_waiting_seqs) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the waiting queue is full (", options_.max_num_waiting_seqs, " requests)"));
  }
  seq->arrival_order = num_arrivals_++;
  seq->arrival_step = step_;
  kv_.HashFullBlocks(*seq);
  Sequence* raw = seq.get();
  seqs_.emplace(raw->id, std::move(seq));
  waiting_.insert(raw);
  if (raw->deadline != absl::InfiniteFuture()) deadlines_.insert(raw);
  return absl::OkStatus();
}

ScheduledBatch Scheduler::Schedule() {
  MLASERVE_CHECK_MSG(!in_flight_, "Postprocess() was not called for the previous batch");
  ScheduledBatch batch;
  batch.items.reserve(std::min<size_t>(running_.size() + waiting_.size(), options_.max_num_seqs));
  int32_t budget = options_.max_num_batched_tokens;

  // 1. Deadlines: drop expired sequences before they take compute.
  DropExpired(options_.clock ? options_.clock() : absl::Now());

  // 2. Decodes of running sequences, preempting on KV pressure.
  ScheduleDecodes(batch, budget);
  batch.num_decodes = static_cast<int32_t>(batch.items.size());

  // 3. Next prefill chunks of running sequences.
  std::vector<ScheduledSeq> prefills;
  ScheduleRunningPrefills(prefills, budget);

  // 4. Admission of waiting sequences in effective-priority order.
  AdmitWaiting(prefills, budget);

  // 5. Assemble: decodes, then prefill chunks; report sequences ended between steps.
  batch.items.insert(batch.items.end(), prefills.begin(), prefills.end());
  batch.num_tokens = options_.max_num_batched_tokens - budget;
  for (const ScheduledSeq& item : batch.items) batch.num_samples += item.samples_token;
  batch.finished = std::move(ended_);
  ended_.clear();
  in_flight_ = !batch.items.empty();
  ++step_;
  return batch;
}

void Scheduler::DropExpired(absl::Time now) {
  while (!deadlines_.empty() && (*deadlines_.begin())->deadline <= now) {
    End(*deadlines_.begin(), FinishReason::kDeadline, /*report=*/true);
  }
}

void Scheduler::ScheduleDecodes(ScheduledBatch& batch, int32_t& budget) {
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence* seq = running_[i];
    if (seq->num_uncomputed_tokens() != 1) continue;
    bool preempted_self = false;
    while (!kv_.CanAppend(*seq, 1)) {
      Sequence* victim = FindVictimAfter(i);
      Preempt(victim != nullptr ? victim : seq);
      if (victim == nullptr) {
        preempted_self = true;
        break;
      }
    }
    // Everything ranked below it was preempted first, so nothing is left to decode.
    if (preempted_self) break;
    kv_.Append(*seq, 1);
    batch.items.push_back(Plan(seq, 1));
    --budget;
  }
}

void Scheduler::ScheduleRunningPrefills(std::vector<ScheduledSeq>& prefills, int32_t& budget) {
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence* seq = running_[i];
    if (seq->last_scheduled_step == step_ || seq->num_uncomputed_tokens() == 1) continue;
    auto chunk = [&] {
      return std::min({seq->num_uncomputed_tokens(), budget, kv_.NumAppendableTokens(*seq)});
    };
    int32_t num_new_tokens = chunk();
    // Scheduled decodes are not preempted for it: when they hold the last blocks it waits a step
    // with what it has.
    for (Sequence* victim; num_new_tokens == 0 && (victim = FindVictimAfter(i)) != nullptr;) {
      Preempt(victim);
      num_new_tokens = chunk();
    }
    if (num_new_tokens == 0) continue;
    kv_.Append(*seq, num_new_tokens);
    prefills.push_back(Plan(seq, num_new_tokens));
    budget -= num_new_tokens;
  }
}

void Scheduler::AdmitWaiting(std::vector<ScheduledSeq>& prefills, int32_t& budget) {
  while (!waiting_.empty() && budget > 0 && num_running_seqs() < options_.max_num_seqs) {
    Sequence* seq = *waiting_.begin();
    const int32_t num_cached_tokens = kv_.NumCachedPrefixTokens(*seq);
    const int32_t num_new_tokens = std::min(seq->num_tokens() - num_cached_tokens, budget);
    if (!kv_.CanAllocate(*seq, num_new_tokens)) break;
    waiting_.erase(waiting_.begin());
    kv_.Allocate(*seq, num_new_tokens);
    if (seq->num_preemptions == 0) {
      seq->num_cached_tokens = std::min(num_cached_tokens, seq->num_prompt_tokens);
    }
    seq->status = SequenceStatus::kRunning;
    InsertRunning(seq);
    prefills.push_back(Plan(seq, num_new_tokens));
    budget -= num_new_tokens;
  }
}

ScheduledSeq Scheduler::Plan(Sequence* seq, int32_t num_new_tokens) {
  seq->last_scheduled_step = step_;
  const int32_t start = seq->num_computed_tokens;
  return ScheduledSeq{seq, start, num_new_tokens, start + num_new_tokens == seq->num_tokens()};
}

Sequence* Scheduler::FindVictimAfter(size_t index) const {
  for (size_t j = running_.size(); j-- > index + 1;) {
    if (running_[j]->last_scheduled_step != step_) return running_[j];
  }
  return nullptr;
}

void Scheduler::Preempt(Sequence* seq) {
  RemoveRunning(seq);
  kv_.Free(*seq);
  seq->status = SequenceStatus::kPreempted;
  ++seq->num_preemptions;
  ++num_preemptions_;
  waiting_.insert(seq);
}

void Scheduler::InsertRunning(Sequence* seq) {
  auto ranks_before = [](const Sequence* a, const Sequence* b) {
    if (a->priority != b->priority) return a->priority > b->priority;
    return a->arrival_order < b->arrival_order;
  };
  running_.insert(std::upper_bound(running_.begin(), running_.end(), seq, ranks_before), seq);
}

void Scheduler::RemoveRunning(Sequence* seq) {
  const auto it = std::find(running_.begin(), running_.end(), seq);
  MLASERVE_CHECK(it != running_.end());
  running_.erase(it);
}

const std::vector<SequenceOutput>& Scheduler::Postprocess(const ScheduledBatch& batch,
                                                          absl::Span<const int32_t> next_tokens) {
  MLASERVE_CHECK(in_flight_ || batch.items.empty());
  MLASERVE_CHECK(next_tokens.size() == static_cast<size_t>(batch.num_samples));
  in_flight_ = false;
  // Outputs are written over last step's, so their id strings' storage is reused.
  outputs_.resize(next_tokens.size());
  std::vector<Sequence*> finished;
  size_t next = 0;
  for (const ScheduledSeq& item : batch.items) {
    Sequence& seq = *item.seq;
    MLASERVE_CHECK(seq.status == SequenceStatus::kRunning &&
                   seq.num_computed_tokens == item.start_position);
    seq.num_computed_tokens += item.num_new_tokens;
    kv_.CommitComputedBlocks(seq);
    if (!item.samples_token) continue;
    const int32_t token = next_tokens[next++];
    const FinishReason reason = AcceptToken(seq, token);
    if (reason != FinishReason::kNone) {
      kv_.Free(seq);
      seq.status = SequenceStatus::kFinished;
      seq.finish_reason = reason;
      if (seq.deadline != absl::InfiniteFuture()) deadlines_.erase(&seq);
      finished.push_back(&seq);
    }
    SequenceOutput& out = outputs_[next - 1];
    FillOutput(seq, out);
    if (reason != FinishReason::kStop) out.token = token;
  }
  if (!finished.empty()) {
    std::erase_if(running_, [](const Sequence* s) { return s->is_finished(); });
    for (Sequence* seq : finished) seqs_.erase(seqs_.find(seq->id));
  }
  return outputs_;
}

FinishReason Scheduler::AcceptToken(Sequence& seq, int32_t token) {
  const StoppingOptions& stopping = seq.stopping;
  if (seq.num_output_tokens() >= stopping.min_tokens &&
      ((!stopping.ignore_eos && Contains(options_.eos_token_ids, token)) ||
       Contains(stopping.stop_token_ids, token))) {
    return FinishReason::kStop;
  }
  seq.token_ids.push_back(token);
  kv_.HashFullBlocks(seq);
  if (stopping.max_tokens.has_value() && seq.num_output_tokens() >= *stopping.max_tokens) {
    return FinishReason::kLength;
  }
  if (seq.num_tokens() >= max_context_tokens_) return FinishReason::kLength;
  return FinishReason::kNone;
}

void Scheduler::FillOutput(const Sequence& seq, SequenceOutput& out) {
  out.request_id = seq.id;
  out.token.reset();
  out.finished = seq.is_finished();
  out.finish_reason = seq.finish_reason;
  out.num_prompt_tokens = seq.num_prompt_tokens;
  out.num_cached_tokens = seq.num_cached_tokens;
  out.num_output_tokens = seq.num_output_tokens();
}

void Scheduler::Abort(const RequestId& id) {
  MLASERVE_CHECK_MSG(!in_flight_, "Abort() between Schedule() and Postprocess()");
  const auto it = seqs_.find(id);
  if (it != seqs_.end()) End(it->second.get(), FinishReason::kAbort, /*report=*/true);
}

bool Scheduler::Finish(const RequestId& id, FinishReason reason) {
  MLASERVE_CHECK_MSG(!in_flight_, "Finish() between Schedule() and Postprocess()");
  MLASERVE_CHECK(reason != FinishReason::kNone);
  const auto it = seqs_.find(id);
  if (it == seqs_.end()) return false;
  End(it->second.get(), reason, /*report=*/false);
  return true;
}

const Sequence* Scheduler::Find(const RequestId& id) const {
  const auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : it->second.get();
}

void Scheduler::End(Sequence* seq, FinishReason reason, bool report) {
  if (IsWaiting(*seq)) {
    waiting_.erase(seq);
  } else {
    RemoveRunning(seq);
  }
  if (seq->deadline != absl::InfiniteFuture()) deadlines_.erase(seq);
  kv_.Free(*seq);
  seq->status = SequenceStatus::kFinished;
  seq->finish_reason = reason;
  if (report) FillOutput(*seq, ended_.emplace_back());
  seqs_.erase(seqs_.find(seq->id));
}

}  // namespace mlaserve
