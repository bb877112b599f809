// The SIMT execution model of the simulator: a launch's blocks are spread over a few worker OS
// threads, and each block's threads run as fibers on one of them (fiber.h), switching only where
// CUDA threads synchronise. The device built-ins of device.h call into here.
//
// Strictness, where a GPU would silently misbehave or a bug could hide:
// - __syncthreads() is a real barrier; it is an error (kernel, block and threads named) when the
//   live threads of a block wait at different barriers or some wait at a barrier while the rest
//   wait in a warp collective;
// - warp collectives run in lockstep over the lanes named in their mask: the caller must be in
//   its mask, every named lane must arrive at the same collective with the same mask, and a lane
//   that exited or does not exist is an error;
// - shared memory (static and dynamic) is filled with 0xFF at every block start, so a read
//   before any write gives NaN;
// - the order in which a block's threads run between synchronisations is selectable (forward,
//   reverse, seeded shuffle), because one order can hide a missing barrier that another exposes.
// A kernel error ends its block; the launch then fails with cudaErrorLaunchFailure, sticky as a
// device fault is, and LastKernelError() says what happened.
#ifndef MLASERVE_KERNELS_CUDA_SIM_EXECUTOR_H_
#define MLASERVE_KERNELS_CUDA_SIM_EXECUTOR_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace mlaserve::sim {

enum class Schedule { kForward, kReverse, kShuffle };

// The thread order within blocks: MLASERVE_SIM_SCHEDULE=forward|reverse|shuffle[:seed] at start-up
// (forward by default), or SetSchedule. Thread-safe; takes effect at the next launch.
void SetSchedule(Schedule schedule, uint64_t seed = 1);
Schedule CurrentSchedule();

// One simulated CUDA thread, as the device built-ins see it.
struct ThreadContext {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
};
// The running thread's context. REQUIRES: called from kernel code.
const ThreadContext& Self();

// A kernel launch, ready to run: `body` calls the kernel with its by-value arguments.
struct LaunchSpec {
  std::string kernel_name;
  dim3 grid;
  dim3 block;
  size_t dynamic_smem_bytes = 0;
  std::function<void()> body;
};

// Runs every block of `spec`; cudaSuccess, or cudaErrorLaunchFailure after a kernel error (the
// first one's description in LastKernelError()).
cudaError_t RunLaunch(const LaunchSpec& spec);
std::string LastKernelError();

// Device built-ins (see device.h), called from kernel code. `site` is where the built-in is
// called: file, line and the enclosing function (the kernel, or a device function it calls).
struct SourceSite {
  const char* file;
  int line;
  const char* function;
};
void SyncThreads(SourceSite site);
enum class WarpOpKind { kShfl, kShflUp, kShflDown, kShflXor, kBallot, kAny, kAll, kSyncWarp };
// The collective of the calling lane: `value` is its operand (bits of the shuffled value, or the
// predicate), `arg` the source lane, delta or xor mask; returns the lane's result bits.
uint64_t WarpCollective(WarpOpKind kind, unsigned mask, uint64_t value, int arg, int width,
                        SourceSite site);
unsigned ActiveMask();
// Storage of the static shared declaration identified by `key` in the running block.
void* BlockShared(const void* key, size_t bytes, size_t align);
void* DynamicShared();

}  // namespace mlaserve::sim

#endif  // MLASERVE_KERNELS_CUDA_SIM_EXECUTOR_H_
