// Launchers of the MoE ops on a CUDA stream (implemented in kernels/cuda/moe.cu).
// Same contract as kernels/cuda/attention_ops.h:
// enqueue only, no allocation, no synchronisation, per-step values from device tensors.
// Semantics: kernels/params.h.
#ifndef MLASERVE_KERNELS_CUDA_MOE_OPS_H_
#define MLASERVE_KERNELS_CUDA_MOE_OPS_H_

#include "kernels/cuda/compat.cuh"
#include "kernels/dtype.h"
#include "kernels/params.h"

namespace mlaserve::MLASERVE_CUDA_NS {

cudaError_t LaunchMoeRoute(const MoeRouteParams& p, cudaStream_t stream);
cudaError_t LaunchMoeAlignBlockSize(const MoeAlignParams& p, cudaStream_t stream);
// activation_dtype: Backend::activation_dtype (kBF16 rounds x and the expert activations that
// meet bf16 weights). batch_invariant: the rows of p.decode_tokens take the GEMV kernel and the
// others the tiled one, each with one order per element (otherwise the choice follows the
// call's rows per expert).
cudaError_t LaunchMoeExperts(const MoeExpertsParams& p, DType activation_dtype,
                             bool batch_invariant, cublasHandle_t cublas, cudaStream_t stream);

}  // namespace mlaserve::MLASERVE_CUDA_NS

#endif  // MLASERVE_KERNELS_CUDA_MOE_OPS_H_
