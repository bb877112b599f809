#include "kernels/ref/ref_backend.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "kernels/op_checks.h"
#include "kernels/ref/ref_access.h"
#include "kernels/shape_check.h"

namespace mlaserve {

using ref::Load;
using ref::LoadI32;
using ref::LoadInput;
using ref::Off;
using ref::Store;

void RefBackend::RunEmbedding(const EmbeddingParams& p) {
  const EmbeddingShape shape = CheckEmbedding(p);
  const int64_t num_tokens = shape.num_tokens, vocab = shape.vocab, hidden = shape.hidden;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int32_t id = LoadI32(p.ids, Off(p.ids, t));
    MLASERVE_CHECK(id >= 0 && id < vocab);
    for (int64_t i = 0; i < hidden; ++i) {
      Store(p.out, Off(p.out, t, i), Load(p.table, Off(p.table, id, i)));
    }
  }
}

void RefBackend::RunRmsNorm(const RmsNormParams& p) {
  const RowsShape shape = CheckRmsNorm(p);
  const int64_t rows = shape.rows, dim = shape.cols;
  const bool has_residual = !p.residual.empty();
  // Each pass reads an element before any write to it, so out may alias x.
  const TensorView& src = has_residual ? p.residual : p.x;
  for (int64_t r = 0; r < rows; ++r) {
    if (has_residual) {
      for (int64_t i = 0; i < dim; ++i) {
        float branch = static_cast<float>(Load(p.x, Off(p.x, r, i)));
        if (!p.addend.empty()) branch += static_cast<float>(Load(p.addend, Off(p.addend, r, i)));
        const float sum = branch + static_cast<float>(Load(p.residual, Off(p.residual, r, i)));
        Store(p.residual, Off(p.residual, r, i), sum);
      }
    }
    double sum_sq = 0.0;
    for (int64_t i = 0; i < dim; ++i) {
      const double v = Load(src, Off(src, r, i));
      sum_sq += v * v;
    }
    const double inv_rms = 1.0 / std::sqrt(sum_sq / static_cast<double>(dim) + p.eps);
    for (int64_t i = 0; i < dim; ++i) {
      const double normed = Load(src, Off(src, r, i)) * inv_rms;
      Store(p.out, Off(p.out, r, i), normed * Load(p.weight, Off(p.weight, i)));
    }
  }
}

void RefBackend::RunGemm(const GemmParams& p) {
  const GemmShape s = CheckGemm(p);
  const int64_t batch = s.batch, m = s.m, k = s.k, n = s.n;
  // A 2-D problem is viewed as batch 1 with a zero batch stride.
  auto as3d = [](const TensorView& v) {
    if (v.ndim() == 3) return v;
    return TensorView(v.data(), v.dtype(), {1, v.size(0), v.size(1)}, {0, v.stride(0), 1});
  };
  const TensorView a = as3d(p.a);
  const TensorView b = as3d(p.b);
  const TensorView out = as3d(p.out);
  const bool round = RoundsGemmInput(activation_dtype(), b.dtype());
  for (int64_t bi = 0; bi < batch; ++bi) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0.0;
        for (int64_t l = 0; l < k; ++l) {
          acc += LoadInput(a, Off(a, bi, i, l), round) * Load(b, Off(b, bi, j, l));
        }
        Store(out, Off(out, bi, i, j), acc);
      }
    }
  }
}

void RefBackend::RunSiluMul(const SiluMulParams& p) {
  const RowsShape shape = CheckSiluMul(p);
  const int64_t num_tokens = shape.rows, inter = shape.cols;
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t i = 0; i < inter; ++i) {
      const double gate = Load(p.x, Off(p.x, t, i));
      const double up = Load(p.x, Off(p.x, t, inter + i));
      Store(p.out, Off(p.out, t, i), gate / (1.0 + std::exp(-gate)) * up);
    }
  }
}

void RefBackend::RunAdd(const AddParams& p) {
  const RowsShape shape = CheckAdd(p);
  const int64_t rows = shape.rows, cols = shape.cols;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      // Summed in f32: the exact f32 sum rounded once, as every backend computes it.
      const float sum = static_cast<float>(Load(p.a, Off(p.a, r, c))) +
                        static_cast<float>(Load(p.b, Off(p.b, r, c)));
      Store(p.out, Off(p.out, r, c), sum);
    }
  }
}

void RefBackend::RunCopy(const CopyParams& p) {
  CheckCopy(p);
  const int ndim = p.src.ndim();
                 MLASERVE_CHECK(!Overlaps(p.src, p.dst));
                 // Walks the shape as an odometer, padded to kMaxDims with unit extents.
                 int64_t shape[TensorView::kMaxDims], src_stride[TensorView::kMaxDims],
                     dst_stride[TensorView::kMaxDims];
                 const int pad = TensorView::kMaxDims - ndim;
                 for (int d = 0; d < TensorView::kMaxDims; ++d) {
                   shape[d] = d < pad ? 1 : p.src.size(d - pad);
                   src_stride[d] = d < pad ? 0 : p.src.stride(d - pad);
                   dst_stride[d] = d < pad ? 0 : p.dst.stride(d - pad);
                 }
                 const size_t elem = DTypeSize(p.src.dtype());
                 const bool raw = p.src.dtype() == p.dst.dtype();
                 for (int64_t i0 = 0; i0 < shape[0]; ++i0) {
                   for (int64_t i1 = 0; i1 < shape[1]; ++i1) {
                     for (int64_t i2 = 0; i2 < shape[2]; ++i2) {
                       for (int64_t i3 = 0; i3 < shape[3]; ++i3) {
                         const int64_t s = i0 * src_stride[0] + i1 * src_stride[1] +
                                           i2 * src_stride[2] + i3 * src_stride[3];
                         const int64_t d = i0 * dst_stride[0] + i1 * dst_stride[1] +
                                           i2 * dst_stride[2] + i3 * dst_stride[3];
                         if (raw) {
                           std::memcpy(p.dst.ptr<char>() + d * elem,
                                       p.src.ptr<const char>() + s * elem, elem);
                         } else {
                           Store(p.dst, d, Load(p.src, s));
                         }
                       }
                     }
                   }
                 }
}

void RefBackend::RunApplyRope(const RopeParams& p) {
  const RopeShape shape = CheckRope(p);
  const int64_t num_tokens = shape.num_tokens, num_heads = shape.num_heads;
  const int64_t rope_dim = shape.rope_dim, half = rope_dim / 2;
  const float* table = p.cos_sin.ptr<const float>();
  std::vector<double> x(rope_dim);
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int32_t pos = LoadI32(p.positions, Off(p.positions, t));
    MLASERVE_CHECK(pos >= 0 && pos < p.cos_sin.size(0));
    const float* cos = table + pos * rope_dim;
    const float* sin = cos + half;
    for (const auto& [v, heads] :
         {std::pair(&p.x, num_heads), std::pair(&p.x2, shape.num_heads2)}) {
      for (int64_t h = 0; h < heads; ++h) {
        // The whole head is read first: the de-interleaved result overwrites it in place.
        for (int64_t i = 0; i < rope_dim; ++i) x[i] = Load(*v, Off(*v, t, h, i));
        for (int64_t i = 0; i < half; ++i) {
          const double even = x[2 * i], odd = x[2 * i + 1];
          Store(*v, Off(*v, t, h, i), even * cos[i] - odd * sin[i]);
          Store(*v, Off(*v, t, h, i + half), odd * cos[i] + even * sin[i]);
        }
      }
    }
  }
}

std::unique_ptr<Backend> MakeRefBackend(DType activation_dtype) {
  return std::make_unique<RefBackend>(activation_dtype);
}

}  // namespace mlaserve
