#include "kernels/cuda/plugin/cuda_plugin.h"

#include <cstdio>
#include <memory>
#include <string>

#include "kernels/cuda/cuda_backend_factory.h"
#include "kernels/cuda/device_info.h"

extern "C" int mlaserve_cuda_device_count() { return mlaserve::CudaDeviceCount(); }

extern "C" mlaserve::Backend* mlaserve_new_cuda_backend(int device, bool batch_invariant,
                                                        int activation_dtype, char* error,
                                                        size_t error_bytes) {
  auto backend = mlaserve::cuda::NewCudaBackend(
      {.device = device,
       .batch_invariant = batch_invariant,
       .activation_dtype = static_cast<mlaserve::DType>(activation_dtype)});
  if (!backend.ok()) {
    std::snprintf(error, error_bytes, "%s", std::string(backend.status().ToString()).c_str());
    return nullptr;
  }
  return backend->release();
}
