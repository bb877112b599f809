// Row-wise ops: embedding, RMSNorm, SiLU·mul, add, copy, rotary embedding and the paged latent
// cache writes and gathers. Memory-bound; rows are split over the team when there are enough.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/cpu_context.h"
#include "kernels/op_checks.h"
#include "kernels/shape_check.h"

namespace mlaserve {
namespace {

// dst[i] = src[i] converted, for f32/bf16 to f32/bf16 and i32 to i32.
void ConvertRow(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n) {
  if (src_dtype == dst_dtype) {
    std::memcpy(dst, src, static_cast<size_t>(n) * DTypeSize(src_dtype));
  } else if (src_dtype == DType::kBF16) {
    const uint16_t* s = static_cast<const uint16_t*>(src);
    float* d = static_cast<float*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = Bf16ToF32(s[i]);
  } else {
    const float* s = static_cast<const float*>(src);
    uint16_t* d = static_cast<uint16_t*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = F32ToBf16(s[i]);
  }
}

template <class T>
T* At(const TensorView& v, int64_t i0, int64_t i1 = 0, int64_t i2 = 0) {
  int64_t off = i0 * v.stride(0);
  if (v.ndim() > 1) off += i1 * v.stride(1);
  if (v.ndim() > 2) off += i2 * v.stride(2);
  return static_cast<T*>(v.data()) + off;
}

char* ByteAt(const TensorView& v, int64_t elem_offset) {
  return static_cast<char*>(v.data()) + elem_offset * static_cast<int64_t>(DTypeSize(v.dtype()));
}

// Runs row(r) for r < rows, split over the team when rows * row_cost is large.
template <class Fn>
void ForRows(const CpuContext& ctx, int64_t rows, int64_t row_cost, Fn&& row) {
  const int threads = rows < 2 ? 1 : ctx.ThreadsFor(rows * row_cost);
  ctx.Parallel(threads, [&](int t, int team) {
    const Range r = SplitRange(rows, team, t);
    for (int64_t i = r.begin; i < r.end; ++i) row(i);
  });
}

}  // namespace

void CpuEmbedding(const CpuContext& ctx, const EmbeddingParams& p) {
  const EmbeddingShape shape = CheckEmbedding(p);
  const int64_t num_tokens = shape.num_tokens, vocab = shape.vocab, hidden = shape.hidden;
  ForRows(ctx, num_tokens, hidden, [&](int64_t t) {
    const int32_t id = *At<const int32_t>(p.ids, t);
    MLASERVE_CHECK(id >= 0 && id < vocab);
    ConvertRow(ByteAt(p.table, id * p.table.stride(0)), p.table.dtype(), At<float>(p.out, t),
               DType::kF32, hidden);
  });
}

void CpuRmsNorm(const CpuContext& ctx, const RmsNormParams& p) {
  const RowsShape shape = CheckRmsNorm(p);
  const int64_t rows = shape.rows, dim = shape.cols;
  const bool has_residual = !p.residual.empty();
  const CpuKernels& k = ctx.k();
  ForRows(ctx, rows, 4 * dim, [&](int64_t r) {
    const float* src = At<const float>(p.x, r);
    if (has_residual) {
      float* sum = At<float>(p.residual, r);
      if (p.addend.empty()) {
        for (int64_t i = 0; i < dim; ++i) sum[i] += src[i];
      } else {
        const float* add = At<const float>(p.addend, r);
        for (int64_t i = 0; i < dim; ++i) sum[i] += src[i] + add[i];
      }
      src = sum;
    }
    const float inv_rms =
        1.0f / std::sqrt(k.sum_squares(src, dim) / static_cast<float>(dim) + p.eps);
    k.scale_mul(src, inv_rms, p.weight.data(), p.weight.dtype(), At<float>(p.out, r), dim);
  });
}

void CpuSiluMul(const CpuContext& ctx, const SiluMulParams& p) {
  const RowsShape shape = CheckSiluMul(p);
  const int64_t num_tokens = shape.rows, inter = shape.cols;
  ForRows(ctx, num_tokens, 16 * inter, [&](int64_t t) {
    const float* x = At<const float>(p.x, t);
    ctx.k().silu_mul(x, x + inter, At<float>(p.out, t), inter);
  });
}

void CpuAdd(const CpuContext& ctx, const AddParams& p) {
  const RowsShape shape = CheckAdd(p);
  const int64_t rows = shape.rows, cols = shape.cols;
  ForRows(ctx, rows, cols, [&](int64_t r) {
    const float* a = At<const float>(p.a, r);
    const float* b = At<const float>(p.b, r);
    float* out = At<float>(p.out, r);
    for (int64_t c = 0; c < cols; ++c) out[c] = a[c] + b[c];
  });
}

void CpuCopy(const CpuContext& ctx, const CopyParams& p) {
  CheckCopy(p);
  const int ndim = p.src.ndim();
                 MLASERVE_CHECK(!Overlaps(p.src, p.dst));
                 if (ndim == 0 || p.src.numel() == 0) return;
                 // Rows are the innermost dimension; the outer dimensions are walked as one flat
                 // index.
                 const int64_t cols = p.src.size(-1);
                 const int64_t rows = p.src.numel() / cols;
                 const bool unit = cols == 1 || (p.src.stride(-1) == 1 && p.dst.stride(-1) == 1);
                 ForRows(ctx, rows, cols, [&](int64_t r) {
                   int64_t src_off = 0, dst_off = 0, rest = r;
                   for (int d = ndim - 2; d >= 0; --d) {
                     const int64_t i = rest % p.src.size(d);
                     rest /= p.src.size(d);
                     src_off += i * p.src.stride(d);
                     dst_off += i * p.dst.stride(d);
                   }
                   if (unit) {
                     ConvertRow(ByteAt(p.src, src_off), p.src.dtype(), ByteAt(p.dst, dst_off),
                                p.dst.dtype(), cols);
                     return;
                   }
                   for (int64_t c = 0; c < cols; ++c) {
                     ConvertRow(ByteAt(p.src, src_off + c * p.src.stride(-1)), p.src.dtype(),
                                ByteAt(p.dst, dst_off + c * p.dst.stride(-1)), p.dst.dtype(), 1);
                   }
                 });
}

void CpuApplyRope(const CpuContext& ctx, const RopeParams& p) {
  const RopeShape shape = CheckRope(p);
  const int64_t num_tokens = shape.num_tokens, num_heads = shape.num_heads;
  const int64_t rope_dim = shape.rope_dim, half = rope_dim / 2;
  constexpr int64_t kMaxRopeDim = 512;
  MLASERVE_CHECK(rope_dim <= kMaxRopeDim);
  const int64_t num_heads2 = shape.num_heads2;
  ForRows(ctx, num_tokens, 4 * (num_heads + num_heads2) * rope_dim, [&](int64_t t) {
    const int32_t pos = *At<const int32_t>(p.positions, t);
    MLASERVE_CHECK(pos >= 0 && pos < p.cos_sin.size(0));
    const float* cos = p.cos_sin.ptr<const float>() + pos * rope_dim;
    const float* sin = cos + half;
    float even[kMaxRopeDim / 2], odd[kMaxRopeDim / 2];
    for (int64_t h = 0; h < num_heads + num_heads2; ++h) {
      float* x = h < num_heads ? At<float>(p.x, t, h) : At<float>(p.x2, t, h - num_heads);
      for (int64_t i = 0; i < half; ++i) {
        even[i] = x[2 * i];
        odd[i] = x[2 * i + 1];
      }
      for (int64_t i = 0; i < half; ++i) {
        x[i] = even[i] * cos[i] - odd[i] * sin[i];
        x[i + half] = odd[i] * cos[i] + even[i] * sin[i];
      }
    }
  });
}

void CpuWriteKvCache(const CpuContext& ctx, const KvWriteParams& p) {
  const KvWriteShape shape = CheckKvWrite(p);
  const int64_t num_tokens = shape.num_tokens, rank = shape.rank, rope_dim = shape.rope_dim;
              CheckContiguous(p.kv_cache, "WriteKvCache.kv_cache");
              const int64_t num_slots = p.kv_cache.size(0) * p.kv_cache.size(1);
              const int64_t row = rank + rope_dim;
              const DType dtype = p.kv_cache.dtype();
              ForRows(ctx, num_tokens, row, [&](int64_t t) {
                const int32_t slot = *At<const int32_t>(p.slot_mapping, t);
                if (slot < 0) return;
                MLASERVE_CHECK(slot < num_slots);
                ConvertRow(At<const float>(p.latent, t), DType::kF32,
                           ByteAt(p.kv_cache, slot * row), dtype, rank);
                ConvertRow(At<const float>(p.k_pe, t), DType::kF32,
                           ByteAt(p.kv_cache, slot * row + rank), dtype, rope_dim);
              });
}

void CpuGatherKvCache(const CpuContext& ctx, const GatherKvParams& p) {
  const GatherKvShape shape = CheckGatherKv(p);
  const int64_t num_blocks = shape.num_blocks, block_size = shape.block_size;
  const int64_t kv_dim = shape.kv_dim, num_seqs = shape.num_seqs;
  const int32_t* cu = p.cu_seq_lens.ptr<const int32_t>();
  const int64_t cu_stride = p.cu_seq_lens.stride(0);
  MLASERVE_CHECK(cu[0] == 0 && cu[num_seqs * cu_stride] <= p.out.size(0));
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int32_t begin = cu[s * cu_stride], end = cu[(s + 1) * cu_stride];
    MLASERVE_CHECK(begin <= end);
    const int32_t start = *At<const int32_t>(p.seq_starts, s);
    ForRows(ctx, end - begin, kv_dim, [&](int64_t i) {
      const int64_t pos = start + i;
      MLASERVE_CHECK(pos >= 0 && pos / block_size < p.block_tables.size(1));
      const int32_t block = *At<const int32_t>(p.block_tables, s, pos / block_size);
      MLASERVE_CHECK(block >= 0 && block < num_blocks);
      const int64_t row = block * block_size + pos % block_size;
      ConvertRow(ByteAt(p.kv_cache, row * kv_dim), p.kv_cache.dtype(), At<float>(p.out, begin + i),
                 DType::kF32, kv_dim);
    });
  }
}

}  // namespace mlaserve
