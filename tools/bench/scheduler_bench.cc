// Host time of one scheduler step, Schedule() + Postprocess(), at steady state: a full batch of
// decoding sequences that share a long system prompt (prefix caching on), each finished
// sequence replaced by a new request whose prefill joins the following steps.
//
//   scheduler_bench --benchmark_filter=Steady
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "benchmark/benchmark.h"
#include "engine/scheduler.h"

namespace mlaserve {
namespace {

constexpr int32_t kEos = 1;
constexpr int32_t kSystemPromptTokens = 448;
constexpr int32_t kUserPromptTokens = 64;

class Workload {
 public:
  Workload(int32_t num_seqs, bool prefix_caching) : scheduler_(Options(num_seqs, prefix_caching)) {
    for (int32_t t = 0; t < kSystemPromptTokens; ++t) system_prompt_.push_back(1000 + t % 5000);
    for (int32_t i = 0; i < num_seqs; ++i) AddRequest();
    // Run until a step is all decodes.
    while (Step() != last_num_decodes_) {
    }
  }

  // One engine step without the model: sampled tokens are made up. Returns the batch size.
  int32_t Step() {
    const ScheduledBatch batch = scheduler_.Schedule();
    next_tokens_.assign(batch.num_samples, 7 + static_cast<int32_t>(num_requests_ % 1000));
    int32_t num_finished = 0;
    for (const SequenceOutput& out : scheduler_.Postprocess(batch, next_tokens_)) {
      if (out.finished) ++num_finished;
    }
    for (int32_t i = 0; i < num_finished; ++i) AddRequest();
    last_num_decodes_ = batch.num_decodes;
    return static_cast<int32_t>(batch.items.size());
  }

  const Scheduler& scheduler() const { return scheduler_; }

 private:
  static SchedulerOptions Options(int32_t num_seqs, bool prefix_caching) {
    SchedulerOptions options;
    options.max_num_seqs = num_seqs;
    options.max_num_batched_tokens = 8192;
    options.max_model_len = 4096;
    options.max_num_waiting_seqs = 1024;
    options.eos_token_ids = {kEos};
    // Room for every sequence's longest life (512 prompt + 767 output tokens) and a spare set.
    options.kv_cache = {/*num_blocks=*/num_seqs * 21 + 1, /*block_size=*/64, prefix_caching};
    return options;
  }

  void AddRequest() {
    Request request;
    // Ids the size of a typical "cmpl-<uuid>", so copying them costs what it does in service.
    request.id = absl::StrFormat("cmpl-%032x", num_requests_);
    request.prompt_token_ids = system_prompt_;
    for (int32_t t = 0; t < kUserPromptTokens; ++t) {
      request.prompt_token_ids.push_back(static_cast<int32_t>((num_requests_ * 131 + t) % 30000));
    }
    // Staggered lengths, so sequences finish on different steps.
    request.stopping.max_tokens = 256 + static_cast<int32_t>((num_requests_ * 37) % 512);
    ++num_requests_;
    const absl::Status status = scheduler_.Add(std::make_unique<Sequence>(std::move(request)));
    if (!status.ok()) std::abort();
  }

  Scheduler scheduler_;
  std::vector<int32_t> system_prompt_;
  std::vector<int32_t> next_tokens_;
  uint64_t num_requests_ = 0;
  int32_t last_num_decodes_ = -1;
};

void BM_SteadyDecodeStep(benchmark::State& state) {
  Workload workload(static_cast<int32_t>(state.range(0)), state.range(1) != 0);
  int64_t num_items = 0;
  for (auto _ : state) num_items += workload.Step();
  state.counters["seqs_per_step"] =
      benchmark::Counter(static_cast<double>(num_items), benchmark::Counter::kAvgIterations);
  state.counters["cache_hit_rate"] =
      static_cast<double>(workload.scheduler().kv_block_manager().prefix_cache_hit_tokens()) /
      static_cast<double>(workload.scheduler().kv_block_manager().prefix_cache_query_tokens() + 1);
}
BENCHMARK(BM_SteadyDecodeStep)
    ->ArgNames({"seqs", "prefix_caching"})
    ->Args({256, 1})
    ->Args({256, 0})
    ->Args({64, 1})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace mlaserve

BENCHMARK_MAIN();
