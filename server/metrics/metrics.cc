#include "server/metrics/metrics.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/sequence.h"
#include "kernels/cpu/cpu_stream_tuning.h"
#include "server/grpc/status_conversion.h"

namespace mlaserve {
namespace {

using prometheus::Counter;
using prometheus::Gauge;
using prometheus::Histogram;

// Counters mirrored from the engine's totals move by the difference.
void SetCounter(Counter& counter, double total) { counter.Increment(total - counter.Value()); }

const char* PhaseLabel(StepPhase phase) {
  switch (phase) {
    case StepPhase::kPrefill:
      return "prefill";
    case StepPhase::kDecode:
      return "decode";
    case StepPhase::kMixed:
      return "mixed";
  }
  return "mixed";
}

std::vector<double> BucketsOf(const MetricSpec& spec, const MetricsOptions& options) {
  if (spec.id == MetricId::kTimeToFirstTokenSeconds && !options.ttft_buckets.empty()) {
    return options.ttft_buckets;
  }
  if (spec.id == MetricId::kInterTokenLatencySeconds && !options.inter_token_buckets.empty()) {
    return options.inter_token_buckets;
  }
  return {spec.buckets.begin(), spec.buckets.end()};
}

// The series labels of a single-label metric's table values; one unlabelled series without.
std::vector<prometheus::Labels> PrecreatedLabels(const MetricSpec& spec) {
  if (spec.label_values.empty()) {
    if (!spec.labels.empty()) return {};  // the server adds them
    return {prometheus::Labels{}};
  }
  std::vector<prometheus::Labels> labels;
  for (std::string_view value : spec.label_values) {
    labels.push_back({{std::string(spec.labels[0]), std::string(value)}});
  }
  return labels;
}

// Registers the family `name` of `spec` and adds its `labels` series to `series`; `args` (the
// buckets of a histogram) go to every series.
template <typename T, typename SeriesT, typename... Args>
void Register(prometheus::detail::Builder<T> builder, std::string_view name,
              const MetricSpec& spec, const std::vector<prometheus::Labels>& labels,
              prometheus::Registry& registry, SeriesT& series, const Args&... args) {
  auto& family = builder.Name(std::string(name)).Help(std::string(spec.help)).Register(registry);
  series.families.push_back(&family);
  for (const prometheus::Labels& l : labels) series.values.push_back(&family.Add(l, args...));
}

}  // namespace

Metrics::Metrics(const MetricsOptions& options) {
  for (const MetricSpec& spec : MetricsTable()) Create(spec, options);
}

void Metrics::Create(const MetricSpec& spec, const MetricsOptions& options) {
  const size_t i = static_cast<size_t>(spec.id);
  const std::vector<prometheus::Labels> labels = PrecreatedLabels(spec);
  switch (spec.type) {
    case MetricType::kCounter:
      Register(prometheus::BuildCounter(), spec.name, spec, labels, registry_, counters_[i]);
      break;
    case MetricType::kGauge:
      Register(prometheus::BuildGauge(), spec.name, spec, labels, registry_, gauges_[i]);
      if (!options.vllm_names) break;
      for (std::string_view name : spec.vllm_names) {
        Register(prometheus::BuildGauge(), name, spec, labels, registry_, gauges_[i]);
      }
      break;
    case MetricType::kHistogram:
      Register(prometheus::BuildHistogram(), spec.name, spec, labels, registry_, histograms_[i],
               BucketsOf(spec, options));
      break;
  }
}

template <typename T>
T* Metrics::Pick(const Series<T>& series, MetricId id, std::string_view label_value) {
  if (label_value.empty()) return series.values[0];
  const auto& values = Spec(id).label_values;
  const auto it = std::find(values.begin(), values.end(), label_value);
  if (it == values.end()) return nullptr;
  return series.values[static_cast<size_t>(it - values.begin())];
}

Counter* Metrics::CounterFor(MetricId id, std::string_view label_value) const {
  return Pick(counters_[static_cast<size_t>(id)], id, label_value);
}

Histogram* Metrics::HistogramFor(MetricId id, std::string_view label_value) const {
  return Pick(histograms_[static_cast<size_t>(id)], id, label_value);
}

void Metrics::SetEngine(std::weak_ptr<const ServingEngine> engine) {
  std::shared_ptr<const ServingEngine> e = engine.lock();
  if (e == nullptr) return;
  const EngineStats stats = e->stats();
  const prometheus::Labels cache_config = {{"block_size", absl::StrCat(stats.kv_block_size)},
                                           {"num_blocks", absl::StrCat(stats.kv_blocks_total)}};
  for (auto* family : gauges_[static_cast<size_t>(MetricId::kCacheConfigInfo)].families) {
    family->Add(cache_config).Set(1);
  }
  const EngineInfo& info = e->info();
  SetGauge(MetricId::kWeightBytes, static_cast<double>(info.weight_bytes));
  SetGauge(MetricId::kKvCacheBytes, static_cast<double>(info.kv_cache_bytes));
  SetGauge(MetricId::kGraphMemoryBytes, static_cast<double>(info.graph_bytes));
  auto* replays = counters_[static_cast<size_t>(MetricId::kGraphReplaysTotal)].families[0];
  absl::MutexLock lock(&mu_);
  for (int32_t size : info.graph_batch_sizes) {
    graph_replays_.try_emplace(size, &replays->Add({{"batch_size", absl::StrCat(size)}}));
  }
  engine_ = std::move(engine);
  engine_set_ = e->Now();
}

void Metrics::OnStep(const StepObservation& step) {
  CounterFor(MetricId::kEngineStepsTotal)->Increment();
  const char* phase = PhaseLabel(step.kind.phase);
  if (step.kind.graph_batch_size > 0) {
    absl::MutexLock lock(&mu_);
    auto [it, added] = graph_replays_.try_emplace(step.kind.graph_batch_size, nullptr);
    if (added) {
      it->second = &counters_[static_cast<size_t>(MetricId::kGraphReplaysTotal)].families[0]->Add(
          {{"batch_size", absl::StrCat(step.kind.graph_batch_size)}});
    }
    it->second->Increment();
  } else {
    CounterFor(MetricId::kEagerStepsTotal, phase)->Increment();
  }
  HistogramFor(MetricId::kEngineStepSeconds, phase)->Observe(absl::ToDoubleSeconds(step.duration));
  HistogramFor(MetricId::kIterationTokens)->Observe(step.num_tokens);
  Histogram* inter_token = HistogramFor(MetricId::kInterTokenLatencySeconds);
  for (absl::Duration gap : step.inter_token) inter_token->Observe(absl::ToDoubleSeconds(gap));
}

void Metrics::OnAdmitted(int32_t num_prompt_tokens) {
  CounterFor(MetricId::kPromptTokensTotal)->Increment(num_prompt_tokens);
  HistogramFor(MetricId::kRequestPromptTokens)->Observe(num_prompt_tokens);
}

void Metrics::OnTokensSent(int32_t num_tokens) {
  CounterFor(MetricId::kGenerationTokensTotal)->Increment(num_tokens);
}

void Metrics::OnCompleted(const Completion& completion) {
  // The reactor reports kDeadline as a failure; the table lists the other reasons.
  if (Counter* success = CounterFor(MetricId::kRequestSuccessTotal,
                                    FinishReasonName(completion.finish_reason))) {
    success->Increment();
  }
  HistogramFor(MetricId::kE2eRequestLatencySeconds)->Observe(completion.e2e_seconds);
  HistogramFor(MetricId::kRequestQueueTimeSeconds)->Observe(completion.queue_seconds);
  if (completion.completion_tokens > 0) {
    HistogramFor(MetricId::kTimeToFirstTokenSeconds)
        ->Observe(completion.time_to_first_token_seconds);
  }
  HistogramFor(MetricId::kRequestGenerationTokens)->Observe(completion.completion_tokens);
}

void Metrics::OnFailed(absl::StatusCode code) {
  // Codes outside the contract's label set count as internal.
  Counter* counter = CounterFor(MetricId::kRequestFailureTotal, StatusCodeLabel(code));
  if (counter == nullptr) counter = CounterFor(MetricId::kRequestFailureTotal, "internal");
  counter->Increment();
}

void Metrics::SetGauge(MetricId id, double value) const {
  for (Gauge* gauge : gauges_[static_cast<size_t>(id)].values) gauge->Set(value);
}

void Metrics::RefreshLocked() const {
  std::shared_ptr<const ServingEngine> engine = engine_.lock();
  if (engine == nullptr) return;
  const EngineStats stats = engine->stats();
  SetGauge(MetricId::kNumRequestsRunning, stats.num_running);
  SetGauge(MetricId::kNumRequestsWaiting, stats.num_waiting);
  SetGauge(MetricId::kKvCacheUsagePerc, stats.kv_cache_usage);
  SetGauge(MetricId::kKvCacheBlocksTotal, stats.kv_blocks_total);
  SetGauge(MetricId::kKvCacheBlocksFree, stats.kv_blocks_free);
  SetGauge(MetricId::kEngineLastStepAgeSeconds,
           absl::ToDoubleSeconds(engine->Now() - std::max(stats.last_step_time, engine_set_)));
  SetGauge(MetricId::kDraining, stats.draining ? 1 : 0);
  SetCounter(*CounterFor(MetricId::kNumPreemptionsTotal),
             static_cast<double>(stats.num_preemptions));
  SetCounter(*CounterFor(MetricId::kPrefixCacheQueriesTotal),
             static_cast<double>(stats.prefix_cache_query_tokens));
  SetCounter(*CounterFor(MetricId::kPrefixCacheHitsTotal),
             static_cast<double>(stats.prefix_cache_hit_tokens));
  SetCounter(*CounterFor(MetricId::kCpuDecodePrefetchSwitchesTotal),
             static_cast<double>(OnlineStreamTuningSwitches()));
}

std::vector<prometheus::MetricFamily> Metrics::Collect() const {
  absl::MutexLock lock(&mu_);
  RefreshLocked();
  return registry_.Collect();
}

}  // namespace mlaserve
