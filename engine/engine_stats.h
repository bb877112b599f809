// What the engine reports about itself: every model step as it happens (StepObservation, for
// EngineOptions::on_step), a snapshot of its state (EngineStats) and what is fixed at creation
// (EngineInfo). Plain data, shared by the Engine facade (engine.h) and the engine thread's
// EngineCore (engine_core.h) without either including the other.
#ifndef MLASERVE_ENGINE_ENGINE_STATS_H_
#define MLASERVE_ENGINE_ENGINE_STATS_H_

#include <cstdint>
#include <vector>

#include "absl/time/time.h"
#include "absl/types/span.h"
#include "engine/config.h"
#include "engine/model_runner.h"

namespace mlaserve {

// One step that ran the model, as EngineOptions::on_step sees it.
struct StepObservation {
  StepKind kind;
  int32_t num_tokens = 0;   // tokens the step computed: prompt chunks plus decodes
  absl::Duration duration;  // from the batch being scheduled to its tokens being sampled
  // For every sequence that received a token other than its first in this step: the time since
  // its previous token. Both ends are stamped with the engine's clock. Valid during the call.
  absl::Span<const absl::Duration> inter_token;
};

// Snapshot of the engine's state for GetServerInfo and metrics.
struct EngineStats {
  int32_t num_running = 0;      // sequences holding KV blocks
  int32_t num_waiting = 0;      // queued (inbox included) or preempted
  int32_t kv_blocks_total = 0;  // blocks that can be handed out (the reserved block excluded)
  int32_t kv_blocks_free = 0;
  int32_t kv_block_size = 0;  // tokens per block
  double kv_cache_usage = 0;  // 1 - free / total
  int32_t max_num_seqs = 0;
  int32_t max_num_batched_tokens = 0;
  uint64_t steps_total = 0;                          // steps that ran the model
  absl::Time last_step_time = absl::InfinitePast();  // end of the latest such step (clock)
  bool draining = false;
  bool failed = false;           // the model failed; every request since then is refused
  uint64_t num_preemptions = 0;  // running sequences preempted (recomputed later) so far
  uint64_t prefix_cache_hit_tokens = 0;
  uint64_t prefix_cache_query_tokens = 0;
};

// Fixed at Create().
struct EngineInfo {
  ModelConfig model_config;
  // Longest sequence (prompt + output) served: the scheduler's max_context_tokens().
  int32_t max_context_tokens = 0;
  // Backend memory by use: ModelRunner::memory().
  uint64_t weight_bytes = 0;
  uint64_t kv_cache_bytes = 0;
  uint64_t workspace_bytes = 0;
  uint64_t graph_bytes = 0;
  std::vector<int32_t> eos_token_ids;
  std::vector<int32_t> graph_batch_sizes;  // decode batch sizes replayed from captured graphs
  bool deterministic = true;               // the backend is batch-invariant
};

}  // namespace mlaserve

#endif  // MLASERVE_ENGINE_ENGINE_STATS_H_
