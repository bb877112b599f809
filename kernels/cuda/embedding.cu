// Embedding: out[t, :] = table[ids[t], :] (kernels/params.h EmbeddingParams; matches
// RefBackend::RunEmbedding).
// Grid: one block per token; block: kRowThreads threads striding over the hidden dimension.
// No shared memory. Table rows may be strided (innermost contiguous), f32 or bf16. An id
// outside [0, vocab) is a caller bug the ref backend aborts on; here the row is left unwritten.
#include "kernels/cuda/kernel_util.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/simple_ops.h"
#include "kernels/op_checks.h"
#include "kernels/shape_check.h"

namespace mlaserve::MLASERVE_CUDA_NS {
namespace {

// ids: [num_tokens] i32 (stride ids_stride); table: [vocab, hidden] f32|bf16 (row stride
// table_stride); out: [num_tokens, hidden] f32 (row stride out_stride).
__global__ void EmbeddingKernel(const int32_t* ids, int64_t ids_stride, const void* table,
                                bool table_bf16, int64_t table_stride, int64_t vocab,
                                int64_t hidden, float* out, int64_t out_stride) {
  const int64_t t = blockIdx.x;
  const int32_t id = ids[t * ids_stride];
  if (id < 0 || id >= vocab) return;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
    out[t * out_stride + i] = LoadAsF32(table, table_bf16, id * table_stride + i);
  }
}

}  // namespace

cudaError_t LaunchEmbedding(const EmbeddingParams& p, cudaStream_t stream) {
  const EmbeddingShape shape = CheckEmbedding(p);
  const int64_t num_tokens = shape.num_tokens, hidden = shape.hidden;
  if (num_tokens == 0 || hidden == 0) return cudaSuccess;
  return Launch(EmbeddingKernel, dim3(static_cast<unsigned>(num_tokens)), dim3(kRowThreads), 0,
                stream, p.ids.ptr<const int32_t>(), p.ids.stride(0),
                static_cast<const void*>(p.table.data()), p.table.dtype() == DType::kBF16,
                p.table.stride(0), p.table.size(0), hidden, p.out.ptr<float>(), p.out.stride(0));
}

}  // namespace mlaserve::MLASERVE_CUDA_NS
