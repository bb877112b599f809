// SiluMul and Add (kernels/params.h SiluMulParams, AddParams; match RefBackend::RunSiluMul and
// RunAdd). Grid-stride loops over rows x cols with 256-thread blocks; no shared memory. Rows
// may be strided (innermost contiguous). Add's out may alias a or b (each element is read and
// written by one thread). SiluMul computes in f32 (the ref in double).
#include "kernels/cuda/kernel_util.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/simple_ops.h"
#include "kernels/op_checks.h"
#include "kernels/shape_check.h"

namespace mlaserve::MLASERVE_CUDA_NS {
namespace {

constexpr int kThreads = 256;

// x: [rows, 2 * inter] f32 (gate ‖ up); out: [rows, inter] f32.
__global__ void SiluMulKernel(const float* x, int64_t x_stride, int64_t rows, int64_t inter,
                              float* out, int64_t out_stride) {
  const int64_t total = rows * inter;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / inter, i = e % inter;
    const float gate = x[r * x_stride + i], up = x[r * x_stride + inter + i];
    out[r * out_stride + i] = gate / (1.0f + expf(-gate)) * up;
  }
}

// a, b, out: [rows, cols] f32 with row strides.
__global__ void AddKernel(const float* a, int64_t a_stride, const float* b, int64_t b_stride,
                          int64_t rows, int64_t cols, float* out, int64_t out_stride) {
  const int64_t total = rows * cols;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / cols, c = e % cols;
    out[r * out_stride + c] = a[r * a_stride + c] + b[r * b_stride + c];
  }
}

}  // namespace

cudaError_t LaunchSiluMul(const SiluMulParams& p, cudaStream_t stream) {
  const RowsShape shape = CheckSiluMul(p);
  const int64_t rows = shape.rows, inter = shape.cols;
  if (rows * inter == 0) return cudaSuccess;
  return Launch(SiluMulKernel, dim3(GridFor(rows * inter, kThreads)), dim3(kThreads), 0, stream,
                p.x.ptr<const float>(), p.x.stride(0), rows, inter, p.out.ptr<float>(),
                p.out.stride(0));
}

cudaError_t LaunchAdd(const AddParams& p, cudaStream_t stream) {
  const RowsShape shape = CheckAdd(p);
  const int64_t rows = shape.rows, cols = shape.cols;
  if (rows * cols == 0) return cudaSuccess;
  return Launch(AddKernel, dim3(GridFor(rows * cols, kThreads)), dim3(kThreads), 0, stream,
                p.a.ptr<const float>(), p.a.stride(0), p.b.ptr<const float>(), p.b.stride(0), rows,
                cols, p.out.ptr<float>(), p.out.stride(0));
}

}  // namespace mlaserve::MLASERVE_CUDA_NS
