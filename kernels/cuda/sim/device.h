// The device side of CUDA as kernel source sees it, for the host compiler: thread and block
// indices, barriers, warp collectives, atomics, shared memory and the fast-math intrinsics. Each
// built-in keeps CUDA's name and signature (the barrier and the collectives are macros that
// also record the source line, for error messages). Included through compat.cuh only.
#ifndef MLASERVE_KERNELS_CUDA_SIM_DEVICE_H_
#define MLASERVE_KERNELS_CUDA_SIM_DEVICE_H_

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cuda/sim/executor.h"

#define threadIdx (::mlaserve::sim::Self().thread_idx)
#define blockIdx (::mlaserve::sim::Self().block_idx)
#define blockDim (::mlaserve::sim::Self().block_dim)
#define gridDim (::mlaserve::sim::Self().grid_dim)
#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif

namespace mlaserve::sim {

inline constexpr int warpSize = 32;

template <typename T>
uint64_t ToBits(T v) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8,
                "shuffle of an unsupported type");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  return bits;
}
template <typename T>
T FromBits(uint64_t bits) {
  T v;
  std::memcpy(&v, &bits, sizeof(T));
  return v;
}

// Static shared memory of one declaration (MLASERVE_SHARED).
struct SharedKey {};

template <typename T>
T AtomicAdd(T* address, T value) {
  return std::atomic_ref<T>(*address).fetch_add(value, std::memory_order_relaxed);
}
template <typename T>
T AtomicMax(T* address, T value) {
  std::atomic_ref<T> a(*address);
  T old = a.load(std::memory_order_relaxed);
  while (old < value && !a.compare_exchange_weak(old, value, std::memory_order_relaxed)) {
  }
  return old;
}
template <typename T>
T AtomicMin(T* address, T value) {
  std::atomic_ref<T> a(*address);
  T old = a.load(std::memory_order_relaxed);
  while (old > value && !a.compare_exchange_weak(old, value, std::memory_order_relaxed)) {
  }
  return old;
}
template <typename T>
T AtomicCas(T* address, T compare, T value) {
  std::atomic_ref<T>(*address).compare_exchange_strong(compare, value, std::memory_order_relaxed);
  return compare;
}
template <typename T>
T AtomicExch(T* address, T value) {
  return std::atomic_ref<T>(*address).exchange(value, std::memory_order_relaxed);
}

}  // namespace mlaserve::sim

using ::mlaserve::sim::warpSize;

#define __syncthreads() ::mlaserve::sim::SyncThreads({__FILE__, __LINE__, __func__})
#define __syncwarp(...) \
  ::mlaserve::sim::SyncWarpAt({__FILE__, __LINE__, __func__} __VA_OPT__(, ) __VA_ARGS__)
#define __shfl_sync(mask, var, src, ...)                                                      \
  ::mlaserve::sim::ShflAt(::mlaserve::sim::WarpOpKind::kShfl, {__FILE__, __LINE__, __func__}, \
                          mask, var, src __VA_OPT__(, ) __VA_ARGS__)
#define __shfl_up_sync(mask, var, delta, ...)                                                   \
  ::mlaserve::sim::ShflAt(::mlaserve::sim::WarpOpKind::kShflUp, {__FILE__, __LINE__, __func__}, \
                          mask, var, delta __VA_OPT__(, ) __VA_ARGS__)
#define __shfl_down_sync(mask, var, delta, ...)                                                   \
  ::mlaserve::sim::ShflAt(::mlaserve::sim::WarpOpKind::kShflDown, {__FILE__, __LINE__, __func__}, \
                          mask, var, delta __VA_OPT__(, ) __VA_ARGS__)
#define __shfl_xor_sync(mask, var, lane_mask, ...)                                               \
  ::mlaserve::sim::ShflAt(::mlaserve::sim::WarpOpKind::kShflXor, {__FILE__, __LINE__, __func__}, \
                          mask, var, lane_mask __VA_OPT__(, ) __VA_ARGS__)
#define __ballot_sync(mask, pred)                                                     \
  static_cast<unsigned>(::mlaserve::sim::VoteAt(::mlaserve::sim::WarpOpKind::kBallot, \
                                                {__FILE__, __LINE__, __func__}, mask, pred))
#define __any_sync(mask, pred)                                                \
  static_cast<int>(::mlaserve::sim::VoteAt(::mlaserve::sim::WarpOpKind::kAny, \
                                           {__FILE__, __LINE__, __func__}, mask, pred))
#define __all_sync(mask, pred)                                                \
  static_cast<int>(::mlaserve::sim::VoteAt(::mlaserve::sim::WarpOpKind::kAll, \
                                           {__FILE__, __LINE__, __func__}, mask, pred))

namespace mlaserve::sim {

inline void SyncWarpAt(SourceSite site, unsigned mask = 0xffffffffu) {
  WarpCollective(WarpOpKind::kSyncWarp, mask, 0, 0, 32, site);
}
template <typename T>
T ShflAt(WarpOpKind kind, SourceSite site, unsigned mask, T var, int arg, int width = 32) {
  return FromBits<T>(WarpCollective(kind, mask, ToBits(var), arg, width, site));
}
inline uint64_t VoteAt(WarpOpKind kind, SourceSite site, unsigned mask, int pred) {
  return WarpCollective(kind, mask, pred != 0, 0, 32, site);
}

}  // namespace mlaserve::sim

inline unsigned __activemask() { return ::mlaserve::sim::ActiveMask(); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }

template <typename T>
T atomicAdd(T* address, T value) {
  return ::mlaserve::sim::AtomicAdd(address, value);
}
template <typename T>
T atomicMax(T* address, T value) {
  return ::mlaserve::sim::AtomicMax(address, value);
}
template <typename T>
T atomicMin(T* address, T value) {
  return ::mlaserve::sim::AtomicMin(address, value);
}
template <typename T>
T atomicCAS(T* address, T compare, T value) {
  return ::mlaserve::sim::AtomicCas(address, compare, value);
}
template <typename T>
T atomicExch(T* address, T value) {
  return ::mlaserve::sim::AtomicExch(address, value);
}

template <typename T>
T __ldg(const T* p) {
  return *p;
}

inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline int __float_as_int(float x) {
  return ::mlaserve::sim::FromBits<int>(::mlaserve::sim::ToBits(x));
}
inline float __int_as_float(int x) {
  return ::mlaserve::sim::FromBits<float>(::mlaserve::sim::ToBits(x));
}
inline unsigned __float_as_uint(float x) {
  return ::mlaserve::sim::FromBits<unsigned>(::mlaserve::sim::ToBits(x));
}
inline float __uint_as_float(unsigned x) {
  return ::mlaserve::sim::FromBits<float>(::mlaserve::sim::ToBits(x));
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }

#define MLASERVE_SHARED(T, name, dims)           \
  static ::mlaserve::sim::SharedKey name##_key_; \
  T(&name)                                       \
  dims = *reinterpret_cast<T(*) dims>(           \
      ::mlaserve::sim::BlockShared(&name##_key_, sizeof(T dims), alignof(T)))
#define MLASERVE_DYNAMIC_SHARED(T, name) T* name = static_cast<T*>(::mlaserve::sim::DynamicShared())

#endif  // MLASERVE_KERNELS_CUDA_SIM_DEVICE_H_
