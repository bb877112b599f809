#include "kernels/cpu/cpu_backend.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <memory>
#include <string>

#include "kernels/check.h"
#include "kernels/cpu/cpu_bf16_multiply.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_stream_tuning.h"
#include "kernels/cpu/cpu_threads.h"

namespace mlaserve {
namespace {

int ResolveThreads(int num_threads) {
  MLASERVE_CHECK(num_threads >= 0);
  return num_threads > 0 ? num_threads : DetectCpuThreadBudget().threads;
}

// The placement for this process, tried on a scratch mapping when it interleaves: a refusal
// (errno into *refused) leaves the kernel's default.
NumaPlacement TriedNumaPlacement(int* refused) {
  NumaPlacement p = ChooseNumaPlacement(AffinityNumaNodes(), std::getenv("MLASERVE_CPU_NUMA"));
  *refused = 0;
  if (!p.interleave) return p;
  constexpr size_t kBytes = size_t{2} << 20;
  void* scratch = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  *refused = scratch == MAP_FAILED ? errno : InterleavePages(scratch, kBytes, p.nodes);
  if (scratch != MAP_FAILED) munmap(scratch, kBytes);
  if (*refused != 0) p.interleave = false;
  return p;
}

char* AllocateArena(int num_threads) {
  const size_t bytes = static_cast<size_t>(num_threads) * CpuContext::kThreadScratchBytes;
  void* p = std::aligned_alloc(64, bytes);
  MLASERVE_CHECK_MSG(p != nullptr, "CPU backend scratch allocation failed");
  MaybePoison(p, bytes);
  return static_cast<char*>(p);
}

}  // namespace

CpuBackend::CpuBackend(int num_threads, bool batch_invariant, DType activation_dtype)
    : CpuBackend(GetCpuKernels(SelectIsaForActivations(activation_dtype).isa), num_threads,
                 batch_invariant, activation_dtype) {}

CpuBackend::CpuBackend(const CpuKernels& kernels, int num_threads, bool batch_invariant,
                       DType activation_dtype)
    : HostBackend(activation_dtype),
      pool_(std::make_unique<CpuThreadPool>(ResolveThreads(num_threads))),
      arena_(AllocateArena(pool_->size())),
      ctx_(kernels, *pool_, arena_, batch_invariant, activation_dtype),
      numa_(TriedNumaPlacement(&numa_refused_errno_)),
      decode_tiles_(kernels.fixed_tiles
                        ? ChooseDecodeTiles(std::getenv("MLASERVE_CPU_DECODE_TILES"),
                                            activation_dtype == DType::kBF16)
                        : DecodeTiles{-1, "no tiles in the " +
                                              std::string(CpuIsaName(kernels.isa)) + " build"}) {
  ctx_.set_decode_tile_min_bytes(decode_tiles_.min_bytes_per_thread);
  pool_->set_wait_prefetch(next_op_lines());
  pool_->set_end_reader(next_step_reader());
  TuneStreaming(ctx_);
}

CpuBackend::~CpuBackend() { std::free(arena_); }

void CpuBackend::RunHostTasks(int64_t count, absl::FunctionRef<void(int64_t task, int lane)> fn) {
  const int threads = static_cast<int>(std::min<int64_t>(count, num_threads()));
  if (threads <= 1) return Backend::RunHostTasks(count, fn);
  // Tasks may differ in cost (a greedy row beside a top-p one), so each thread takes the next.
  std::atomic<int64_t> next{0};
  ctx_.Parallel(threads, [&](int lane, int) {
    for (int64_t task = next.fetch_add(1); task < count; task = next.fetch_add(1)) fn(task, lane);
  });
}

void CpuBackend::PlaceLargeBuffer(void* data, size_t bytes) {
  // A refusal after the start-up try changes nothing: the buffer keeps the default placement.
  if (numa_.interleave) InterleavePages(data, bytes, numa_.nodes);
}

std::unique_ptr<Backend> MakeCpuBackend(int num_threads, bool batch_invariant,
                                        DType activation_dtype) {
  return std::make_unique<CpuBackend>(num_threads, batch_invariant, activation_dtype);
}

}  // namespace mlaserve
