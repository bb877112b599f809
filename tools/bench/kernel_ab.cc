// mlaserve-kernel-ab: CPU kernel builds side by side in one process, for hosts whose speed moves
// between runs (docs/performance.md: some machines swing by 1.5-2x between adjacent runs of one
// binary). One CpuBackend per build, each on the same number of threads and the same inputs;
// round after round every case runs on every build in a rotating order (a warm call, then the
// median of three timed calls), and the report gives each build's median time over the rounds
// and the median, lowest and highest of its per-round ratio to the first build: a slow spell
// lands on both sides of a ratio instead of on one run.
//
// Cases: the prompt GEMMs of a 512-token prefill at DeepSeek-V2-Lite's shapes (bf16 weights,
// m x n x k), one expert's gate ‖ up and down projections of 48 rows, the two largest GEMMs of
// a decode step of one row and of 16 (the lm_head, also of 4 rows, and the dense layer's gate ‖
// up), the dense layer's down projection of one row (a weight deeper than one depth pass), and
// the routed experts of 1, 16 and 512 tokens (uniform routing, as mlaserve-kernel-bench's
// BM_MoeExperts). With --deterministic the backends are batch-invariant and the cases of up to
// 16 rows or tokens are decode rows, as in the daemon's default decode steps. The decode
// prefetch is the daemon's: MLASERVE_CPU_PREFETCH (none | nta:N | t1:N), or unset the start-up
// probe's choice, held fixed for the run (the report's first line names it).
//
//   mlaserve-kernel-ab --builds=amx_bf16,avx512_bf16 [--threads=0] [--dtype=float32]
//       [--deterministic] [--seconds=30] [--cases=512x2048x2048,experts512]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_stream_tuning.h"
#include "kernels/dtype.h"
#include "tools/bench/bench_inputs.h"
#include "tools/bench/median.h"

ABSL_FLAG(std::string, builds, "",
          "kernel builds to compare, comma-separated (scalar, avx2, avx512, avx512_bf16, "
          "amx_bf16); the first is the reference of the ratios");
ABSL_FLAG(int, threads, 0, "threads of every backend (0 = every core)");
ABSL_FLAG(std::string, dtype, "float32", "activation dtype, as the daemon's --dtype");
ABSL_FLAG(double, seconds, 30, "rounds are started until this much time has passed");
ABSL_FLAG(std::string, cases, "", "cases to run, comma-separated (default: all)");
ABSL_FLAG(bool, deterministic, false,
          "batch-invariant backends, as the daemon's --deterministic (its default) runs them");

namespace mlaserve {
namespace {

using bench::Buffer;
using bench::kExpertInter;
using bench::kExperts;
using bench::kHidden;
using bench::kTopK;
using bench::Median;

// Cases of up to this many rows (tokens) are decode rows: a batch-invariant backend takes them
// through the decode path the daemon's steps take (GemmParams::decode_rows), not the prompt's.
constexpr int64_t kDecodeRows = 16;

struct Case {
  std::string name;
  double flops;
  std::function<void(Backend&)> run;
};

// Owns the inputs of every case (allocated on `alloc`, host memory that every CPU backend reads).
class Cases {
 public:
  explicit Cases(Backend& alloc) : alloc_(alloc) {
    for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{512, 2048, 2048},
                           {512, 10944, 2048},
                           {512, 2048, 10944},
                           {512, 3072, 2048},
                           {48, 2 * kExpertInter, kHidden},
                           {48, kHidden, kExpertInter},
                           {1, 102400, kHidden},
                           {1, 21888, kHidden},
                           {4, 102400, kHidden},
                           {16, 102400, kHidden},
                           {16, 21888, kHidden},
                           {1, kHidden, 10944}}) {
      AddGemm(m, n, k);
    }
    for (int64_t tokens : {1, 16, 512}) AddExperts(tokens);
  }
  std::vector<Case>& all() { return cases_; }

 private:
  Buffer* Keep(Buffer buffer) {
    buffers_.push_back(std::make_unique<Buffer>(std::move(buffer)));
    return buffers_.back().get();
  }

  void AddGemm(int64_t m, int64_t n, int64_t k) {
    const Buffer* a = Keep(Buffer(alloc_, DType::kF32, {m, k}, 1));
    const Buffer* b = Keep(Buffer(alloc_, DType::kBF16, {n, k}, 2));
    const Buffer* out = Keep(Buffer(alloc_, DType::kF32, {m, n}));
    cases_.push_back({absl::StrCat(m, "x", n, "x", k), 2.0 * m * n * k, [=](Backend& cpu) {
                        cpu.Gemm({.a = a->view,
                                  .b = b->view,
                                  .out = out->view,
                                  .decode_rows = m <= kDecodeRows ? m : 0});
                      }});
  }

  // A single token rotates over 16 routings (as mlaserve-kernel-bench's BM_MoeExperts/1), so
  // that its experts come from memory as in decode, not from an L3 that kept the last call's.
  void AddExperts(int64_t tokens) {
    std::mt19937 rng(4);
    const int64_t len = bench::Routing::AlignedLength(tokens);
    if (w13_ == nullptr) {  // one set of expert weights for every case
      w13_ = Keep(Buffer(alloc_, DType::kBF16, {kExperts, 2 * kExpertInter, kHidden}, 6));
      w2_ = Keep(Buffer(alloc_, DType::kBF16, {kExperts, kHidden, kExpertInter}, 7));
    }
    MoeExpertsParams params{
        .x = Keep(Buffer(alloc_, DType::kF32, {tokens, kHidden}, 5))->view,
        .w13 = w13_->view,
        .w2 = w2_->view,
        .topk_weights = Keep(Buffer(alloc_, DType::kF32, {tokens, kTopK}, 8))->view,
        .block_size = bench::kAlignBlock,
        .workspace_gate_up = Keep(Buffer(alloc_, DType::kF32, {len, 2 * kExpertInter}))->view,
        .workspace_act = Keep(Buffer(alloc_, DType::kF32, {len, kExpertInter}))->view,
        .workspace_down = Keep(Buffer(alloc_, DType::kF32, {len, kHidden}))->view,
        .out = Keep(Buffer(alloc_, DType::kF32, {tokens, kHidden}))->view,
        .decode_tokens = tokens <= kDecodeRows ? tokens : 0};
    auto rotation = std::make_shared<std::vector<MoeExpertsParams>>();
    for (int i = 0; i < (tokens == 1 ? 16 : 1); ++i) {
      routings_.push_back(std::make_unique<bench::Routing>(alloc_, tokens, rng));
      const bench::Routing& r = *routings_.back();
      params.sorted_ids = r.sorted.view;
      params.block_expert_ids = r.blocks.view;
      params.expert_offsets = r.offsets.view;
      params.num_tokens_post_pad = r.post_pad.view;
      rotation->push_back(params);
    }
    const double flops = 2.0 * tokens * kTopK * 3.0 * kExpertInter * kHidden;
    cases_.push_back({absl::StrCat("experts", tokens), flops,
                      [rotation, next = size_t{0}](Backend& cpu) mutable {
                        cpu.MoeExperts((*rotation)[next++ % rotation->size()]);
                      }});
  }

  Backend& alloc_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  std::vector<std::unique_ptr<bench::Routing>> routings_;
  const Buffer* w13_ = nullptr;
  const Buffer* w2_ = nullptr;
  std::vector<Case> cases_;
};

double TimedMs(const Case& c, Backend& cpu) {
  const auto start = std::chrono::steady_clock::now();
  c.run(cpu);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

int Run() {
  const std::optional<DType> dtype = ActivationDTypeFromName(absl::GetFlag(FLAGS_dtype));
  if (!dtype.has_value()) {
    std::fprintf(stderr, "--dtype must be float32 or bfloat16\n");
    return 1;
  }
  std::vector<std::string> names;
  std::vector<std::unique_ptr<CpuBackend>> backends;
  const std::vector<std::string> requested = absl::StrSplit(absl::GetFlag(FLAGS_builds), ',');
  for (const std::string& name : requested) {
    const std::optional<CpuIsa> isa = CpuIsaFromName(name);
    if (!isa.has_value()) {
      std::fprintf(stderr, "--builds: \"%s\" is not a kernel build\n", name.c_str());
      return 1;
    }
    if (*isa > DetectCpuIsa()) {
      std::fprintf(stderr, "--builds: this processor cannot run %s (its best is %s)\n",
                   name.c_str(), std::string(CpuIsaName(DetectCpuIsa())).c_str());
      return 1;
    }
    names.push_back(name);
    backends.push_back(std::make_unique<CpuBackend>(GetCpuKernels(*isa),
                                                    absl::GetFlag(FLAGS_threads),
                                                    absl::GetFlag(FLAGS_deterministic), *dtype));
  }
  if (backends.size() < 2) {
    std::fprintf(stderr, "--builds: name at least two kernel builds\n");
    return 1;
  }
  setenv("MLASERVE_CPU_PREFETCH", "probe", /*overwrite=*/0);
  TuneStreaming(backends[0]->context());
  Cases all(*backends[0]);
  std::vector<Case> cases;
  const std::string wanted = absl::GetFlag(FLAGS_cases);
  for (const Case& c : all.all()) {
    if (wanted.empty() || absl::StrContains(absl::StrCat(",", wanted, ","),
                                            absl::StrCat(",", c.name, ","))) {
      cases.push_back(c);
    }
  }
  if (cases.empty()) {
    std::fprintf(stderr, "--cases: none of \"%s\" is a case\n", wanted.c_str());
    return 1;
  }

  const size_t builds = backends.size();
  // ms[c][b], ratio[c][b]: one entry per round.
  std::vector<std::vector<std::vector<double>>> ms(cases.size(),
                                                   std::vector<std::vector<double>>(builds));
  auto ratio = ms;
  const auto start = std::chrono::steady_clock::now();
  int rounds = 0;
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() <
         absl::GetFlag(FLAGS_seconds)) {
    for (size_t c = 0; c < cases.size(); ++c) {
      std::vector<double> median(builds);
      for (size_t i = 0; i < builds; ++i) {
        const size_t b = (i + rounds) % builds;
        cases[c].run(*backends[b]);
        median[b] = Median({TimedMs(cases[c], *backends[b]), TimedMs(cases[c], *backends[b]),
                            TimedMs(cases[c], *backends[b])});
      }
      for (size_t b = 0; b < builds; ++b) {
        ms[c][b].push_back(median[b]);
        ratio[c][b].push_back(median[0] / median[b]);
      }
    }
    ++rounds;
  }

  std::printf(
      "cpu %s; threads %d; dtype %s; decode prefetch %s; %d rounds; ratio = %s's time / the "
      "build's\n",
      GetCpuInfo().model.c_str(), backends[0]->num_threads(), absl::GetFlag(FLAGS_dtype).c_str(),
      StreamTuningName(CurrentStreamTuning()).c_str(), rounds, names[0].c_str());
  std::printf("%-18s %-12s %10s %10s %8s %15s\n", "case", "build", "median ms", "GFLOP/s",
              "ratio", "ratio min..max");
  for (size_t c = 0; c < cases.size(); ++c) {
    for (size_t b = 0; b < builds; ++b) {
      const double t = Median(ms[c][b]);
      const auto [lo, hi] = std::minmax_element(ratio[c][b].begin(), ratio[c][b].end());
      std::printf("%-18s %-12s %10.3f %10.1f %8.2f %7.2f..%.2f\n", cases[c].name.c_str(),
                  names[b].c_str(), t, cases[c].flops / t * 1e-6, Median(ratio[c][b]), *lo, *hi);
    }
  }
  return 0;
}

}  // namespace
}  // namespace mlaserve

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return mlaserve::Run();
}
