// mlaserve-kernel-bench: the CPU backend's hot kernels at DeepSeek-V2-Lite shapes (hidden 2048,
// dense intermediate 10944, 64 experts x 1408 top-6). Decode GEMVs report the weight stream
// rate (GB/s, weights read once per call); prefill GEMMs and MoE report GFLOP/s (2 flops per
// multiply-add); MLA decode reports both. Results and the commands that produced them:
// docs/performance.md.
//
//   mlaserve-kernel-bench [--benchmark_filter=...] [--benchmark_repetitions=N]
// Environment: MLASERVE_BENCH_THREADS (default 0 = all cores), MLASERVE_CPU_ISA,
// MLASERVE_BENCH_DTYPE (activation dtype, as --dtype: float32 by default, or bfloat16),
// MLASERVE_CPU_PREFETCH (unset: the start-up probe's choice, held fixed for the whole run; the
// online tuner would otherwise try other candidates on the decode rows being timed).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "benchmark/benchmark.h"
#include "kernels/backend.h"
#include "kernels/check.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/cpu_stream_tuning.h"
#include "kernels/dtype.h"
#include "tools/bench/bench_inputs.h"

namespace mlaserve {
namespace {

using bench::Buffer;
using bench::kAlignBlock;
using bench::kDenseInter;
using bench::kExpertInter;
using bench::kExperts;
using bench::kHidden;
using bench::kTopK;
using bench::Routing;

Backend& Cpu() {
  static const std::unique_ptr<Backend> backend = [] {
    const char* env = std::getenv("MLASERVE_BENCH_THREADS");
    const char* dtype = std::getenv("MLASERVE_BENCH_DTYPE");
    const bool bf16 = dtype != nullptr && std::string_view(dtype) == "bfloat16";
    // MLASERVE_BENCH_DETERMINISTIC=1: the batch-invariant backend of `--deterministic`, where
    // BM_Gemm's rows up to 16 are decode rows (the fixed-order dot-product path).
    const char* det = std::getenv("MLASERVE_BENCH_DETERMINISTIC");
    const bool invariant = det != nullptr && std::string_view(det) == "1";
    return MakeCpuBackend(env != nullptr ? std::atoi(env) : 0, invariant,
                          bf16 ? DType::kBF16 : DType::kF32);
  }();
  return *backend;
}

// Args: m, n, k. Weights bf16 [n, k]. Decode shapes (m <= 16) rotate over enough copies of the
// weights to fill 512 MiB or three times the L3 in reach (BytesBeyondLastLevelCache), so that
// every call streams them from memory as a decode step does, not from an L3 that holds a copy.
void BM_Gemm(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const int64_t weight_bytes = n * k * 2;
  const int64_t rotation = BytesBeyondLastLevelCache(int64_t{512} << 20);
  const int64_t copies = m <= 16 ? (rotation + weight_bytes - 1) / weight_bytes : 1;
  std::vector<Buffer> b;
  for (int64_t i = 0; i < copies; ++i) {
    b.emplace_back(Cpu(), DType::kBF16, std::initializer_list<int64_t>{n, k}, 2 + i);
  }
  Buffer a(Cpu(), DType::kF32, {m, k}, 1), out(Cpu(), DType::kF32, {m, n});
  const int64_t decode_rows = m <= 16 ? m : 0;
  // First touch of out, off the clock.
  Cpu().Gemm({.a = a.view, .b = b[0].view, .out = out.view, .decode_rows = decode_rows});
  int64_t next = 0;
  for (auto _ : state) {
    Cpu().Gemm({.a = a.view, .b = b[next].view, .out = out.view, .decode_rows = decode_rows});
    next = next + 1 == copies ? 0 : next + 1;
    benchmark::DoNotOptimize(out.view.data());
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(weight_bytes) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * m * n * k * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

void GemmArgs(benchmark::internal::Benchmark* b) {
  for (int64_t m : {1, 2, 4, 8, 16}) {
    b->Args({m, 2 * kDenseInter, kHidden});  // dense gate ‖ up
    b->Args({m, kHidden, kDenseInter});      // dense down
  }
  b->Args({1, 102400, kHidden});  // lm_head
  b->Args({48, 2 * kExpertInter, kHidden});  // one expert's gate ‖ up in a 512-token prefill
  b->Args({48, kHidden, kExpertInter});      // its down projection
  for (int64_t n : {kHidden, kDenseInter}) b->Args({512, n, kHidden});
  b->Args({512, kHidden, kDenseInter});
  // A 512-token prompt's attention projections: q, the latent kv_a (and rope key), kv_b.
  b->Args({512, 16 * 192, kHidden});
  b->Args({512, 512 + 64, kHidden});
  b->Args({512, 16 * 256, 512});
}
BENCHMARK(BM_Gemm)->Apply(GemmArgs)->UseRealTime()->Unit(benchmark::kMillisecond);

// Arg: tokens. Routing is uniform random, as the lite-slice router roughly is; a single token
// rotates over 16 routings, so that its experts come from memory as in decode.
void BM_MoeExperts(benchmark::State& state) {
  const int64_t tokens = state.range(0);
  const int64_t pairs = tokens * kTopK;
  const int64_t len = Routing::AlignedLength(tokens);
  std::mt19937 rng(4);
  std::vector<Routing> routings;
  for (int i = 0; i < (tokens == 1 ? 16 : 1); ++i) routings.emplace_back(Cpu(), tokens, rng);
  Buffer x(Cpu(), DType::kF32, {tokens, kHidden}, 5);
  Buffer w13(Cpu(), DType::kBF16, {kExperts, 2 * kExpertInter, kHidden}, 6);
  Buffer w2(Cpu(), DType::kBF16, {kExperts, kHidden, kExpertInter}, 7);
  Buffer weights(Cpu(), DType::kF32, {tokens, kTopK}, 8);
  Buffer gate_up(Cpu(), DType::kF32, {len, 2 * kExpertInter});
  Buffer act(Cpu(), DType::kF32, {len, kExpertInter}), down(Cpu(), DType::kF32, {len, kHidden});
  Buffer out(Cpu(), DType::kF32, {tokens, kHidden});
  std::vector<MoeExpertsParams> params;
  int64_t active = 0;
  for (const Routing& r : routings) {
    params.push_back({.x = x.view,
                      .w13 = w13.view,
                      .w2 = w2.view,
                      .topk_weights = weights.view,
                      .sorted_ids = r.sorted.view,
                      .block_expert_ids = r.blocks.view,
                      .expert_offsets = r.offsets.view,
                      .num_tokens_post_pad = r.post_pad.view,
                      .block_size = kAlignBlock,
                      .workspace_gate_up = gate_up.view,
                      .workspace_act = act.view,
                      .workspace_down = down.view,
                      .out = out.view,
                      .decode_tokens = tokens <= 16 ? tokens : 0});
    active += r.active_experts;
  }
  Cpu().MoeExperts(params[0]);  // first touch of the workspaces, off the clock
  size_t next = 0;
  for (auto _ : state) {
    Cpu().MoeExperts(params[next]);
    next = next + 1 == params.size() ? 0 : next + 1;
    benchmark::DoNotOptimize(out.view.data());
  }
  const double expert_params = 3.0 * kExpertInter * kHidden;
  const double active_per_call = static_cast<double>(active) / static_cast<double>(params.size());
  state.counters["GB/s"] = benchmark::Counter(active_per_call * expert_params * 2 * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * pairs * expert_params * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_MoeExperts)->Arg(1)->Arg(16)->Arg(512)->UseRealTime()->Unit(benchmark::kMillisecond);

// Args: heads, cached tokens. One sequence (positions split over the threads), bf16 cache of
// 64-token blocks; GB/s counts the cache rows read.
void BM_MlaDecode(benchmark::State& state) {
  const int64_t heads = state.range(0), len = state.range(1);
  constexpr int64_t kRank = 512, kRope = 64, kBlock = 64;
  const int64_t blocks = (len + kBlock - 1) / kBlock;
  std::vector<int32_t> table(blocks);
  for (int64_t i = 0; i < blocks; ++i) table[i] = static_cast<int32_t>(blocks - 1 - i);
  Buffer q_latent(Cpu(), DType::kF32, {1, heads, kRank}, 10);
  Buffer q_pe(Cpu(), DType::kF32, {1, heads, kRope}, 11);
  Buffer cache(Cpu(), DType::kBF16, {blocks, kBlock, kRank + kRope}, 12);
  Buffer tables(Cpu(), {1, blocks}, table), lens(Cpu(), {1}, {static_cast<int32_t>(len)});
  Buffer out(Cpu(), DType::kF32, {1, heads, kRank});
  const MlaDecodeParams params{.q_latent = q_latent.view,
                               .q_pe = q_pe.view,
                               .kv_cache = cache.view,
                               .block_tables = tables.view,
                               .seq_lens = lens.view,
                               .softmax_scale = 0.07f,
                               .out = out.view};
  for (auto _ : state) {
    Cpu().MlaDecode(params);
    benchmark::DoNotOptimize(out.view.data());
  }
  state.counters["GB/s"] =
      benchmark::Counter(static_cast<double>(len * (kRank + kRope) * 2) * 1e-9,
                         benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * heads * len * (2 * kRank + kRope) * 1e-9,
                         benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_MlaDecode)
    ->Args({16, 1000})
    ->Args({16, 4000})
    ->Args({128, 4000})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace mlaserve

// The run's context names what decides the figures: processor, kernel build, threads, L3 and
// the decode prefetch the start-up probe chose (the backend is made before the first benchmark).
int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  setenv("MLASERVE_CPU_PREFETCH", "probe", /*overwrite=*/0);
  const auto& cpu = dynamic_cast<const mlaserve::CpuBackend&>(mlaserve::Cpu());
  const mlaserve::CpuInfo& info = mlaserve::GetCpuInfo();
  benchmark::AddCustomContext("cpu_model", info.model);
  benchmark::AddCustomContext("kernel_isa", std::string(mlaserve::CpuIsaName(cpu.isa())));
  benchmark::AddCustomContext("threads", std::to_string(cpu.num_threads()));
  benchmark::AddCustomContext("l3", std::to_string(info.l3_bytes >> 20) + " MiB x " +
                                        std::to_string(info.l3_instances));
  benchmark::AddCustomContext("decode_prefetch",
                              mlaserve::StreamTuningName(mlaserve::CurrentStreamTuning()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
