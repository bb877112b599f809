#include "server/cli/backend_selection.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/ref/ref_backend.h"
#ifdef MLASERVE_HAVE_CUDA
#include "kernels/cuda/device_info.h"
#endif

namespace mlaserve {
namespace {

int UsableCudaDevices() {
#ifdef MLASERVE_HAVE_CUDA
  return CudaDeviceCount();
#else
  return 0;
#endif
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const std::string& kind, int num_threads,
                                                       bool batch_invariant,
                                                       DType activation_dtype) {
  if (kind == "cpu") return MakeCpuBackend(num_threads, batch_invariant, activation_dtype);
  if (kind == "ref") return MakeRefBackend(activation_dtype);
  if (kind == "cuda" || kind == "auto") {
    const int devices = UsableCudaDevices();
    if (devices > 0) {
      // The CUDA kernel set is not part of this build yet; say so instead of pretending.
      return absl::UnimplementedError(
          "--backend=cuda: a CUDA device is present but this build has no CUDA kernel set");
    }
    if (kind == "cuda") {
      return absl::FailedPreconditionError(
          "--backend=cuda: no usable CUDA device (none found, or no driver); use --backend=cpu");
    }
    std::fprintf(stderr, "mlaserve: backend auto: no CUDA device, using the CPU backend\n");
    return MakeCpuBackend(num_threads, batch_invariant, activation_dtype);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--backend: unknown value \"", kind, "\" (auto, cpu, cuda or ref)"));
}

}  // namespace mlaserve
