// What the processor is and which kernel build runs on it. The kernels exist in five builds
// (AMX tiles for the packed GEMM on top of AVX-512 BF16, AVX-512 with the BF16 dot-product
// instructions, AVX-512, AVX2+FMA and portable scalar code);
// the best one the processor supports is chosen at run time, optionally capped by the
// environment so that tests can exercise every build on one machine. Detection reads cpuid and
// the OS's enabled register state (xgetbv) directly, so it means the same with gcc and clang.
#ifndef MLASERVE_KERNELS_CPU_CPU_FEATURES_H_
#define MLASERVE_KERNELS_CPU_CPU_FEATURES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace mlaserve {

// Ordered from least to most capable.
enum class CpuIsa { kScalar, kAvx2, kAvx512, kAvx512Bf16, kAmxBf16 };

// "scalar", "avx2", "avx512", "avx512_bf16" or "amx_bf16".
std::string_view CpuIsaName(CpuIsa isa);
// The build CpuIsaName names `name`, or nullopt.
std::optional<CpuIsa> CpuIsaFromName(std::string_view name);

// Facts about this processor, read once. A feature counts only when the OS also saves its
// registers (AVX: XCR0 bits 1-2; AVX-512: bits 5-7; AMX: bits 17-18).
struct CpuInfo {
  std::string vendor;  // "GenuineIntel", "AuthenticAMD", ...
  std::string model;   // the brand string, e.g. "AMD EPYC 9R14" (empty when absent)
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512_bf16 = false;
  bool amx_tile = false, amx_bf16 = false;  // in the processor; Linux also wants a permission
  // Linux granted this process the AMX tile data state (arch_prctl ARCH_REQ_XCOMP_PERM, asked
  // once, at detection, when the processor has AMX); without it a tile instruction faults.
  bool amx_permitted = false;
  // The time-stamp counter runs at one rate in every power state (CPUID 0x80000007 EDX bit 8,
  // Linux's nonstop_tsc).
  bool invariant_tsc = false;
  // Caches as Linux's sysfs describes them for the processors this process may run on (its
  // affinity mask at detection); 0: unknown. l2_bytes per core; l3_bytes one level-3 cache,
  // l3_instances how many distinct ones those processors share.
  int64_t l2_bytes = 0;
  int64_t l3_bytes = 0;
  int l3_instances = 0;

  bool is_intel() const { return vendor == "GenuineIntel"; }
  bool is_amd() const { return vendor == "AuthenticAMD"; }
};

// This processor's CpuInfo (computed on first use; thread-safe).
const CpuInfo& GetCpuInfo();

// A byte count of at least `floor` and at least three times the L3 within this process's reach
// (l3_bytes x l3_instances), in whole 2 MiB pages: a buffer that large, read in a cycle, comes
// from memory on every pass (server processors hold 100-300 MiB of L3, so a fixed size that
// misses one host's cache can sit in another's).
int64_t BytesBeyondLastLevelCache(int64_t floor);

// The most capable ISA this processor runs: kAvx512 needs AVX-512 F/BW/VL/DQ, kAvx512Bf16 also
// AVX512_BF16, kAmxBf16 also AMX-TILE, AMX-BF16 and the permission; kAvx2 needs AVX2, FMA and
// F16C.
CpuIsa DetectCpuIsa();

// DetectCpuIsa(), capped by the environment variable MLASERVE_CPU_ISA
// (amx_bf16 | avx512_bf16 | avx512 | avx2 | scalar)
// when it is set. A request above what the processor supports yields the detected ISA; an
// unknown value is ignored. Read on each call (backends call it once, at construction).
CpuIsa SelectCpuIsa();

}  // namespace mlaserve

#endif  // MLASERVE_KERNELS_CPU_CPU_FEATURES_H_
