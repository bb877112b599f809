#include "kernels/cpu/cpu_features.h"

#include <cpuid.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <string_view>

namespace mlaserve {
namespace {

struct Regs {
  uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
};

// cpuid(leaf, subleaf); all zero when the leaf is beyond the processor's maximum.
Regs Cpuid(uint32_t leaf, uint32_t subleaf = 0) {
  Regs r;
  if (__get_cpuid_count(leaf, subleaf, &r.eax, &r.ebx, &r.ecx, &r.edx) == 0) return Regs{};
  return r;
}

bool Bit(uint32_t reg, int bit) { return (reg >> bit) & 1u; }

// XCR0: the register state the OS saves on a context switch. xgetbv is encoded as bytes so that
// no target attribute is needed.
uint64_t Xcr0() {
  uint32_t lo, hi;
  __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

std::string TrimmedBrand() {
  if (Cpuid(0x80000000).eax < 0x80000004) return "";
  char brand[49] = {};
  for (uint32_t i = 0; i < 3; ++i) {
    const Regs r = Cpuid(0x80000002 + i);
    std::memcpy(brand + 16 * i, &r, 16);
  }
  std::string s(brand);
  const size_t first = s.find_first_not_of(' ');
  const size_t last = s.find_last_not_of(' ');
  return first == std::string::npos ? "" : s.substr(first, last - first + 1);
}

// Linux enables the AMX tile data state (XFEATURE_XTILEDATA, state component 18) for a
// process only on request; the permission then holds for all its threads.
bool RequestAmxPermission() {
  constexpr long kArchGetXcompPerm = 0x1022;
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr int kXtileData = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXtileData) != 0) return false;
  uint64_t permitted = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &permitted) != 0) return false;
  return (permitted >> kXtileData) & 1u;
}

// The level-`level` data or unified cache of processor `cpu` as the kernel describes it
// (/sys/devices/system/cpu/cpuN/cache/index*/, what lscpu prints): its size and the list of
// processors sharing it; {0, ""} when absent. glibc's sysconf(_SC_LEVEL3_CACHE_SIZE) is not
// used: on an AMD EPYC guest it reported 320 MiB for a 32 MiB L3.
struct SysfsCache {
  int64_t bytes = 0;
  std::string shared_cpus;
};

SysfsCache SysfsCacheOf(int cpu, int level) {
  const std::string base = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/cache/index";
  for (int index = 0; index < 16; ++index) {
    const std::string dir = base + std::to_string(index);
    int l = 0;
    if (!(std::ifstream(dir + "/level") >> l)) break;
    std::string type, size;
    if (l != level || !(std::ifstream(dir + "/type") >> type) || type == "Instruction" ||
        !(std::ifstream(dir + "/size") >> size)) {
      continue;
    }
    char* end = nullptr;
    const long long n = std::strtoll(size.c_str(), &end, 10);
    const int64_t unit = *end == 'K' ? 1024 : *end == 'M' ? 1024 * 1024 : *end == 'G' ? 1 << 30 : 1;
    SysfsCache cache;
    cache.bytes = n > 0 ? n * unit : 0;
    std::ifstream shared(dir + "/shared_cpu_list");
    std::getline(shared, cache.shared_cpus);
    return cache;
  }
  return {};
}

// The L2 and L3 of the processors this process may run on: the L2 of the first, one L3's size,
// and how many L3 instances they span (a many-core AMD EPYC has one L3 per 8-core complex).
void DetectCaches(CpuInfo& info) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return;
  std::set<std::string> instances;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed)) continue;
    if (info.l2_bytes == 0) info.l2_bytes = SysfsCacheOf(cpu, 2).bytes;
    const SysfsCache l3 = SysfsCacheOf(cpu, 3);
    if (l3.bytes == 0) continue;
    if (info.l3_bytes == 0) info.l3_bytes = l3.bytes;
    instances.insert(l3.shared_cpus);
  }
  info.l3_instances = static_cast<int>(instances.size());
}

CpuInfo Detect() {
  CpuInfo info;
  const Regs leaf0 = Cpuid(0);
  char vendor[13] = {};
  std::memcpy(vendor, &leaf0.ebx, 4);
  std::memcpy(vendor + 4, &leaf0.edx, 4);
  std::memcpy(vendor + 8, &leaf0.ecx, 4);
  info.vendor = vendor;
  info.model = TrimmedBrand();

  const Regs leaf1 = Cpuid(1);
  const bool osxsave = Bit(leaf1.ecx, 27);
  const uint64_t xcr0 = osxsave ? Xcr0() : 0;
  const bool avx_state = (xcr0 & 0x6) == 0x6;
  const bool avx512_state = avx_state && (xcr0 & 0xe0) == 0xe0;
  const bool amx_state = (xcr0 & 0x60000) == 0x60000;
  const uint32_t max_leaf = leaf0.eax;
  const Regs leaf7 = max_leaf >= 7 ? Cpuid(7, 0) : Regs{};
  const Regs leaf7_1 = max_leaf >= 7 ? Cpuid(7, 1) : Regs{};

  info.fma = avx_state && Bit(leaf1.ecx, 12);
  info.f16c = avx_state && Bit(leaf1.ecx, 29);
  info.avx2 = avx_state && Bit(leaf7.ebx, 5);
  info.avx512f = avx512_state && Bit(leaf7.ebx, 16);
  info.avx512dq = avx512_state && Bit(leaf7.ebx, 17);
  info.avx512bw = avx512_state && Bit(leaf7.ebx, 30);
  info.avx512vl = avx512_state && Bit(leaf7.ebx, 31);
  info.avx512_bf16 = avx512_state && Bit(leaf7_1.eax, 5);
  info.amx_bf16 = amx_state && Bit(leaf7.edx, 22);
  info.amx_tile = amx_state && Bit(leaf7.edx, 24);
  info.amx_permitted = info.amx_tile && info.amx_bf16 && RequestAmxPermission();
  info.invariant_tsc = Cpuid(0x80000000).eax >= 0x80000007 && Bit(Cpuid(0x80000007).edx, 8);

  DetectCaches(info);
  return info;
}

}  // namespace

int64_t BytesBeyondLastLevelCache(int64_t floor) {
  constexpr int64_t kPage = int64_t{2} << 20;
  const CpuInfo& cpu = GetCpuInfo();
  const int64_t bytes = std::max(floor, 3 * cpu.l3_bytes * cpu.l3_instances);
  return (bytes + kPage - 1) / kPage * kPage;
}

std::string_view CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar:
      return "scalar";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx512:
      return "avx512";
    case CpuIsa::kAvx512Bf16:
      return "avx512_bf16";
    case CpuIsa::kAmxBf16:
      return "amx_bf16";
  }
  return "?";
}

const CpuInfo& GetCpuInfo() {
  static const CpuInfo* const info = new CpuInfo(Detect());
  return *info;
}

CpuIsa DetectCpuIsa() {
  const CpuInfo& c = GetCpuInfo();
  if (c.avx512f && c.avx512bw && c.avx512vl && c.avx512dq) {
    if (!c.avx512_bf16) return CpuIsa::kAvx512;
    return c.amx_permitted ? CpuIsa::kAmxBf16 : CpuIsa::kAvx512Bf16;
  }
  if (c.avx2 && c.fma && c.f16c) return CpuIsa::kAvx2;
  return CpuIsa::kScalar;
}

std::optional<CpuIsa> CpuIsaFromName(std::string_view name) {
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Bf16,
                     CpuIsa::kAmxBf16}) {
    if (name == CpuIsaName(isa)) return isa;
  }
  return std::nullopt;
}

CpuIsa SelectCpuIsa() {
  const CpuIsa detected = DetectCpuIsa();
  const char* env = std::getenv("MLASERVE_CPU_ISA");
  if (env == nullptr) return detected;
  const std::optional<CpuIsa> want = CpuIsaFromName(env);
  return want.has_value() ? std::min(*want, detected) : detected;
}

}  // namespace mlaserve
