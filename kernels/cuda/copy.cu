// Copy: strided copy of up to 4-D views with conversion to dst's dtype: f32 <-> bf16 (round to
// nearest even), same dtype bit for bit, i32 -> i32 (kernels/params.h CopyParams; matches
// RefBackend::RunCopy). The shape is padded to 4 dimensions with unit extents; a grid-stride
// loop of 256-thread blocks walks the elements in row-major order of the shape, each thread
// decomposing its linear index. No shared memory. src and dst must not overlap (checked).
#include "kernels/cuda/kernel_util.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/simple_ops.h"
#include "kernels/op_checks.h"
#include "kernels/shape_check.h"

namespace mlaserve::MLASERVE_CUDA_NS {
namespace {

constexpr int kThreads = 256;

// Element types of a copy side: 4-byte raw (f32 or i32 copied to the same type), or a float
// of either width converted through f32.
enum class Side : int { kF32, kBF16, kI32 };

struct CopyShape {
  int64_t size[4];        // extents, outermost first, padded with 1
  int64_t src_stride[4];  // elements
  int64_t dst_stride[4];
};

__global__ void CopyKernel(const void* src, Side src_type, void* dst, Side dst_type, CopyShape s) {
  const int64_t total = s.size[0] * s.size[1] * s.size[2] * s.size[3];
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t rest = e, so = 0, dof = 0;
    for (int d = 3; d >= 0; --d) {
      const int64_t i = rest % s.size[d];
      rest /= s.size[d];
      so += i * s.src_stride[d];
      dof += i * s.dst_stride[d];
    }
    if (src_type == dst_type) {
      if (src_type == Side::kBF16) {
        static_cast<uint16_t*>(dst)[dof] = static_cast<const uint16_t*>(src)[so];
      } else {
        static_cast<uint32_t*>(dst)[dof] = static_cast<const uint32_t*>(src)[so];
      }
    } else {
      StoreFromF32(dst, dst_type == Side::kBF16, dof, LoadAsF32(src, src_type == Side::kBF16, so));
    }
  }
}

Side SideOf(DType t) {
  switch (t) {
    case DType::kF32:
      return Side::kF32;
    case DType::kBF16:
      return Side::kBF16;
    default:
      return Side::kI32;
  }
}

}  // namespace

cudaError_t LaunchCopy(const CopyParams& p, cudaStream_t stream) {
  CheckCopy(p);
  const int ndim = p.src.ndim();
                 MLASERVE_CHECK(!Overlaps(p.src, p.dst));
                 CopyShape s{};
                 const int pad = 4 - ndim;
                 for (int d = 0; d < 4; ++d) {
                   s.size[d] = d < pad ? 1 : p.src.size(d - pad);
                   s.src_stride[d] = d < pad ? 0 : p.src.stride(d - pad);
                   s.dst_stride[d] = d < pad ? 0 : p.dst.stride(d - pad);
                 }
                 const int64_t total = p.src.numel();
                 if (total == 0) return cudaSuccess;
                 return Launch(CopyKernel, dim3(GridFor(total, kThreads)), dim3(kThreads), 0,
                               stream, static_cast<const void*>(p.src.data()),
                               SideOf(p.src.dtype()), p.dst.data(), SideOf(p.dst.dtype()), s);
}

}  // namespace mlaserve::MLASERVE_CUDA_NS
