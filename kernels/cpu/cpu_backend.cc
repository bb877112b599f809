#include "kernels/cpu/cpu_backend.h"

#include <omp.h>

#include <cstdlib>
#include <memory>

#include "kernels/check.h"
#include "kernels/cpu/cpu_kernels.h"

namespace mlaserve {
namespace {

int ResolveThreads(int num_threads) {
  MLASERVE_CHECK(num_threads >= 0);
  return num_threads > 0 ? num_threads : omp_get_num_procs();
}

char* AllocateArena(int num_threads) {
  const size_t bytes = static_cast<size_t>(num_threads) * CpuContext::kThreadScratchBytes;
  void* p = std::aligned_alloc(64, bytes);
  MLASERVE_CHECK_MSG(p != nullptr, "CPU backend scratch allocation failed");
  MaybePoison(p, bytes);
  return static_cast<char*>(p);
}

}  // namespace

CpuBackend::CpuBackend(int num_threads)
    : CpuBackend(ResolveThreads(num_threads), AllocateArena(ResolveThreads(num_threads))) {}

CpuBackend::CpuBackend(int num_threads, char* arena)
    : arena_(arena), ctx_(GetCpuKernels(SelectCpuIsa()), num_threads, arena) {}

CpuBackend::~CpuBackend() { std::free(arena_); }

std::unique_ptr<Backend> MakeCpuBackend(int num_threads) {
  return std::make_unique<CpuBackend>(num_threads);
}

}  // namespace mlaserve
