#include "kernels/cpu/cpu_stream_tuning.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/check.h"
#include "kernels/cpu/cpu_features.h"

namespace mlaserve {
namespace {

// ahead_tiles in the low byte, non_temporal in bit 8.
std::atomic<uint32_t> g_tuning{1u | (1u << 8)};

uint32_t Encode(const StreamTuning& t) {
  return static_cast<uint32_t>(t.ahead_tiles) | (t.non_temporal ? 1u << 8 : 0u);
}

bool ParseTuning(const std::string& s, StreamTuning* out) {
  if (s == "none") {
    *out = {0, false};
    return true;
  }
  const size_t colon = s.find(':');
  if (colon == std::string::npos || colon + 2 != s.size()) return false;
  const std::string hint = s.substr(0, colon);
  const int n = s[colon + 1] - '0';
  if ((hint != "nta" && hint != "t1") || n < 1 || n > 4) return false;
  *out = {n, hint == "nta"};
  return true;
}

// Seconds of one single-row GEMM over `b` ([rows, k] bf16), each thread of `ctx` streaming its
// own slice of rows, by the dot products the backend's decode rows take (kFixedDot on a
// batch-invariant backend: the kernels differ in their accumulator chains, cpu_gemv_impl.h),
// with its activations (bf16 ones take VDPBF16PS where the build has it, a loop that the same
// prefetch can slow where it speeds the f32 one: docs/performance.md).
double TimePass(const CpuContext& ctx, const uint16_t* b, int64_t rows, int64_t k, const float* a,
                float* c) {
  GemmArgs g;
  g.a = a;
  g.lda = k;
  g.b = b;
  g.b_dtype = DType::kBF16;
  g.ldb = k;
  g.c = c;
  g.ldc = rows;
  g.m = 1;
  g.k = k;
  g.path = ctx.batch_invariant() ? GemmPath::kFixedDot : GemmPath::kBySize;
  g.a_bf16 = ctx.RoundsInputsFor(DType::kBF16);
  const auto start = std::chrono::steady_clock::now();
  ctx.Parallel(ctx.num_threads(), [&](int t, int team) {
    const Range slice = SplitRange(rows, team, t, 16);
    GemmArgs mine = g;
    mine.n_begin = slice.begin;
    mine.n_end = slice.end;
    if (slice.begin < slice.end) ctx.k().gemm(mine, ctx.GemmScratch(t));
  });
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

StreamTuningChoice ProbeStreamTuning(const CpuContext& ctx) {
  // At least 128 MiB of bf16 and three times the L3 in reach, so every pass comes from
  // memory (a 16-core slice of a server processor can hold 300 MiB of L3, where a fixed 128 MiB
  // read at cache speed), and a pass (3-15 ms) is long against the scheduler's and the
  // neighbours' noise.
  constexpr int64_t kK = 2048;
  constexpr size_t kHuge = size_t{2} << 20;
  constexpr int kRounds = 5;
  const size_t bytes = static_cast<size_t>(BytesBeyondLastLevelCache(int64_t{128} << 20));
  const int64_t rows = static_cast<int64_t>(bytes / (kK * sizeof(uint16_t)));
  void* mem = std::aligned_alloc(kHuge, bytes);
  MLASERVE_CHECK_MSG(mem != nullptr, "stream tuning probe allocation failed");
  madvise(mem, bytes, MADV_HUGEPAGE);  // as the backend's weight allocations (host_backend.cc)
  auto* b = static_cast<uint16_t*>(mem);
  std::fill(b, b + bytes / sizeof(uint16_t), uint16_t{0x3c00});  // bf16 0.0078125
  std::vector<float> a(kK, 1.0f), c(rows);

  constexpr StreamTuning kCandidates[] = {{0, false}, {1, true},  {4, true},
                                          {1, false}, {2, false}, {4, false}};
  constexpr int kCount = sizeof(kCandidates) / sizeof(kCandidates[0]);
  SetStreamTuning(kCandidates[1]);
  TimePass(ctx, b, rows, kK, a.data(), c.data());  // warm the pages and TLB
  // Rounds interleave the candidates, each round in a rotated order, so a slow spell of the
  // host (its bandwidth moves by 2x within minutes on shared machines) falls on all of them;
  // each is then judged by its median pass.
  double seconds[kCount][kRounds];
  for (int r = 0; r < kRounds; ++r) {
    for (int i = 0; i < kCount; ++i) {
      const int cand = (i + r) % kCount;
      SetStreamTuning(kCandidates[cand]);
      seconds[cand][r] = TimePass(ctx, b, rows, kK, a.data(), c.data());
    }
  }
  StreamTuningChoice choice{kCandidates[1], "probe", 0, ""};
  for (int cand = 0; cand < kCount; ++cand) {
    std::sort(seconds[cand], seconds[cand] + kRounds);
    const double gbps = static_cast<double>(bytes) / seconds[cand][kRounds / 2] / 1e9;
    if (gbps > choice.probe_gbps) {
      choice.probe_gbps = gbps;
      choice.tuning = kCandidates[cand];
    }
    char entry[48];
    std::snprintf(entry, sizeof(entry), "%s%s=%.1f", cand == 0 ? "" : " ",
                  StreamTuningName(kCandidates[cand]).c_str(), gbps);
    choice.probe_table += entry;
  }
  std::free(mem);
  SetStreamTuning(choice.tuning);
  return choice;
}

std::string StreamTuningName(const StreamTuning& t) {
  if (t.ahead_tiles == 0) return "none";
  return std::string(t.non_temporal ? "nta:" : "t1:") + std::to_string(t.ahead_tiles);
}

StreamTuning CurrentStreamTuning() {
  const uint32_t v = g_tuning.load(std::memory_order_relaxed);
  return {static_cast<int>(v & 0xff), (v >> 8) != 0};
}

void SetStreamTuning(const StreamTuning& t) {
  MLASERVE_CHECK(t.ahead_tiles >= 0 && t.ahead_tiles <= 4);
  g_tuning.store(Encode(t), std::memory_order_relaxed);
}

const StreamTuningChoice& TuneStreaming(const CpuContext& ctx) {
  static const StreamTuningChoice* const choice = [&] {
    auto* c = new StreamTuningChoice;
    const char* env = std::getenv("MLASERVE_CPU_PREFETCH");
    if (env != nullptr && ParseTuning(env, &c->tuning)) {
      c->source = "MLASERVE_CPU_PREFETCH";
    } else {
      *c = ProbeStreamTuning(ctx);
    }
    SetStreamTuning(c->tuning);
    return c;
  }();
  return *choice;
}

}  // namespace mlaserve
