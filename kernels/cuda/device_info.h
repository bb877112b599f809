// Host-only declarations for CUDA device discovery (no CUDA headers here).
#ifndef MLASERVE_KERNELS_CUDA_DEVICE_INFO_H_
#define MLASERVE_KERNELS_CUDA_DEVICE_INFO_H_

namespace mlaserve {

// Number of usable CUDA devices; 0 when there is no driver or no device.
int CudaDeviceCount();

}  // namespace mlaserve

#endif  // MLASERVE_KERNELS_CUDA_DEVICE_INFO_H_
