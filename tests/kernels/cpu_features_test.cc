// CpuInfo against the kernel's own view of the processor (/proc/cpuinfo), an independent reading
// of the same cpuid bits and OS state.
#include "kernels/cpu/cpu_features.h"

#include <cpuid.h>
#include <sched.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "tests/kernels/cpu_test_util.h"

namespace mlaserve {
namespace {

using test::ProcCpuinfoField;
using test::ProcCpuinfoFlags;

// The processor's brand string as cpuid gives it now (leaves 0x80000002-0x80000004, 48 bytes,
// nul-padded) without the spaces around it; empty when the processor has none.
std::string CpuidBrand() {
  unsigned regs[13] = {};  // the 48 bytes and a terminating zero
  if (static_cast<unsigned>(__get_cpuid_max(0x80000000, nullptr)) < 0x80000004) return "";
  for (unsigned i = 0; i < 3; ++i) {
    __cpuid(0x80000002 + i, regs[4 * i], regs[4 * i + 1], regs[4 * i + 2], regs[4 * i + 3]);
  }
  const std::string brand(reinterpret_cast<const char*>(regs));
  const size_t first = brand.find_first_not_of(' ');
  if (first == std::string::npos) return "";
  return brand.substr(first, brand.find_last_not_of(' ') - first + 1);
}

TEST(CpuFeaturesTest, AgreesWithProcCpuinfo) {
  const std::set<std::string> flags = ProcCpuinfoFlags();
  if (flags.empty()) GTEST_SKIP() << "/proc/cpuinfo has no flags line";
  const CpuInfo& c = GetCpuInfo();
  EXPECT_EQ(c.vendor, ProcCpuinfoField("vendor_id"));
  // Linux read the brand string once, at boot; a hypervisor may present another one since (a
  // guest booted as "AMD EPYC" reads "Oxide Virtual Turin-like Processor" from cpuid later), so
  // the model is checked against cpuid read now, and against Linux's line only for being there.
  EXPECT_EQ(c.model, CpuidBrand());
  if (!ProcCpuinfoField("model name").empty()) {
    EXPECT_FALSE(c.model.empty());
  }
  // Linux lists a flag only when the OS enabled its state too, as CpuInfo does.
  EXPECT_EQ(c.avx2, flags.count("avx2") > 0);
  EXPECT_EQ(c.fma, flags.count("fma") > 0);
  EXPECT_EQ(c.f16c, flags.count("f16c") > 0);
  EXPECT_EQ(c.avx512f, flags.count("avx512f") > 0);
  EXPECT_EQ(c.avx512bw, flags.count("avx512bw") > 0);
  EXPECT_EQ(c.avx512vl, flags.count("avx512vl") > 0);
  EXPECT_EQ(c.avx512dq, flags.count("avx512dq") > 0);
  EXPECT_EQ(c.avx512_bf16, flags.count("avx512_bf16") > 0);
  EXPECT_EQ(c.amx_tile, flags.count("amx_tile") > 0);
  EXPECT_EQ(c.amx_bf16, flags.count("amx_bf16") > 0);
  EXPECT_EQ(c.invariant_tsc, flags.count("nonstop_tsc") > 0);
}

// The level-`level` data or unified cache of this processor by the deterministic cache
// parameters cpuid leaf (4 on Intel, 0x8000001D on AMD): ways x partitions x line size x sets;
// 0 when not listed.
int64_t CpuidCacheBytes(bool amd, unsigned level) {
  const unsigned leaf = amd ? 0x8000001D : 4;
  unsigned eax, ebx, ecx, edx;
  if (static_cast<unsigned>(__get_cpuid_max(leaf & 0x80000000, nullptr)) < leaf) return 0;
  for (unsigned sub = 0; sub < 16; ++sub) {
    __cpuid_count(leaf, sub, eax, ebx, ecx, edx);
    if ((eax & 0x1f) == 0) break;  // no more caches
    if (((eax >> 5) & 7) != level || (eax & 0x1f) == 2) continue;  // 2: instruction cache
    return int64_t{((ebx >> 22) & 0x3ff) + 1} * (((ebx >> 12) & 0x3ff) + 1) * ((ebx & 0xfff) + 1) *
           (int64_t{ecx} + 1);
  }
  return 0;
}

// lscpu's count of L3 instances ("L3 cache: 32 MiB (1 instance)"), or 0 when it prints none.
int LscpuL3Instances() {
  FILE* p = popen("LC_ALL=C lscpu 2>/dev/null", "r");
  if (p == nullptr) return 0;
  int instances = 0;
  char line[512];
  while (std::fgets(line, sizeof(line), p) != nullptr) {
    const std::string s(line);
    const size_t open = s.find('(');
    if (s.rfind("L3 cache:", 0) == 0 && open != std::string::npos) {
      instances = std::atoi(s.c_str() + open + 1);
    }
  }
  pclose(p);
  return instances;
}

TEST(CpuFeaturesTest, L2AgreesWithCpuid) {
  const CpuInfo& c = GetCpuInfo();
  const int64_t l2 = CpuidCacheBytes(c.is_amd(), 2);
  if (l2 == 0 || c.l2_bytes == 0) GTEST_SKIP() << "no level-2 cache described";
  EXPECT_EQ(c.l2_bytes, l2);
}

TEST(CpuFeaturesTest, LastLevelCacheAgreesWithCpuidAndLscpu) {
  const CpuInfo& c = GetCpuInfo();
  const int64_t l3 = CpuidCacheBytes(c.is_amd(), 3);
  if (l3 == 0 || c.l3_bytes == 0) GTEST_SKIP() << "no level-3 cache described";
  EXPECT_EQ(c.l3_bytes, l3);
  EXPECT_GE(c.l3_instances, 1);
  // Where this process may run on every processor, it reaches every L3 that lscpu counts.
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  const int lscpu = LscpuL3Instances();
  if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0 &&
      CPU_COUNT(&allowed) == sysconf(_SC_NPROCESSORS_ONLN) && lscpu > 0) {
    EXPECT_EQ(c.l3_instances, lscpu);
  }
  const int64_t big = BytesBeyondLastLevelCache(int64_t{1} << 20);
  EXPECT_GE(big, 3 * l3 * c.l3_instances);
  EXPECT_EQ(big % (int64_t{2} << 20), 0);
  EXPECT_EQ(BytesBeyondLastLevelCache(4 * big), 4 * big);
}

TEST(CpuFeaturesTest, SelectionNeverExceedsDetection) {
  const CpuIsa detected = DetectCpuIsa();
  setenv("MLASERVE_CPU_ISA", "amx_bf16", 1);
  EXPECT_EQ(SelectCpuIsa(), detected);
  setenv("MLASERVE_CPU_ISA", "scalar", 1);
  EXPECT_EQ(SelectCpuIsa(), CpuIsa::kScalar);
  setenv("MLASERVE_CPU_ISA", "bogus", 1);
  EXPECT_EQ(SelectCpuIsa(), detected);
  unsetenv("MLASERVE_CPU_ISA");
}

TEST(CpuFeaturesTest, EveryBuildIsFoundByItsName) {
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Bf16,
                     CpuIsa::kAmxBf16}) {
    EXPECT_EQ(CpuIsaFromName(CpuIsaName(isa)), isa) << CpuIsaName(isa);
  }
  EXPECT_EQ(CpuIsaFromName("avx512bf16"), std::nullopt);
  EXPECT_EQ(CpuIsaFromName(""), std::nullopt);
}

}  // namespace
}  // namespace mlaserve
