// OpProfile: wall time per op name, kept by the host backends when MLASERVE_PROFILE=1 and
// printed to stderr when the backend goes away.
//
// It runs between ops, so what it costs is counted as step overhead by whoever measures the
// ops against the step (tools/bench/graph_bench.cc). After an op that streamed gigabytes of
// weights little of what it touches is still cached, so it touches as little as it can:
// - its clock is the time-stamp counter, read with no memory access, where the processor
//   declares it invariant (CpuInfo::invariant_tsc: one rate in every power state) and
//   Linux keeps time with it (current clocksource `tsc`: synchronized across processors); a
//   steady_clock read goes through the vDSO's data page, which such an op has evicted.
//   Elsewhere (or not on x86) the clock is steady_clock in nanoseconds.
// - Add writes one fixed slot chosen by the name's address (open addressing, no allocation):
//   a single cache line, where a search of a list read several; a recorded op finds its slot
//   once, at capture, and adds to it inline (AddTo): no search and no call after each op.
//
// Thread-compatible: one thread (the backend's caller) calls Now and Add.
#ifndef MLASERVE_KERNELS_OP_PROFILE_H_
#define MLASERVE_KERNELS_OP_PROFILE_H_

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>

namespace mlaserve {

class OpProfile {
 public:
  // A profile when MLASERVE_PROFILE=1, else nullptr.
  static std::unique_ptr<OpProfile> FromEnvironment();

  // use_tsc: count time-stamp counter ticks (honoured only where the counter qualifies, above).
  explicit OpProfile(bool use_tsc = true);
  ~OpProfile();  // prints the table to stderr
  OpProfile(const OpProfile&) = delete;
  OpProfile& operator=(const OpProfile&) = delete;

  // Whether the clock is the time-stamp counter.
  bool counts_tsc() const { return tsc_; }

  // The clock, in ticks; only differences of two readings mean anything.
  int64_t Now() const {
#if defined(__x86_64__)
    if (tsc_) return static_cast<int64_t>(__builtin_ia32_rdtsc());
#endif
    return SteadyNanos();
  }

  // Where an op's calls and time are kept: one cache line.
  struct alignas(32) Slot {  // never across two cache lines
    const char* op = nullptr;
    int64_t calls = 0;
    int64_t ticks = 0;
  };

  // The slot of op `op`, a string that outlives the profile, claimed for it if new: found once
  // by a recorded dispatch, which adds to it with AddTo (no search after the op) and which a
  // graph prefetches with the op's other lines. Stable for the profile's life.
  // REQUIRES: fewer than kSlots distinct name addresses over the profile's life.
  Slot* Claim(const char* op);

  // Adds `ticks` (a difference of two Now() readings) to one call of a claimed slot's op.
  static void AddTo(Slot* slot, int64_t ticks) {
    ++slot->calls;
    slot->ticks += ticks;
  }
  // AddTo(Claim(op), ticks).
  void Add(const char* op, int64_t ticks) { AddTo(Claim(op), ticks); }

  // Sum of every Add so far: the time spent inside op bodies, in ticks.
  int64_t total_ticks() const;

  // `ticks` in nanoseconds, at the rate the clock has kept since the profile was made
  // (steady_clock against the counter over that span: finer the longer the profile lives).
  double Nanos(int64_t ticks) const;

  // Slots for distinct name addresses.
  static constexpr int kSlots = 64;

 private:
  // Where `op` is kept, or the free slot it would take.
  int SlotIndex(const char* op) const;

  static int64_t SteadyNanos() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  std::array<Slot, kSlots> slots_{};
  bool tsc_;
  int64_t start_ticks_;
  int64_t start_nanos_;
};

}  // namespace mlaserve

#endif  // MLASERVE_KERNELS_OP_PROFILE_H_
