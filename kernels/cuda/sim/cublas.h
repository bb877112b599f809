// The cuBLAS subset the project's host code calls, in namespace mlaserve::sim under cuBLAS's own
// names (sim.h routes the global names here). It is a column-major reference of cuBLAS's
// documented semantics for exactly these calls — transposes, leading dimensions, strides, batch
// counts, data, compute and scale types, alpha and beta (beta == 0: C is not read) — and rejects
// what cuBLAS rejects with the status it returns. Calls are stream-ordered like kernel launches,
// so they are recorded during stream capture. Supported types: A and B both CUDA_R_32F or both
// CUDA_R_16BF, C CUDA_R_32F or (with bf16 inputs) CUDA_R_16BF, compute CUBLAS_COMPUTE_32F (the
// _FAST_ variants compute in f32 here). Products are summed in f32 in ascending k.
#ifndef MLASERVE_KERNELS_CUDA_SIM_CUBLAS_H_
#define MLASERVE_KERNELS_CUDA_SIM_CUBLAS_H_

#include <cublas_api.h>

namespace mlaserve::sim {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle);
cublasStatus_t cublasDestroy_v2(cublasHandle_t handle);
cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream);
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode);
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace, size_t bytes);
const char* cublasGetStatusString(cublasStatus_t status);

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void* alpha,
                            const void* a, cudaDataType a_type, int lda, const void* b,
                            cudaDataType b_type, int ldb, const void* beta, void* c,
                            cudaDataType c_type, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo);
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                          cublasOperation_t transb, int m, int n, int k,
                                          const void* alpha, const void* a, cudaDataType a_type,
                                          int lda, long long stride_a, const void* b,
                                          cudaDataType b_type, int ldb, long long stride_b,
                                          const void* beta, void* c, cudaDataType c_type, int ldc,
                                          long long stride_c, int batch_count,
                                          cublasComputeType_t compute, cublasGemmAlgo_t algo);
cublasStatus_t cublasGemmBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                   cublasOperation_t transb, int m, int n, int k, const void* alpha,
                                   const void* const a[], cudaDataType a_type, int lda,
                                   const void* const b[], cudaDataType b_type, int ldb,
                                   const void* beta, void* const c[], cudaDataType c_type, int ldc,
                                   int batch_count, cublasComputeType_t compute,
                                   cublasGemmAlgo_t algo);

}  // namespace mlaserve::sim

#endif  // MLASERVE_KERNELS_CUDA_SIM_CUBLAS_H_
