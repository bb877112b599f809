#include "engine/graph_runner.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>

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
  return Captured{.bucket = bucket, .graph = backend_->EndCapture(), .logits = logits,
                  .layout = builder_->DecodeLayoutOf(*batch)};
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
    graphs_.push_back(std::move(captured));
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count();
    std::fprintf(stderr, "mlaserve: captured decode graph for batch %d in %.1f ms (%llu bytes)\n",
                 bucket, ms, static_cast<unsigned long long>(bytes));
  }
  std::sort(graphs_.begin(), graphs_.end(),
            [](const Captured& a, const Captured& b) { return a.bucket < b.bucket; });
  graphs_.erase(std::unique(graphs_.begin(), graphs_.end(),
                            [](const Captured& a, const Captured& b) {
                              return a.bucket == b.bucket;
                            }),
                graphs_.end());
  index_for_.assign(graphs_.empty() ? 0 : static_cast<size_t>(graphs_.back().bucket) + 1, 0);
  int32_t index = 0;
  for (int32_t n = 0; n < static_cast<int32_t>(index_for_.size()); ++n) {
    while (graphs_[index].bucket < n) ++index;
    index_for_[n] = index;
  }
  rows_.resize(index_for_.empty() ? 0 : index_for_.size() - 1);
  std::iota(rows_.begin(), rows_.end(), 0);
  return absl::OkStatus();
}

int32_t GraphRunner::BucketFor(int64_t n) const {
  if (n < 0 || n >= static_cast<int64_t>(index_for_.size())) return 0;
  return graphs_[index_for_[n]].bucket;
}

GraphRunner::DecodeStep GraphRunner::Prepare(absl::Span<const StepSequence> seqs,
                                             int32_t bucket) {
  MLASERVE_CHECK(bucket > 0 && bucket < static_cast<int32_t>(index_for_.size()));
  Captured& captured = graphs_[index_for_[bucket]];
  MLASERVE_CHECK(captured.bucket == bucket);
  builder_->BuildDecodes(seqs, captured.layout);
  ++captured.replays;
  return {captured.graph.get(), captured.logits,
          absl::MakeConstSpan(rows_.data(), seqs.size())};
}

uint32_t GraphRunner::SumPrepareLines(absl::Span<const StepSequence> seqs,
                                      int32_t bucket) const {
  const Captured& captured = graphs_[index_for_[bucket]];
  return SumLines(this, sizeof(*this)) + SumLines(&index_for_[bucket], sizeof(int32_t)) +
         SumLines(&captured, sizeof(captured)) +
         SumLines(captured.graph.get(), 1) +  // where Replay is looked up
         SumLines(rows_.data(), seqs.size() * sizeof(int32_t)) +
         builder_->SumDecodeLines(seqs, captured.layout);
}

uint64_t GraphRunner::memory_bytes() const {
  uint64_t bytes = 0;
  for (const Captured& captured : graphs_) bytes += captured.graph->memory_bytes();
  return bytes;
}

std::vector<int32_t> GraphRunner::buckets() const {
  std::vector<int32_t> out;
  for (const Captured& captured : graphs_) out.push_back(captured.bucket);
  return out;
}

std::map<int32_t, uint64_t> GraphRunner::replays() const {
  std::map<int32_t, uint64_t> out;
  for (const Captured& captured : graphs_) out[captured.bucket] = captured.replays;
  return out;
}

}  // namespace mlaserve
