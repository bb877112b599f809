#include "engine/graph_runner.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/status_macros.h"

namespace mlaserve {

std::vector<int32_t> DefaultGraphBuckets(int32_t max_num_seqs) {
  std::vector<int32_t> out;
  for (int32_t b : {1, 2, 4}) {
    if (b < max_num_seqs) out.push_back(b);
  }
  for (int32_t b = 8; b < max_num_seqs; b += 8) out.push_back(b);
  out.push_back(max_num_seqs);
  return out;
}

absl::StatusOr<std::vector<int32_t>> ParseGraphBuckets(const std::string& flag,
                                                       int32_t max_num_seqs) {
  if (flag.empty()) return DefaultGraphBuckets(max_num_seqs);
  if (flag == "none") return std::vector<int32_t>{};
  std::vector<int32_t> out;
  for (absl::string_view part : absl::StrSplit(flag, ',')) {
    int32_t b = 0;
    if (!absl::SimpleAtoi(part, &b) || b <= 0 || b > max_num_seqs) {
      return absl::InvalidArgumentError(
          absl::StrCat("--graph_batch_sizes: \"", std::string(part),
                       "\" is not a batch size in [1, max_num_seqs=", max_num_seqs, "]"));
    }
    out.push_back(b);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

GraphRunner::GraphRunner(DeepseekModel* model, Backend* backend, ForwardBatchBuilder* builder)
    : model_(model), backend_(backend), builder_(builder) {}

GraphRunner::Captured GraphRunner::Record(int32_t bucket, ForwardBatch* batch) {
  builder_->Build({}, batch, bucket);
  backend_->BeginCapture();
  const TensorView logits = model_->Forward(*batch);
  return Captured{backend_->EndCapture(), logits, batch->input_ids.data()};
}

absl::StatusOr<uint64_t> GraphRunner::MeasureMemory(const std::vector<int32_t>& buckets) {
  ForwardBatch batch;
  uint64_t bytes = 0;
  for (int32_t bucket : buckets) bytes += Record(bucket, &batch).graph->memory_bytes();
  RETURN_IF_ERROR(backend_->Synchronize());
  return bytes;
}

absl::Status GraphRunner::Capture(const std::vector<int32_t>& buckets) {
  ForwardBatch batch;
  for (auto it = buckets.rbegin(); it != buckets.rend(); ++it) {
    const int32_t bucket = *it;
    const auto start = std::chrono::steady_clock::now();
    builder_->Build({}, &batch, bucket);
    model_->Forward(batch);  // warm-up: first-touch of every buffer the graph reads
    RETURN_IF_ERROR(backend_->Synchronize());
    Captured captured = Record(bucket, &batch);
    RETURN_IF_ERROR(backend_->Synchronize());
    const uint64_t bytes = captured.graph->memory_bytes();
    graphs_[bucket] = std::move(captured);
    replays_[bucket] = 0;
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count();
    std::fprintf(stderr, "mlaserve: captured decode graph for batch %d in %.1f ms (%llu bytes)\n",
                 bucket, ms, static_cast<unsigned long long>(bytes));
  }
  return absl::OkStatus();
}

int32_t GraphRunner::BucketFor(int64_t n) const {
  const auto it = graphs_.lower_bound(static_cast<int32_t>(n));
  return it == graphs_.end() ? 0 : it->first;
}

TensorView GraphRunner::Replay(absl::Span<const StepSequence> seqs, int32_t bucket,
                               ForwardBatch* batch) {
  Captured& captured = graphs_.at(bucket);
  builder_->Build(seqs, batch, bucket);
  MLASERVE_CHECK(batch->input_ids.data() == captured.input_ids_data);
  captured.graph->Replay();
  ++replays_[bucket];
  return captured.logits;
}

uint64_t GraphRunner::memory_bytes() const {
  uint64_t bytes = 0;
  for (const auto& [bucket, captured] : graphs_) bytes += captured.graph->memory_bytes();
  return bytes;
}

std::vector<int32_t> GraphRunner::buckets() const {
  std::vector<int32_t> out;
  for (const auto& [bucket, unused] : graphs_) out.push_back(bucket);
  return out;
}

}  // namespace mlaserve
