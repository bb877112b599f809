// How the decode GEMM path (dot products over weight rows streamed once, cpu_gemv_impl.h) asks
// for weight rows ahead of their use. What keeps enough memory requests in flight differs between
// processors, and between days on one shared host: a prefetch into L2 reads at 27.1 GB/s on an
// Intel Xeon (Sapphire Rapids class) where the non-temporal hint reads 10.2
// (../shared/bench/HOSTS.md); on an AMD EPYC (Zen 4) host the non-temporal hint decoded 10 %
// faster one day and 27 % slower than the L2 hint on another (docs/performance.md). So the
// choice is made on the host at hand, at start-up: from the environment, or else by a short
// probe that streams a matrix through this processor's kernel with each candidate.
//
// Thread-safety: all functions may be called from any thread; the kernels read the current
// tuning once per GEMM call.
#ifndef MLASERVE_KERNELS_CPU_CPU_STREAM_TUNING_H_
#define MLASERVE_KERNELS_CPU_CPU_STREAM_TUNING_H_

#include <cstdint>
#include <string>

#include "kernels/cpu/cpu_context.h"

namespace mlaserve {

// Depth (bf16 elements) of the weight rows the probe streams (ProbeStreamTuning): the distance
// `ahead_tiles` stands for was measured over tiles of rows this deep.
inline constexpr int64_t kStreamProbeDepth = 2048;

struct StreamTuning {
  int ahead_tiles = 1;       // prefetch weight rows this many tiles ahead (a single row's tile is
                             // one weight row); 0: no prefetch
  bool non_temporal = true;  // prefetchnta (weights bypass L2/L3) or prefetcht1 (into L2)
};

// "none", "nta:N" or "t1:N".
std::string StreamTuningName(const StreamTuning& t);

// The tuning the kernels use now (the default above until TuneStreaming or SetStreamTuning).
StreamTuning CurrentStreamTuning();
void SetStreamTuning(const StreamTuning& t);

// The tuning for a call over `rows` rows of A: the current one for a single row, whose stream
// the probe and the online tuner measure; for more, a prefetch into L2 at least one tile ahead,
// whatever the single row's choice. Several rows make each weight line worth many FMAs, so
// demand loads alone keep too few lines in flight, and a call's later row chunks read a block
// of weights again from L2, where a non-temporal prefetch would not have put it. On the Zen 4
// host, where the probe chose `none` for a single row (MLASERVE_BENCH_DETERMINISTIC=1
// mlaserve-kernel-bench, BM_Gemm/4 and /16, three rounds): none 75-103 and 106-162 GFLOP/s,
// nta:1 82-90 and 145-157, t1:1 102-127 and 167-185.
// `strided`: the kernel reads each weight row a depth pass at a time (a weight deeper than one
// pass, such as a dense MLP's down projection or V2's and V3's o_proj at k = 16384), so each
// pass streams a chunk of every row at the row stride, which the processor's own prefetchers
// do not follow from row to row: a single row then also takes at least one tile ahead. On the
// Zen 4 host (MLASERVE_BENCH_DETERMINISTIC=1 mlaserve-kernel-bench, BM_Gemm/1/2048/10944 with
// MLASERVE_CPU_PREFETCH forced, three rounds): none 18-20 GB/s, t1:1 28-29, where the one-pass
// 21888 x 2048 reads 32-35 with either.
inline StreamTuning StreamTuningForRows(StreamTuning t, int64_t rows, bool strided = false) {
  if (rows > 1) t.non_temporal = false;
  if ((rows > 1 || strided) && t.ahead_tiles < 1) t.ahead_tiles = 1;
  return t;
}

struct StreamTuningChoice {
  StreamTuning tuning;
  std::string source;       // "MLASERVE_CPU_PREFETCH" or "probe"
  double probe_gbps = 0;    // the chosen candidate's read rate in the probe (0 without a probe)
  std::string probe_table;  // every candidate's rate, "none=30.1 nta:1=27.4 ..." (GB/s)
};

// Chooses the tuning once per process and installs it: MLASERVE_CPU_PREFETCH (none | nta:N |
// t1:N, N in 1..4) when set and valid; otherwise the probe (none, nta:1, nta:4, t1:1, t1:2 and
// t1:4, 5 interleaved passes each, 31 in all with a warm-up, over a bf16 matrix of
// BytesBeyondLastLevelCache(128 MiB) through `ctx`'s single-row decode GEMM, in its activation
// dtype, on all of its threads, each its own rows as in a decode step; the best median wins;
// about 200 ms at 128 MiB on two cores). Later calls return the first choice (made with the
// first backend's activation dtype).
const StreamTuningChoice& TuneStreaming(const CpuContext& ctx);

// The probe alone (it leaves the current tuning at its choice).
StreamTuningChoice ProbeStreamTuning(const CpuContext& ctx);

// Online: a probe's choice is kept under test on the real decode steps, because a shared host's
// bandwidth can change state for minutes at a time, and a 200 ms probe taken in a slow spell finds
// every candidate alike and picks one at random (docs/performance.md). Once TuneStreaming has
// probed (MLASERVE_CPU_PREFETCH unset), single-row GEMM calls over at least kOnlineMinBytes of
// weights go through Begin/EndOnlineStreamCall: every kOnlineExploreEvery-th of them (every
// kOnlineWarmExploreEvery-th in the first kOnlineWarmCalls after the start or a change) runs with
// the next other candidate in turn, on weights whose last call ran with the current choice, and
// its rate over that call's is kept (the last kOnlineWindow ratios per candidate: the two calls
// are a step apart, so the host's state cancels). A candidate whose median ratio exceeds
// 1 + kOnlineMargin becomes the choice. MLASERVE_CPU_PREFETCH=probe keeps the probe's choice
// fixed; any other value pins the tuning, as before. The prefetch changes no arithmetic.
inline constexpr int64_t kOnlineMinBytes = int64_t{64} << 20;
inline constexpr int kOnlineExploreEvery = 32;
inline constexpr int kOnlineWarmExploreEvery = 8;
inline constexpr int64_t kOnlineWarmCalls = 400;
inline constexpr int kOnlineWindow = 5;
inline constexpr double kOnlineMargin = 0.10;
// An exploring call needs the choice's call on the same weights within this many online calls
// (a step or two earlier), or the two rates could be from different states of the host.
inline constexpr int64_t kOnlineBaselineCalls = 64;

struct OnlineStreamCall {
  int candidate = -1;  // -1: not an online call (the tuner is off, or the call is too small)
  const void* weights = nullptr;
  int64_t bytes = 0;
};
// Installs the tuning a call over `bytes` of `weights` runs with and returns what
// EndOnlineStreamCall needs with its wall time.
OnlineStreamCall BeginOnlineStreamCall(const void* weights, int64_t bytes);
void EndOnlineStreamCall(const OnlineStreamCall& call, double seconds);
// How many times the online tuner has changed the choice in this process.
int64_t OnlineStreamTuningSwitches();

// One change of the online tuner's choice.
struct StreamTuningSwitch {
  StreamTuning from;
  StreamTuning to;
  double median_ratio = 0;   // the median of `to`'s last kOnlineWindow rates over `from`'s
  int64_t online_calls = 0;  // online calls since the tuner was turned on
  int64_t switches = 0;      // OnlineStreamTuningSwitches() with this one
};
// Called after every change, on the thread of the GEMM call that decided it and outside the
// tuner's lock (so it may take its time, e.g. write a log line); nullptr: none (the default).
using StreamTuningSwitchListener = void (*)(const StreamTuningSwitch&);
void SetStreamTuningSwitchListener(StreamTuningSwitchListener listener);
// Turns the online tuner on with `choice` as its current choice (TuneStreaming does after a
// probe), or off. For tests.
void SetOnlineStreamTuning(bool on, const StreamTuning& choice);

}  // namespace mlaserve

#endif  // MLASERVE_KERNELS_CPU_CPU_STREAM_TUNING_H_
