#include "kernels/cpu/cpu_stream_tuning.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kernels/check.h"
#include "kernels/cpu/cpu_features.h"

namespace mlaserve {
namespace {

// ahead_tiles in the low byte, non_temporal in bit 8.
std::atomic<uint32_t> g_tuning{1u | (1u << 8)};

constexpr StreamTuning kCandidates[] = {{0, false}, {1, true},  {4, true},
                                        {1, false}, {2, false}, {4, false}};
constexpr int kCount = sizeof(kCandidates) / sizeof(kCandidates[0]);

int CandidateIndex(const StreamTuning& t) {
  for (int i = 0; i < kCount; ++i) {
    if (kCandidates[i].ahead_tiles == t.ahead_tiles &&
        kCandidates[i].non_temporal == t.non_temporal) {
      return i;
    }
  }
  return -1;
}

// The online tuner's state (cpu_stream_tuning.h).
struct Online {
  std::mutex mu;
  bool on = false;
  int choice = 1;
  int64_t calls = 0;
  int64_t calls_at_change = 0;  // `calls` at the start or the latest change of choice
  int next = 0;                 // the candidate the next exploring call tries (not the choice)
  int64_t switches = 0;
  std::atomic<StreamTuningSwitchListener> listener{nullptr};
  // The rate of the latest call with the current choice, per weights (a few matrices qualify).
  struct Last {
    const void* weights = nullptr;
    double gbps = 0;
    int64_t call = 0;
  };
  Last last[8];
  double ratios[kCount][kOnlineWindow] = {};
  int filled[kCount] = {};
  int pos[kCount] = {};

  Last* Find(const void* w) {
    for (Last& l : last) {
      if (l.weights == w) return &l;
    }
    return nullptr;
  }
  void ClearRatios() {
    for (int i = 0; i < kCount; ++i) filled[i] = pos[i] = 0;
  }
};

Online& GetOnline() {
  static Online* const online = new Online;
  return *online;
}

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
  constexpr int64_t kK = kStreamProbeDepth;
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
      const bool online = env == nullptr || std::strcmp(env, "probe") != 0;
      if (online) c->source = "probe+online";
      SetOnlineStreamTuning(online, c->tuning);
    }
    SetStreamTuning(c->tuning);
    return c;
  }();
  return *choice;
}

void SetOnlineStreamTuning(bool on, const StreamTuning& choice) {
  Online& o = GetOnline();
  std::lock_guard<std::mutex> lock(o.mu);
  const int index = CandidateIndex(choice);
  o.on = on && index >= 0;
  if (index >= 0) o.choice = index;
  o.calls = 0;
  o.calls_at_change = 0;
  o.next = 0;
  for (Online::Last& l : o.last) l = {};
  o.ClearRatios();
}

OnlineStreamCall BeginOnlineStreamCall(const void* weights, int64_t bytes) {
  Online& o = GetOnline();
  if (bytes < kOnlineMinBytes) return {};
  std::lock_guard<std::mutex> lock(o.mu);
  if (!o.on) return {};
  OnlineStreamCall call{o.choice, weights, bytes};
  const Online::Last* last = o.Find(weights);
  const bool warm = ++o.calls - o.calls_at_change <= kOnlineWarmCalls;
  const int every = warm ? kOnlineWarmExploreEvery : kOnlineExploreEvery;
  if (o.calls % every == 0 && last != nullptr && o.calls - last->call < kOnlineBaselineCalls) {
    if (o.next == o.choice) o.next = (o.next + 1) % kCount;
    call.candidate = o.next;
    o.next = (o.next + 1) % kCount;
  }
  SetStreamTuning(kCandidates[call.candidate]);
  return call;
}

namespace {

// EndOnlineStreamCall under the tuner's lock: records the call's rate and returns the change of
// choice it decided, if any.
std::optional<StreamTuningSwitch> RecordOnlineCall(Online& o, const OnlineStreamCall& call,
                                                   double seconds) {
  std::lock_guard<std::mutex> lock(o.mu);
  std::optional<StreamTuningSwitch> change;
  const double gbps = static_cast<double>(call.bytes) / seconds / 1e9;
  Online::Last* last = o.Find(call.weights);
  if (call.candidate == o.choice) {
    if (last == nullptr) {  // replace the entry seen longest ago
      last = &o.last[0];
      for (Online::Last& l : o.last) {
        if (l.call < last->call) last = &l;
      }
      last->weights = call.weights;
    }
    last->gbps = gbps;
    last->call = o.calls;
  } else if (last != nullptr && last->gbps > 0) {
    const int c = call.candidate;
    o.ratios[c][o.pos[c]] = gbps / last->gbps;
    o.pos[c] = (o.pos[c] + 1) % kOnlineWindow;
    if (o.filled[c] < kOnlineWindow) ++o.filled[c];
    if (o.filled[c] == kOnlineWindow) {
      double sorted[kOnlineWindow];
      std::copy(o.ratios[c], o.ratios[c] + kOnlineWindow, sorted);
      std::sort(sorted, sorted + kOnlineWindow);
      if (sorted[kOnlineWindow / 2] > 1 + kOnlineMargin) {
        change = StreamTuningSwitch{.from = kCandidates[o.choice],
                                    .to = kCandidates[c],
                                    .median_ratio = sorted[kOnlineWindow / 2],
                                    .online_calls = o.calls,
                                    .switches = o.switches + 1};
        o.choice = c;
        o.calls_at_change = o.calls;
        ++o.switches;
        o.ClearRatios();  // they were rates over the previous choice's
        for (Online::Last& l : o.last) l = {};
      }
    }
  }
  SetStreamTuning(kCandidates[o.choice]);
  return change;
}

}  // namespace

void SetStreamTuningSwitchListener(StreamTuningSwitchListener listener) {
  GetOnline().listener.store(listener, std::memory_order_release);
}

void EndOnlineStreamCall(const OnlineStreamCall& call, double seconds) {
  if (call.candidate < 0 || seconds <= 0) return;
  Online& o = GetOnline();
  const std::optional<StreamTuningSwitch> change = RecordOnlineCall(o, call, seconds);
  if (!change.has_value()) return;
  const StreamTuningSwitchListener listener = o.listener.load(std::memory_order_acquire);
  if (listener != nullptr) listener(*change);
}

int64_t OnlineStreamTuningSwitches() {
  Online& o = GetOnline();
  std::lock_guard<std::mutex> lock(o.mu);
  return o.switches;
}

}  // namespace mlaserve
