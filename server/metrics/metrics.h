// Metrics: the server's Prometheus metrics (contracts/metrics.md, docs/metrics.md), created from
// the table in server/metrics/metrics_table.h. Request events arrive as a RequestObserver, engine steps
// through OnStep (EngineOptions::on_step), and gauges and the engine's own counters are read
// from the engine's stats when a scrape collects them.
//
// Thread-safety: every method is thread-safe.
#ifndef MLASERVE_SERVER_METRICS_METRICS_H_
#define MLASERVE_SERVER_METRICS_METRICS_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/engine.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "server/metrics/metrics_table.h"
#include "server/metrics/request_observer.h"
#include "server/common/serving_engine.h"

namespace mlaserve {

struct MetricsOptions {
  std::vector<double> ttft_buckets;         // empty: the table's
  std::vector<double> inter_token_buckets;  // empty: the table's
  // Also export the gauges routers read under vLLM's names (MetricSpec::vllm_names).
  bool vllm_names = false;
};

class Metrics final : public RequestObserver, public prometheus::Collectable {
 public:
  // Creates every metric of the table; labelled counters start at 0 for each label value.
  explicit Metrics(const MetricsOptions& options);

  // The engine the gauges describe. Until then the engine's gauges and counters read 0. The
  // caller keeps the engine alive; `this` must outlive an engine whose on_step calls OnStep.
  void SetEngine(std::weak_ptr<const ServingEngine> engine);

  // EngineOptions::on_step: step, graph replay and eager counters, the step histograms and the
  // inter-token latencies. Cheap: no allocation once each graph batch size was seen.
  void OnStep(const StepObservation& step);

  void OnAdmitted(int32_t num_prompt_tokens) override;
  void OnTokensSent(int32_t num_tokens) override;
  void OnCompleted(const Completion& completion) override;
  void OnFailed(absl::StatusCode code) override;

  // Reads the engine's stats into the gauges and engine counters, then collects everything.
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  template <typename T>
  struct Series {
    std::vector<prometheus::Family<T>*> families;  // the metric, then its vLLM names
    // Per label value in table order; gauges: that for each family in turn.
    std::vector<T*> values;
  };

  void Create(const MetricSpec& spec, const MetricsOptions& options);
  // The series of `id` whose (single) label has `label_value`, or nullptr when the table lists
  // no such value; the unlabelled series when `label_value` is empty.
  template <typename T>
  static T* Pick(const Series<T>& series, MetricId id, std::string_view label_value);
  prometheus::Counter* CounterFor(MetricId id, std::string_view label_value = {}) const;
  prometheus::Histogram* HistogramFor(MetricId id, std::string_view label_value = {}) const;
  void SetGauge(MetricId id, double value) const;
  void RefreshLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  prometheus::Registry registry_;
  std::array<Series<prometheus::Counter>, kNumMetrics> counters_;
  std::array<Series<prometheus::Gauge>, kNumMetrics> gauges_;
  std::array<Series<prometheus::Histogram>, kNumMetrics> histograms_;

  mutable absl::Mutex mu_;
  std::weak_ptr<const ServingEngine> engine_ ABSL_GUARDED_BY(mu_);
  absl::Time engine_set_ ABSL_GUARDED_BY(mu_);  // engine clock when SetEngine was called
  absl::flat_hash_map<int32_t, prometheus::Counter*> graph_replays_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mlaserve

#endif  // MLASERVE_SERVER_METRICS_METRICS_H_
