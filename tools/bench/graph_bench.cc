// Decode step time on the CPU backend, eager vs replayed from a decode graph, and the host-side
// overhead of a replayed step (docs/performance.md, "Decode graphs: eager vs replay").
//
// Two ModelRunners on one CpuBackend hold the same model: one runs every step eagerly, the
// other has a graph per measured batch size. A step is ModelRunner::Execute over `batch`
// decodes, each with `context` tokens already cached: metadata build and its staging copy, the
// forward pass (eager dispatch or graph replay) and the logits copy to the host. Rounds
// alternate which runner goes first, each runner running `steps` timed steps per batch size
// and round; the report gives medians over every timed step.
//
// Host overhead, everything but the op bodies, measured two ways:
// - in the step: the step's wall time minus the wall time spent inside op bodies, as the
//   backend's op profile (MLASERVE_PROFILE=1, which this program sets) adds it up around each
//   op, the step timed by the same clock. What is left is planning, copies, dispatch, the
//   profiler's own bookkeeping between ops (one counter read and one slot write, see
//   kernels/op_profile.h) and any preemption that lands there: an upper bound, with the caches
//   as the ops left them.
// - alone: the same steps once the timed rounds are over, on a backend whose op bodies do
//   nothing (same model, same graphs): the step is then nothing but its overhead.
//
// With --read_logits every logit of a step is read (each row's largest found) before the next
// step's timer starts, as the engine's sampler reads them between two steps of the daemon.
// With --sample=greedy (or temperature, top_p, top_k) the engine's own sampler draws every row
// between steps, on the backend's threads as the engine does (SampleToken, with the token's
// logprob), and the report adds its median time per step.
//
//   mlaserve-graph-bench --model=/tmp/bench/lite-slice-4 [--batches=1,8,64] [--context=512]
//       [--rounds=5] [--steps=10] [--threads=0] [--deterministic] [--dtype=float32]
//       [--kv_cache_dtype=auto] [--read_logits | --sample=greedy|temperature|top_p|top_k]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "engine/model_loader.h"
#include "engine/model_runner.h"
#include "engine/sampler.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/no_op_backend.h"
#include "tools/bench/median.h"

ABSL_FLAG(std::string, model, "", "Hugging Face model directory");
ABSL_FLAG(std::string, batches, "1,8,64", "decode batch sizes to measure");
ABSL_FLAG(int, context, 512, "cached tokens per sequence");
ABSL_FLAG(int, rounds, 5, "alternating rounds");
ABSL_FLAG(int, steps, 10, "timed steps per runner, batch size and round");
ABSL_FLAG(int, threads, 0, "CPU backend threads (0 = every core)");
ABSL_FLAG(bool, deterministic, false,
          "batch-invariant kernels, as the daemon's --deterministic (its default) runs them");
ABSL_FLAG(std::string, dtype, "float32", "activation dtype, as the daemon's --dtype: float32 or bfloat16");
ABSL_FLAG(std::string, kv_cache_dtype, "auto",
          "latent KV cache dtype, as the daemon's --kv_cache_dtype: auto, float32 or bfloat16");
ABSL_FLAG(bool, read_logits, false,
          "read every logit of a step before the next one starts, untimed, as the engine's "
          "sampler does between two steps (by default steps run back to back)");

ABSL_FLAG(std::string, sample, "",
          "draw every row with the engine's sampler between steps, untimed in the step: greedy "
          "(temperature 0), temperature (1, no cut), top_p (temperature 1, top_p 0.9) or top_k "
          "(temperature 1, top_k 50); empty: no draw");

namespace mlaserve {
namespace {

using bench::Median;

constexpr int64_t kBlockSize = 64;

// Per-step samples of one runner at one batch size, in microseconds.
struct Samples {
  std::vector<double> step_us;
  std::vector<double> host_us;  // step minus op bodies
  std::vector<double> sample_us;  // the engine's sampler over the step's rows (--sample)
};

// `batch` sequences decoding one token each after `context` cached ones, on disjoint blocks.
struct DecodeStep {
  DecodeStep(int32_t batch, int32_t context) {
    const int32_t blocks = static_cast<int32_t>((context + 1 + kBlockSize - 1) / kBlockSize);
    tokens.resize(static_cast<size_t>(batch));
    tables.resize(static_cast<size_t>(batch));
    for (int32_t i = 0; i < batch; ++i) {
      for (int32_t t = 0; t <= context; ++t) tokens[i].push_back((i * 7919 + t * 104729) % 100000);
      for (int32_t b = 0; b < blocks; ++b) tables[i].push_back(1 + i * blocks + b);
      seqs.push_back({.token_ids = tokens[i], .start_position = context, .num_new_tokens = 1,
                      .block_table = tables[i], .needs_logits = true});
    }
  }
  std::vector<std::vector<int32_t>> tokens, tables;
  std::vector<StepSequence> seqs;
};

absl::StatusOr<std::unique_ptr<ModelRunner>> Load(Backend* backend, const ModelOptions& options,
                                                  const std::vector<int32_t>& buckets) {
  absl::StatusOr<std::unique_ptr<DeepseekModel>> model =
      LoadDeepseekModel(absl::GetFlag(FLAGS_model), backend, options);
  if (!model.ok()) return model.status();
  return ModelRunner::Create(std::move(*model), backend, buckets);
}

// Each row's largest logit, as a greedy sampler finds it: every value is read once.
void ReadLogits(const StepLogits& logits) {
  const auto vocab = static_cast<size_t>(logits.vocab_size);
  float sum = 0.0f;
  for (size_t row = 0; row + vocab <= logits.values.size(); row += vocab) {
    sum += *std::max_element(logits.values.begin() + row, logits.values.begin() + row + vocab);
  }
  asm volatile("" : : "x"(sum));  // the reads are kept for their effect on the caches alone
}

// Draws every row of `logits` with the engine's sampler on the backend's threads, as
// EngineCore::SampleTokens does (each lane with its own scratch).
class RowSampler {
 public:
  RowSampler(Backend& backend, const SamplingOptions& options)
      : backend_(backend), options_(options),
        scratch_(static_cast<size_t>(backend.host_lanes())) {}

  void Draw(const StepLogits& logits) {
    const auto vocab = static_cast<size_t>(logits.vocab_size);
    const auto rows = static_cast<int64_t>(logits.values.size() / vocab);
    tokens_.resize(static_cast<size_t>(rows));
    backend_.RunHostTasks(rows, [&](int64_t row, int lane) {
      const absl::Span<const float> values =
          absl::MakeConstSpan(logits.values).subspan(static_cast<size_t>(row) * vocab, vocab);
      tokens_[static_cast<size_t>(row)] =
          SampleToken(values, options_, {}, {}, /*seed=*/static_cast<uint64_t>(row), 0,
                      scratch_[static_cast<size_t>(lane)])
              .token;
    });
  }

 private:
  Backend& backend_;
  const SamplingOptions options_;
  std::vector<SamplerScratch> scratch_;
  std::vector<int32_t> tokens_;
};

// Runs `steps` timed steps (after one untimed) and appends their samples.
void Measure(ModelRunner& runner, const HostBackend& backend, const DecodeStep& step, int steps,
             RowSampler* sampler, Samples* out) {
  StepLogits logits;
  if (!runner.Execute(step.seqs, &logits).ok()) std::abort();
  // The step is timed by the profile's own clock, so the op time is subtracted in one unit.
  const OpProfile& profile = *backend.profile();
  const bool read_logits = absl::GetFlag(FLAGS_read_logits);
  for (int i = 0; i < steps; ++i) {
    if (read_logits) ReadLogits(logits);
    if (sampler != nullptr) {
      const int64_t sample_start = profile.Now();
      sampler->Draw(logits);
      out->sample_us.push_back(1e-3 * profile.Nanos(profile.Now() - sample_start));
    }
    const int64_t ops_before = profile.total_ticks();
    const int64_t start = profile.Now();
    if (!runner.Execute(step.seqs, &logits).ok()) std::abort();
    const int64_t step_ticks = profile.Now() - start;
    const int64_t op_ticks = profile.total_ticks() - ops_before;
    out->step_us.push_back(1e-3 * profile.Nanos(step_ticks));
    out->host_us.push_back(1e-3 * profile.Nanos(step_ticks - op_ticks));
  }
}

int Run() {
  std::vector<int32_t> batches;
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_batches), ',')) {
    int32_t b = 0;
    if (!absl::SimpleAtoi(part, &b) || b <= 0) {
      std::fprintf(stderr, "--batches: \"%s\" is not a batch size\n", std::string(part).c_str());
      return 1;
    }
    batches.push_back(b);
  }
  std::sort(batches.begin(), batches.end());
  const int32_t context = absl::GetFlag(FLAGS_context);
  const int32_t max_batch = batches.back();
  const int64_t blocks_per_seq = (context + 1 + kBlockSize - 1) / kBlockSize;

  std::optional<SamplingOptions> sampling;
  const std::string sample = absl::GetFlag(FLAGS_sample);
  if (sample == "greedy") {
    sampling = SamplingOptions{.temperature = 0.0f};
  } else if (sample == "temperature") {
    sampling = SamplingOptions{.temperature = 1.0f};
  } else if (sample == "top_p") {
    sampling = SamplingOptions{.temperature = 1.0f, .top_p = 0.9f};
  } else if (sample == "top_k") {
    sampling = SamplingOptions{.temperature = 1.0f, .top_k = 50};
  } else if (!sample.empty()) {
    std::fprintf(stderr, "--sample must be greedy, temperature, top_p or top_k, not %s\n",
                 sample.c_str());
    return 1;
  }

  setenv("MLASERVE_PROFILE", "1", 1);
  const std::string dtype = absl::GetFlag(FLAGS_dtype);
  const std::optional<DType> activation = ActivationDTypeFromName(dtype);
  if (!activation.has_value()) {
    std::fprintf(stderr, "--dtype must be float32 or bfloat16, not %s\n", dtype.c_str());
    return 1;
  }
  CpuBackend backend(absl::GetFlag(FLAGS_threads), absl::GetFlag(FLAGS_deterministic),
                     *activation);
  const std::optional<DType> cache =
      KvCacheDTypeFromName(absl::GetFlag(FLAGS_kv_cache_dtype), *activation);
  if (!cache.has_value()) {
    std::fprintf(stderr, "--kv_cache_dtype must be auto, float32 or bfloat16\n");
    return 1;
  }
  ModelOptions options;
  options.kv_cache_dtype = *cache;
  options.max_num_seqs = max_batch;
  options.max_num_tokens = std::max<int64_t>(max_batch, 256);
  options.block_size = kBlockSize;
  options.num_kv_blocks = 1 + max_batch * blocks_per_seq;
  auto eager = Load(&backend, options, {});
  auto graphs = Load(&backend, options, batches);
  if (!eager.ok() || !graphs.ok()) {
    const absl::Status& error = eager.ok() ? graphs.status() : eager.status();
    std::fprintf(stderr, "%s\n", std::string(error.message()).c_str());
    return 1;
  }
  std::optional<RowSampler> sampler;
  if (sampling.has_value()) sampler.emplace(backend, *sampling);
  RowSampler* const draw = sampler.has_value() ? &*sampler : nullptr;
  std::printf("threads %d, context %d tokens, %d rounds of %d steps per runner and batch\n",
              backend.num_threads(), context, absl::GetFlag(FLAGS_rounds),
              absl::GetFlag(FLAGS_steps));

  std::vector<Samples> eager_samples(batches.size()), replay_samples(batches.size());
  for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
    for (size_t i = 0; i < batches.size(); ++i) {
      const DecodeStep step(batches[i], context);
      const int steps = absl::GetFlag(FLAGS_steps);
      if (round % 2 == 0) {
        Measure(**eager, backend, step, steps, draw, &eager_samples[i]);
        Measure(**graphs, backend, step, steps, draw, &replay_samples[i]);
      } else {
        Measure(**graphs, backend, step, steps, draw, &replay_samples[i]);
        Measure(**eager, backend, step, steps, draw, &eager_samples[i]);
      }
    }
  }
  if ((*graphs)->eager_steps().decode != 0) {
    std::fprintf(stderr, "a step meant for a graph ran eagerly\n");
    return 1;
  }
  eager->reset();
  graphs->reset();

  // The same replayed steps with no op bodies: median of `kAloneSteps` per batch size.
  constexpr int kAloneSteps = 2000;
  NoOpBackend no_op;
  auto alone = Load(&no_op, options, batches);
  if (!alone.ok()) {
    std::fprintf(stderr, "%s\n", std::string(alone.status().message()).c_str());
    return 1;
  }
  std::vector<double> alone_us(batches.size());
  for (size_t i = 0; i < batches.size(); ++i) {
    const DecodeStep step(batches[i], context);
    std::vector<double> us;
    StepLogits logits;
    for (int k = 0; k < kAloneSteps; ++k) {
      const auto start = std::chrono::steady_clock::now();
      if (!(*alone)->Execute(step.seqs, &logits).ok()) std::abort();
      us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() -
                                                            start)
                       .count());
    }
    alone_us[i] = Median(us);
  }

  std::printf("%6s %10s %10s %13s %17s %18s %18s%s\n", "batch", "eager ms", "replay ms",
              "replay/eager", "eager host (step)", "replay host (step)", "replay host (alone)",
              draw != nullptr ? "   sample ms" : "");
  for (size_t i = 0; i < batches.size(); ++i) {
    const double e = Median(eager_samples[i].step_us), r = Median(replay_samples[i].step_us);
    std::printf("%6d %10.3f %10.3f %13.3f %14.1f us %15.1f us %15.2f us", batches[i], e / 1e3,
                r / 1e3, r / e, Median(eager_samples[i].host_us),
                Median(replay_samples[i].host_us), alone_us[i]);
    if (draw != nullptr) {
      std::vector<double> both = eager_samples[i].sample_us;
      both.insert(both.end(), replay_samples[i].sample_us.begin(),
                  replay_samples[i].sample_us.end());
      std::printf(" %12.3f", Median(both) / 1e3);
    }
    std::printf("\n");
  }
  return 0;
}

}  // namespace
}  // namespace mlaserve

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return mlaserve::Run();
}
