// Device discovery for --backend selection. Compiled only with MLASERVE_ENABLE_CUDA.
#include "kernels/cuda/device_info.h"

#include <cuda_runtime.h>

namespace mlaserve {

int CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
  return count;
}

}  // namespace mlaserve
