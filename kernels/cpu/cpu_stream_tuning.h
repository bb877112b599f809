// How the decode GEMM path (dot products over weight rows streamed once, cpu_gemv_impl.h) asks
// for weight rows ahead of their use. What keeps enough memory requests in flight differs between
// processors — the non-temporal prefetch one tile ahead that suits an AMD EPYC host (10 % faster
// decode end to end than the same prefetch into L2) reads at 10.2 GB/s on an Intel Xeon (Sapphire
// Rapids class), where a prefetch into L2 reads at 27.1 (../shared/bench/HOSTS.md) — so the
// choice is made per host at run time: from the environment, from the vendor where it was
// measured, or else by a short probe that streams a matrix through this processor's kernel with
// each candidate.
//
// Thread-safety: all functions may be called from any thread; the kernels read the current
// tuning once per GEMM call.
#ifndef MLASERVE_KERNELS_CPU_CPU_STREAM_TUNING_H_
#define MLASERVE_KERNELS_CPU_CPU_STREAM_TUNING_H_

#include <string>

#include "kernels/cpu/cpu_context.h"

namespace mlaserve {

struct StreamTuning {
  int ahead_tiles = 1;       // prefetch the weight rows this many tiles ahead; 0: no prefetch
  bool non_temporal = true;  // prefetchnta (weights bypass L2/L3) or prefetcht1 (into L2)
};

// "none", "nta:N" or "t1:N".
std::string StreamTuningName(const StreamTuning& t);

// The tuning the kernels use now (the default above until TuneStreaming or SetStreamTuning).
StreamTuning CurrentStreamTuning();
void SetStreamTuning(const StreamTuning& t);

struct StreamTuningChoice {
  StreamTuning tuning;
  std::string source;     // "MLASERVE_CPU_PREFETCH", "vendor" or "probe"
  double probe_gbps = 0;  // the chosen candidate's read rate in the probe (0 without a probe)
};

// Chooses the tuning once per process and installs it: MLASERVE_CPU_PREFETCH (none | nta:N |
// t1:N, N in 1..4) when set and valid; else by vendor where measured (GenuineIntel: t1:1,
// AuthenticAMD: nta:1; a probe's single-matrix stream cannot see the L3 that a non-temporal
// hint keeps for the KV cache and activations, which is where the AMD gain comes from);
// otherwise a probe of about 50 ms that streams a 64 MiB
// bf16 matrix through `ctx`'s single-row decode GEMM on all of its threads, each its own rows as
// in a decode step, with each candidate (best of three passes each), and keeps the fastest.
// Later calls return the first choice.
// MLASERVE_CPU_PREFETCH=probe forces the probe.
const StreamTuningChoice& TuneStreaming(const CpuContext& ctx);

// The probe alone (it leaves the current tuning at its choice).
StreamTuningChoice ProbeStreamTuning(const CpuContext& ctx);

}  // namespace mlaserve

#endif  // MLASERVE_KERNELS_CPU_CPU_STREAM_TUNING_H_
