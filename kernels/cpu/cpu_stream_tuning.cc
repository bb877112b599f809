#include "kernels/cpu/cpu_stream_tuning.h"

#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <cstdint>
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

// Seconds of the fastest of `passes` single-row GEMMs over `b` ([rows, k] bf16), each thread of
// `ctx` streaming its own slice of rows.
double BestPass(const CpuContext& ctx, const uint16_t* b, int64_t rows, int64_t k, const float* a,
                float* c, int passes) {
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
  double best = 1e30;
  for (int i = 0; i < passes; ++i) {
    const auto start = std::chrono::steady_clock::now();
    ctx.Parallel(ctx.num_threads(), [&](int t, int team) {
      const Range slice = SplitRange(rows, team, t, 16);
      GemmArgs mine = g;
      mine.n_begin = slice.begin;
      mine.n_end = slice.end;
      if (slice.begin < slice.end) ctx.k().gemm(mine, ctx.GemmScratch(t));
    });
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (s < best) best = s;
  }
  return best;
}

}  // namespace

StreamTuningChoice ProbeStreamTuning(const CpuContext& ctx) {
  constexpr int64_t kK = 2048, kRows = 16384;  // 64 MiB of bf16: well beyond any L3 slice
  constexpr size_t kBytes = kK * kRows * sizeof(uint16_t);
  constexpr size_t kHuge = size_t{2} << 20;
  void* mem = std::aligned_alloc(kHuge, kBytes);
  MLASERVE_CHECK_MSG(mem != nullptr, "stream tuning probe allocation failed");
  madvise(mem, kBytes, MADV_HUGEPAGE);  // as the backend's weight allocations (host_backend.cc)
  auto* b = static_cast<uint16_t*>(mem);
  for (size_t i = 0; i < kBytes / sizeof(uint16_t); ++i) b[i] = 0x3c00;  // bf16 0.0078125
  std::vector<float> a(kK, 1.0f), c(kRows);

  const StreamTuning candidates[] = {{0, false}, {1, true}, {2, true}, {1, false}, {2, false}};
  StreamTuningChoice choice{candidates[1], "probe", 0};
  double best = 1e30;
  SetStreamTuning(candidates[1]);
  BestPass(ctx, b, kRows, kK, a.data(), c.data(), 1);  // warm the pages and TLB
  for (const StreamTuning& t : candidates) {
    SetStreamTuning(t);
    const double s = BestPass(ctx, b, kRows, kK, a.data(), c.data(), 3);
    if (s < best) {
      best = s;
      choice.tuning = t;
    }
  }
  choice.probe_gbps = static_cast<double>(kBytes) / best / 1e9;
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
    const CpuInfo& cpu = GetCpuInfo();
    if (env != nullptr && ParseTuning(env, &c->tuning)) {
      c->source = "MLASERVE_CPU_PREFETCH";
    } else if ((cpu.is_intel() || cpu.is_amd()) &&
               !(env != nullptr && std::string(env) == "probe")) {
      c->tuning = cpu.is_intel() ? StreamTuning{1, false} : StreamTuning{1, true};
      c->source = "vendor";
    } else {
      *c = ProbeStreamTuning(ctx);
    }
    SetStreamTuning(c->tuning);
    return c;
  }();
  return *choice;
}

}  // namespace mlaserve
