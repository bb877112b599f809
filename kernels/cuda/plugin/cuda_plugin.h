// The C entry points of mlaserve_cuda_plugin.so, the real (nvcc) CUDA backend as a module the
// daemon loads with dlopen only when it is asked to use a device, so that CPU serving never
// maps the CUDA runtime and cuBLAS (which, loaded into the process, also stopped the metrics
// server's civetweb from starting on the hosts this was built on). Both sides are built from one
// tree with one compiler, so a Backend* may cross.
#ifndef MLASERVE_KERNELS_CUDA_PLUGIN_CUDA_PLUGIN_H_
#define MLASERVE_KERNELS_CUDA_PLUGIN_CUDA_PLUGIN_H_

#include <cstddef>

namespace mlaserve {
class Backend;
}

extern "C" {
// Usable CUDA devices (0 without a driver or a device).
int mlaserve_cuda_device_count();
// A CUDA backend on `device` (activation_dtype: mlaserve::DType as an int), owned by the caller;
// nullptr with the reason in `error` (NUL-terminated, truncated to error_bytes) on failure.
mlaserve::Backend* mlaserve_new_cuda_backend(int device, bool batch_invariant, int activation_dtype,
                                             char* error, size_t error_bytes);
}

#endif  // MLASERVE_KERNELS_CUDA_PLUGIN_CUDA_PLUGIN_H_
