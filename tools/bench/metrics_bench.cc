// Cost of the metrics on the hot path (docs/performance.md, "Metrics cost"): what the engine
// thread and the gRPC threads spend per generated token on Metrics' observer calls, for a
// decode step of `batch` sequences replayed from a graph: one OnStep carrying `batch`
// inter-token gaps, and one OnTokensSent per sequence. Reported per token (items).
#include <vector>

#include "benchmark/benchmark.h"
#include "server/metrics/metrics.h"

namespace mlaserve {
namespace {

void BM_DecodeStepObservation(benchmark::State& state) {
  const auto batch = static_cast<int32_t>(state.range(0));
  Metrics metrics(MetricsOptions{});
  const std::vector<absl::Duration> gaps(static_cast<size_t>(batch), absl::Microseconds(900));
  const StepObservation step{.kind = {.phase = StepPhase::kDecode, .graph_batch_size = batch},
                             .num_tokens = batch,
                             .duration = absl::Microseconds(850),
                             .inter_token = gaps};
  for (auto _ : state) {
    metrics.OnStep(step);
    for (int32_t i = 0; i < batch; ++i) metrics.OnTokensSent(1);
  }
  state.SetItemsProcessed(state.iterations() * batch);
}
BENCHMARK(BM_DecodeStepObservation)->Arg(1)->Arg(8)->Arg(64);

// A scrape: refresh (no engine attached) and collect every family; off the hot path, on the
// HTTP server's thread.
void BM_Collect(benchmark::State& state) {
  Metrics metrics(MetricsOptions{});
  for (auto _ : state) benchmark::DoNotOptimize(metrics.Collect());
}
BENCHMARK(BM_Collect);

}  // namespace
}  // namespace mlaserve

BENCHMARK_MAIN();
