// Paged latent KV cache (kernels/params.h KvWriteParams, GatherKvParams; match
// RefBackend::RunWriteKvCache and RunGatherKvCache).
// WriteKvCache — grid: one block per token; block: kRowThreads threads striding over the cache
//   row latent ‖ k_pe; a negative slot skips the token (padding), as does a slot past the cache
//   (a caller bug the ref aborts on). The cache is contiguous, f32 or bf16 (rounded).
// GatherKvCache — grid: one block per output row; block: kRowThreads threads over kv_dim. The
//   block finds its sequence by binary search of cu_seq_lens (device data, so the op is
//   capturable), then its cache row through the block table; rows past cu_seq_lens[num_seqs]
//   are left untouched, like the ref. No shared memory in either kernel.
#include "kernels/cuda/kernel_util.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/simple_ops.h"
#include "kernels/op_checks.h"
#include "kernels/shape_check.h"

namespace mlaserve::MLASERVE_CUDA_NS {
namespace {

// latent: [num_tokens, rank] f32; k_pe: [num_tokens, rope_dim] f32; slots: [num_tokens] i32;
// cache: [num_slots, rank + rope_dim] f32|bf16 contiguous.
__global__ void WriteKvCacheKernel(const float* latent, int64_t latent_stride, int64_t rank,
                                   const float* k_pe, int64_t k_pe_stride, int64_t rope_dim,
                                   const int32_t* slots, int64_t slot_stride, void* cache,
                                   bool cache_bf16, int64_t num_slots) {
  const int64_t t = blockIdx.x;
  const int32_t slot = slots[t * slot_stride];
  if (slot < 0 || slot >= num_slots) return;
  const int64_t row = rank + rope_dim;
  for (int64_t i = threadIdx.x; i < row; i += blockDim.x) {
    const float v = i < rank ? latent[t * latent_stride + i] : k_pe[t * k_pe_stride + i - rank];
    StoreFromF32(cache, cache_bf16, slot * row + i, v);
  }
}

// cache: [num_blocks, block_size, kv_dim] f32|bf16 contiguous; block_tables: [num_seqs,
// max_blocks] i32 (strides bt_s, bt_b); cu: [num_seqs + 1] i32; starts: [num_seqs] i32;
// out: [total_tokens, kv_dim] f32.
__global__ void GatherKvCacheKernel(const void* cache, bool cache_bf16, int64_t num_blocks,
                                    int64_t block_size, int64_t kv_dim, const int32_t* block_tables,
                                    int64_t bt_s, int64_t bt_b, int64_t max_blocks,
                                    const int32_t* cu, int64_t cu_stride, const int32_t* starts,
                                    int64_t starts_stride, int64_t num_seqs, float* out,
                                    int64_t out_stride) {
  const int64_t r = blockIdx.x;
  if (r >= cu[num_seqs * cu_stride]) return;
  int64_t lo = 0, hi = num_seqs - 1;  // the last sequence s with cu[s] <= r
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (cu[mid * cu_stride] <= r) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const int64_t pos = starts[lo * starts_stride] + r - cu[lo * cu_stride];
  if (pos < 0 || pos / block_size >= max_blocks) return;
  const int32_t block = block_tables[lo * bt_s + (pos / block_size) * bt_b];
  if (block < 0 || block >= num_blocks) return;
  const int64_t row = block * block_size + pos % block_size;
  for (int64_t c = threadIdx.x; c < kv_dim; c += blockDim.x) {
    out[r * out_stride + c] = LoadAsF32(cache, cache_bf16, row * kv_dim + c);
  }
}

}  // namespace

cudaError_t LaunchWriteKvCache(const KvWriteParams& p, cudaStream_t stream) {
  const KvWriteShape shape = CheckKvWrite(p);
  const int64_t num_tokens = shape.num_tokens, rank = shape.rank, rope_dim = shape.rope_dim;
              CheckContiguous(p.kv_cache, "WriteKvCache.kv_cache");
              if (num_tokens == 0) return cudaSuccess;
              return Launch(WriteKvCacheKernel, dim3(static_cast<unsigned>(num_tokens)),
                            dim3(kRowThreads), 0, stream, p.latent.ptr<const float>(),
                            p.latent.stride(0), rank, p.k_pe.ptr<const float>(), p.k_pe.stride(0),
                            rope_dim, p.slot_mapping.ptr<const int32_t>(), p.slot_mapping.stride(0),
                            p.kv_cache.data(), p.kv_cache.dtype() == DType::kBF16,
                            p.kv_cache.size(0) * p.kv_cache.size(1));
}

cudaError_t LaunchGatherKvCache(const GatherKvParams& p, cudaStream_t stream) {
  const GatherKvShape shape = CheckGatherKv(p);
  const int64_t kv_dim = shape.kv_dim, num_seqs = shape.num_seqs, rows = shape.num_out;
  if (rows == 0 || num_seqs == 0 || kv_dim == 0) return cudaSuccess;
  return Launch(GatherKvCacheKernel, dim3(static_cast<unsigned>(rows)), dim3(kRowThreads), 0,
                stream, static_cast<const void*>(p.kv_cache.data()),
                p.kv_cache.dtype() == DType::kBF16, p.kv_cache.size(0), p.kv_cache.size(1), kv_dim,
                p.block_tables.ptr<const int32_t>(), p.block_tables.stride(0),
                p.block_tables.stride(1), p.block_tables.size(1),
                p.cu_seq_lens.ptr<const int32_t>(), p.cu_seq_lens.stride(0),
                p.seq_starts.ptr<const int32_t>(), p.seq_starts.stride(0), num_seqs,
                p.out.ptr<float>(), p.out.stride(0));
}

}  // namespace mlaserve::MLASERVE_CUDA_NS
