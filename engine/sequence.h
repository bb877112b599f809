// Sequence: the engine's state for one request. Owned by the Scheduler and mutated only on the
// engine thread, by the Scheduler and the KvBlockManager; the model runner reads it during a
// step. A plain struct because both of them maintain its invariants together:
//   num_cached_tokens <= num_computed_tokens < num_tokens() while it is live,
//   block_table covers at least num_computed_tokens tokens,
//   block_hashes[i] is the prefix-cache hash of tokens [i * block_size, (i + 1) * block_size).
#ifndef MLASERVE_ENGINE_SEQUENCE_H_
#define MLASERVE_ENGINE_SEQUENCE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "engine/request.h"

namespace mlaserve {

enum class SequenceStatus : uint8_t {
  kWaiting,    // never scheduled
  kRunning,    // holds KV blocks; gets a prefill chunk or a decode each step it fits
  kPreempted,  // lost its blocks; waits to re-prefill its prompt and the tokens generated so far
  kFinished,
};

enum class FinishReason : uint8_t {
  kNone,      // not finished
  kStop,      // eos, a stop token id, or a stop string
  kLength,    // max_tokens or the context limit
  kAbort,     // cancelled by the client or the engine
  kDeadline,  // its deadline passed before it finished
};

const char* FinishReasonName(FinishReason reason);

struct Sequence {
  explicit Sequence(Request request)
      : id(std::move(request.id)),
        token_ids(std::move(request.prompt_token_ids)),
        num_prompt_tokens(static_cast<int32_t>(token_ids.size())),
        sampling(request.sampling),
        stopping(std::move(request.stopping)),
        priority(request.priority),
        top_logprobs(request.top_logprobs),
        return_logprobs(request.return_logprobs),
        cache_salt(std::move(request.cache_salt)),
        arrival_time(request.arrival_time),
        deadline(request.deadline) {}

  int32_t num_tokens() const { return static_cast<int32_t>(token_ids.size()); }
  int32_t num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
  // Tokens still to be computed before the next token can be sampled.
  int32_t num_uncomputed_tokens() const { return num_tokens() - num_computed_tokens; }
  bool is_finished() const { return status == SequenceStatus::kFinished; }

  RequestId id;
  std::vector<int32_t> token_ids;  // prompt, then every output token streamed so far
  int32_t num_prompt_tokens = 0;
  int32_t num_computed_tokens = 0;  // leading tokens whose KV is in the cache
  // Prompt tokens served by the prefix cache at first admission (reported as usage).
  int32_t num_cached_tokens = 0;

  SamplingOptions sampling;
  StoppingOptions stopping;
  int32_t priority = 0;
  int32_t top_logprobs = 0;
  bool return_logprobs = false;
  std::optional<std::string> cache_salt;
  absl::Time arrival_time;
  absl::Time deadline;

  // KV bookkeeping, maintained by KvBlockManager.
  std::vector<int32_t> block_table;    // block ids, position p lives in block_table[p / block_size]
  std::vector<uint64_t> block_hashes;  // one per full block of token_ids (prefix caching only)
  int32_t num_committed_blocks = 0;    // leading blocks already offered to the prefix cache

  // Scheduling bookkeeping, maintained by Scheduler.
  SequenceStatus status = SequenceStatus::kWaiting;
  FinishReason finish_reason = FinishReason::kNone;
  uint64_t arrival_order = 0;  // position in the order of Scheduler::Add calls
  int64_t arrival_step = 0;    // Scheduler steps taken before it arrived; drives aging
  int64_t last_scheduled_step = -1;
  int32_t num_preemptions = 0;
};

}  // namespace mlaserve

#endif  // MLASERVE_ENGINE_SEQUENCE_H_
