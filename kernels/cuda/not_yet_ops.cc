// Placeholders for the MLA and MoE launchers until their kernels land: each reports
// cudaErrorNotSupported, which CudaBackend turns into "<op> is not implemented in this build".
#include "kernels/cuda/attention_ops.h"
#include "kernels/cuda/moe_ops.h"

namespace mlaserve::MLASERVE_CUDA_NS {

cudaError_t LaunchMlaDecode(const MlaDecodeParams&, const AttentionWorkspace&, cudaStream_t) {
  return cudaErrorNotSupported;
}
cudaError_t LaunchMlaPrefill(const MlaPrefillParams&, const AttentionWorkspace&, cublasHandle_t,
                             cudaStream_t) {
  return cudaErrorNotSupported;
}
cudaError_t LaunchMergeAttn(const MergeAttnParams&, cudaStream_t) {
  return cudaErrorNotSupported;
}
cudaError_t LaunchMoeRoute(const MoeRouteParams&, cudaStream_t) { return cudaErrorNotSupported; }
cudaError_t LaunchMoeAlignBlockSize(const MoeAlignParams&, cudaStream_t) {
  return cudaErrorNotSupported;
}
cudaError_t LaunchMoeExperts(const MoeExpertsParams&, DType, cublasHandle_t, cudaStream_t) {
  return cudaErrorNotSupported;
}

}  // namespace mlaserve::MLASERVE_CUDA_NS
