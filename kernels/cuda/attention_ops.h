// Launchers of the MLA attention ops on a CUDA stream (implemented in
// kernels/cuda/mla_attention.cu). Contract for every launcher: it only enqueues
// work on `stream` (legal during stream capture), never allocates and never synchronises; every
// per-step value comes from device tensors in the params, never from host reads of device data.
// Returns the launch error, cudaSuccess when the work was enqueued. Semantics: kernels/params.h.
#ifndef MLASERVE_KERNELS_CUDA_ATTENTION_OPS_H_
#define MLASERVE_KERNELS_CUDA_ATTENTION_OPS_H_

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/compat.cuh"
#include "kernels/params.h"

namespace mlaserve::MLASERVE_CUDA_NS {

// Device scratch for the attention ops, allocated once by CudaBackend at construction.
inline constexpr size_t kAttentionWorkspaceBytes = size_t{64} << 20;
struct AttentionWorkspace {
  void* data = nullptr;  // device memory, kAttentionWorkspaceBytes long
  size_t bytes = 0;
  int num_sms = 0;       // multiprocessors of the device (split-KV scheduling)
};

// The split-KV workers of a decode over `num_heads` (>= 1) heads: two blocks per multiprocessor
// over all heads (Backend::mla_decode_split_workers), at least one.
inline int64_t MlaDecodeWorkers(const AttentionWorkspace& ws, int64_t num_heads) {
  const int64_t blocks = 2 * int64_t{ws.num_sms};
  return blocks > num_heads ? (blocks + num_heads - 1) / num_heads : 1;
}

cudaError_t LaunchMlaDecode(const MlaDecodeParams& p, const AttentionWorkspace& ws,
                            cudaStream_t stream);
cudaError_t LaunchMlaPrefill(const MlaPrefillParams& p, const AttentionWorkspace& ws,
                             cublasHandle_t cublas, cudaStream_t stream);
cudaError_t LaunchMergeAttn(const MergeAttnParams& p, cudaStream_t stream);

}  // namespace mlaserve::MLASERVE_CUDA_NS

#endif  // MLASERVE_KERNELS_CUDA_ATTENTION_OPS_H_
