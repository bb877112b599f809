// GraphRunner: decode steps captured once per batch-size bucket and replayed.
//
// At start-up each bucket (largest first) runs one eager warm-up step of padding rows and is
// then captured (Backend::BeginCapture/EndCapture): CUDA graphs on a GPU, the recorded op list
// on the CPU, bound to the model's static workspaces and the builder's metadata buffer. A
// decode-only step of n <= largest bucket sequences is padded to the next bucket, its metadata
// written into the views the bucket was captured over (ForwardBatchBuilder::BuildDecodes) with
// one copy, and the bucket's graph replayed: no allocation, no shape logic, no dispatch
// decisions.
// Owned by the engine thread; not thread-safe.
#ifndef MLASERVE_ENGINE_GRAPH_RUNNER_H_
#define MLASERVE_ENGINE_GRAPH_RUNNER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/forward_batch.h"
#include "engine/models/deepseek.h"
#include "kernels/backend.h"

namespace mlaserve {

// 1, 2, 4, 8, then every 8 up to max_num_seqs (and max_num_seqs itself).
std::vector<int32_t> DefaultGraphBuckets(int32_t max_num_seqs);

// --graph_batch_sizes: "" = defaults, "none" = no graphs, else a comma-separated list of
// positive sizes <= max_num_seqs. Returns them sorted ascending, without duplicates.
absl::StatusOr<std::vector<int32_t>> ParseGraphBuckets(const std::string& flag,
                                                       int32_t max_num_seqs);

class GraphRunner {
 public:
  GraphRunner(DeepseekModel* model, Backend* backend, ForwardBatchBuilder* builder);

  // Bytes the graphs of `buckets` would own (Graph::memory_bytes), measured by recording each
  // bucket once without running or keeping it: known before the KV cache is sized.
  absl::StatusOr<uint64_t> MeasureMemory(const std::vector<int32_t>& buckets);

  // Captures every bucket; returns the backend's error, if any. Logs each bucket's capture
  // time and memory.
  absl::Status Capture(const std::vector<int32_t>& buckets);

  // The smallest bucket holding n decodes, or 0 when none does.
  int32_t BucketFor(int64_t n) const;

  // A decode step planned for its bucket's graph.
  struct DecodeStep {
    Graph* graph;                          // Replay() runs the step
    TensorView logits;                     // [bucket, vocab], filled by the replay
    absl::Span<const int32_t> logit_items;  // 0, 1, ..., seqs.size() - 1: row r is seqs[r]
  };
  // Writes the metadata of `seqs` (all decodes, at most bucket of them) for `bucket`'s graph
  // and counts a replay of it; the caller then runs the returned graph. The step is planned
  // before its ops run so that the caller can do its own bookkeeping then too: after them, the
  // weights they streamed have evicted everything the host last read.
  DecodeStep Prepare(absl::Span<const StepSequence> seqs, int32_t bucket);
  // One byte of each line Prepare(seqs, bucket) reads or writes, summed
  // (ForwardBatchBuilder::SumDecodeLines): read during the replay's last op for the next step.
  uint32_t SumPrepareLines(absl::Span<const StepSequence> seqs, int32_t bucket) const;

  // Captured buckets, ascending.
  std::vector<int32_t> buckets() const;
  // Replays per bucket since start-up.
  std::map<int32_t, uint64_t> replays() const;
  // Bytes the captured graphs own (sum of Graph::memory_bytes).
  uint64_t memory_bytes() const;

 private:
  struct Captured {
    int32_t bucket = 0;
    std::unique_ptr<Graph> graph;
    TensorView logits;     // [bucket, vocab]
    DecodeLayout layout;   // where the metadata the graph reads lies
    uint64_t replays = 0;
  };
  // Builds `bucket`'s padded batch into `batch` and records one forward step over it.
  Captured Record(int32_t bucket, ForwardBatch* batch);

  DeepseekModel* model_;
  Backend* backend_;
  ForwardBatchBuilder* builder_;
  std::vector<Captured> graphs_;  // ascending buckets
  // index_for_[n]: the graphs_ entry of the smallest bucket holding n decodes, for every n up
  // to the largest bucket: one lookup in a step, no tree walk.
  std::vector<int32_t> index_for_;
  // 0, 1, ..., largest bucket - 1: every replayed step's logit rows, a prefix of these.
  std::vector<int32_t> rows_;
};

}  // namespace mlaserve

#endif  // MLASERVE_ENGINE_GRAPH_RUNNER_H_
