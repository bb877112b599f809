#include "kernels/op_profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "kernels/check.h"
#include "kernels/cpu/cpu_features.h"

namespace mlaserve {
namespace {

// Whether Linux keeps time with the counter itself: it does so only once it has found the
// counter synchronized across processors and steady (its watchdog demotes it otherwise), which
// an invariant counter alone does not promise across the vCPUs of a virtual machine.
bool KernelClockIsTsc() {
  std::string name;
  std::ifstream("/sys/devices/system/clocksource/clocksource0/current_clocksource") >> name;
  return name == "tsc";
}

// Fibonacci hashing of the name's address onto the slots (names are at least 1-byte aligned
// string literals; the low bits alone would crowd them).
int HomeSlot(const char* op) {
  static_assert(OpProfile::kSlots == 64);
  return static_cast<int>((reinterpret_cast<uintptr_t>(op) * 0x9E3779B97F4A7C15ull) >> 58);
}

}  // namespace

std::unique_ptr<OpProfile> OpProfile::FromEnvironment() {
  const char* v = std::getenv("MLASERVE_PROFILE");
  if (v == nullptr || v[0] != '1') return nullptr;
  return std::make_unique<OpProfile>();
}

OpProfile::OpProfile(bool use_tsc)
    : tsc_(use_tsc && GetCpuInfo().invariant_tsc && KernelClockIsTsc()),
      start_ticks_(Now()),
      start_nanos_(SteadyNanos()) {}

int OpProfile::SlotIndex(const char* op) const {
  for (int probe = 0, i = HomeSlot(op); probe < kSlots; ++probe, i = (i + 1) % kSlots) {
    if (slots_[i].op == op || slots_[i].op == nullptr) return i;
  }
  MLASERVE_CHECK_MSG(false, "OpProfile: more op name addresses than slots");
  return -1;
}

OpProfile::Slot* OpProfile::Claim(const char* op) {
  Slot& s = slots_[SlotIndex(op)];
  s.op = op;
  return &s;
}

int64_t OpProfile::total_ticks() const {
  int64_t total = 0;
  for (const Slot& s : slots_) total += s.ticks;
  return total;
}

double OpProfile::Nanos(int64_t ticks) const {
  if (!tsc_) return static_cast<double>(ticks);
  const int64_t elapsed_ticks = Now() - start_ticks_;
  if (elapsed_ticks <= 0) return 0.0;
  return static_cast<double>(ticks) * static_cast<double>(SteadyNanos() - start_nanos_) /
         static_cast<double>(elapsed_ticks);
}

OpProfile::~OpProfile() {
  // One row per name: the same literal may sit at more than one address (one per translation
  // unit that names it).
  struct Row {
    const char* op;
    int64_t calls;
    int64_t ticks;
  };
  std::vector<Row> rows;
  for (const Slot& s : slots_) {
    if (s.op == nullptr || s.calls == 0) continue;  // free, or claimed by an op never run
    auto it = std::find_if(rows.begin(), rows.end(),
                           [&](const Row& r) { return std::strcmp(r.op, s.op) == 0; });
    if (it == rows.end()) {
      rows.push_back({s.op, s.calls, s.ticks});
    } else {
      it->calls += s.calls;
      it->ticks += s.ticks;
    }
  }
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.ticks > b.ticks; });
  const int64_t total = total_ticks();
  std::fprintf(stderr, "op profile (wall time per op):\n");
  for (const Row& r : rows) {
    std::fprintf(stderr, "  %-18s %8lld calls %10.3f ms %5.1f%%\n", r.op,
                 static_cast<long long>(r.calls), Nanos(r.ticks) / 1e6,
                 total > 0 ? 100.0 * static_cast<double>(r.ticks) / static_cast<double>(total)
                           : 0.0);
  }
}

}  // namespace mlaserve
