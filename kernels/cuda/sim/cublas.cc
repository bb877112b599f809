#include "kernels/cuda/sim/cublas.h"

#include <cuda_bf16.h>

#include <cstdint>
#include <vector>

#include "kernels/cuda/sim/runtime.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
};

namespace mlaserve::sim {
namespace {

struct Gemm {
  cublasOperation_t transa, transb;
  int m, n, k;
  float alpha, beta;
  cudaDataType a_type, b_type, c_type;
  int lda, ldb, ldc;
};

size_t TypeBytes(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }

float Load(const void* p, cudaDataType t, int64_t i) {
  if (t == CUDA_R_32F) return static_cast<const float*>(p)[i];
  return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}

void Store(void* p, cudaDataType t, int64_t i, float v) {
  if (t == CUDA_R_32F) {
    static_cast<float*>(p)[i] = v;
  } else {
    static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16(v);
  }
}

// cuBLAS's argument checks (cublasGemmEx's documentation).
cublasStatus_t Validate(const Gemm& g, cublasComputeType_t compute, int batch_count) {
  auto op_ok = [](cublasOperation_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T; };
  if (!op_ok(g.transa) || !op_ok(g.transb)) return CUBLAS_STATUS_INVALID_VALUE;
  if (g.m < 0 || g.n < 0 || g.k < 0 || batch_count < 0) return CUBLAS_STATUS_INVALID_VALUE;
  const int rows_a = g.transa == CUBLAS_OP_N ? g.m : g.k;
  const int rows_b = g.transb == CUBLAS_OP_N ? g.k : g.n;
  if (g.lda < (rows_a > 1 ? rows_a : 1) || g.ldb < (rows_b > 1 ? rows_b : 1) ||
      g.ldc < (g.m > 1 ? g.m : 1)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const bool f32 = g.a_type == CUDA_R_32F && g.b_type == CUDA_R_32F && g.c_type == CUDA_R_32F;
  const bool bf16 = g.a_type == CUDA_R_16BF && g.b_type == CUDA_R_16BF &&
                    (g.c_type == CUDA_R_32F || g.c_type == CUDA_R_16BF);
  if (!f32 && !bf16) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_TF32 &&
      compute != CUBLAS_COMPUTE_32F_FAST_16BF && compute != CUBLAS_COMPUTE_32F_PEDANTIC) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  return CUBLAS_STATUS_SUCCESS;
}

// C = alpha · op(A) · op(B) + beta · C, column-major.
void Reference(const Gemm& g, const void* a, const void* b, void* c) {
  for (int j = 0; j < g.n; ++j) {
    for (int i = 0; i < g.m; ++i) {
      float sum = 0.0f;
      for (int l = 0; l < g.k; ++l) {
        const int64_t ai =
            g.transa == CUBLAS_OP_N ? i + int64_t{l} * g.lda : l + int64_t{i} * g.lda;
        const int64_t bi =
            g.transb == CUBLAS_OP_N ? l + int64_t{j} * g.ldb : j + int64_t{l} * g.ldb;
        sum += Load(a, g.a_type, ai) * Load(b, g.b_type, bi);
      }
      const int64_t ci = i + int64_t{j} * g.ldc;
      const float prior = g.beta == 0.0f ? 0.0f : g.beta * Load(c, g.c_type, ci);
      Store(c, g.c_type, ci, g.alpha * sum + prior);
    }
  }
}

cublasStatus_t Submit(cublasHandle_t handle, const Gemm& g, std::vector<const void*> as,
                      std::vector<const void*> bs, std::vector<void*> cs) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  const cudaError_t e = Enqueue(handle->stream, [g, as, bs, cs] {
    for (size_t i = 0; i < cs.size(); ++i) Reference(g, as[i], bs[i], cs[i]);
    return cudaSuccess;
  });
  return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

Gemm MakeGemm(cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
              const void* alpha, cudaDataType a_type, int lda, cudaDataType b_type, int ldb,
              const void* beta, cudaDataType c_type, int ldc) {
  return Gemm{transa,
              transb,
              m,
              n,
              k,
              *static_cast<const float*>(alpha),
              *static_cast<const float*>(beta),
              a_type,
              b_type,
              c_type,
              lda,
              ldb,
              ldc};
}

}  // namespace

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  *handle = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t) {
  return handle == nullptr ? CUBLAS_STATUS_NOT_INITIALIZED : CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void*, size_t) {
  return handle == nullptr ? CUBLAS_STATUS_NOT_INITIALIZED : CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    default:
      return "CUBLAS_STATUS (simulator)";
  }
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void* alpha,
                            const void* a, cudaDataType a_type, int lda, const void* b,
                            cudaDataType b_type, int ldb, const void* beta, void* c,
                            cudaDataType c_type, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t) {
  const Gemm g =
      MakeGemm(transa, transb, m, n, k, alpha, a_type, lda, b_type, ldb, beta, c_type, ldc);
  if (cublasStatus_t s = Validate(g, compute, 1); s != CUBLAS_STATUS_SUCCESS) return s;
  return Submit(handle, g, {a}, {b}, {c});
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                          cublasOperation_t transb, int m, int n, int k,
                                          const void* alpha, const void* a, cudaDataType a_type,
                                          int lda, long long stride_a, const void* b,
                                          cudaDataType b_type, int ldb, long long stride_b,
                                          const void* beta, void* c, cudaDataType c_type, int ldc,
                                          long long stride_c, int batch_count,
                                          cublasComputeType_t compute, cublasGemmAlgo_t) {
  const Gemm g =
      MakeGemm(transa, transb, m, n, k, alpha, a_type, lda, b_type, ldb, beta, c_type, ldc);
  if (cublasStatus_t s = Validate(g, compute, batch_count); s != CUBLAS_STATUS_SUCCESS) return s;
  std::vector<const void*> as, bs;
  std::vector<void*> cs;
  for (int i = 0; i < batch_count; ++i) {
    as.push_back(static_cast<const char*>(a) + i * stride_a * TypeBytes(a_type));
    bs.push_back(static_cast<const char*>(b) + i * stride_b * TypeBytes(b_type));
    cs.push_back(static_cast<char*>(c) + i * stride_c * TypeBytes(c_type));
  }
  return Submit(handle, g, std::move(as), std::move(bs), std::move(cs));
}

cublasStatus_t cublasGemmBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                   cublasOperation_t transb, int m, int n, int k, const void* alpha,
                                   const void* const a[], cudaDataType a_type, int lda,
                                   const void* const b[], cudaDataType b_type, int ldb,
                                   const void* beta, void* const c[], cudaDataType c_type, int ldc,
                                   int batch_count, cublasComputeType_t compute, cublasGemmAlgo_t) {
  const Gemm g =
      MakeGemm(transa, transb, m, n, k, alpha, a_type, lda, b_type, ldb, beta, c_type, ldc);
  if (cublasStatus_t s = Validate(g, compute, batch_count); s != CUBLAS_STATUS_SUCCESS) return s;
  // The pointer arrays live in device memory and are read when the call runs, as on a device.
  const Gemm copy = g;
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  const cudaError_t e = Enqueue(handle->stream, [copy, a, b, c, batch_count] {
    for (int i = 0; i < batch_count; ++i) Reference(copy, a[i], b[i], c[i]);
    return cudaSuccess;
  });
  return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

}  // namespace mlaserve::sim
