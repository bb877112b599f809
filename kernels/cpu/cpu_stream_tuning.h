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

#include <string>

#include "kernels/cpu/cpu_context.h"

namespace mlaserve {

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

}  // namespace mlaserve

#endif  // MLASERVE_KERNELS_CPU_CPU_STREAM_TUNING_H_
