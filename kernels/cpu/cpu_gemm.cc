// Gemm: out[b] = a[b] · b[b]ᵀ. The (batch, column panel) pairs are split statically over the
// team, so each thread streams a contiguous slice of weight rows; when there are fewer pairs
// than threads, the rows of a are split as well. Builds that can share a packing of A
// (the AMX build) pack it once for the team instead of once per thread.
#include <chrono>
#include <cstdint>

#include "kernels/cpu/cpu_context.h"
#include "kernels/cpu/cpu_stream_tuning.h"
#include "kernels/shape_check.h"

namespace mlaserve {
namespace {

// A 2-D or 3-D operand as batch, row and element strides over a batch count.
struct Operand {
  char* data;
  int64_t batch_stride;  // elements; 0 for a 2-D view
  int64_t row_stride;    // elements
  int64_t rows;
};

Operand AsOperand(const TensorView& v) {
  const bool batched = v.ndim() == 3;
  return {static_cast<char*>(v.data()), batched ? v.stride(0) : 0, v.stride(-2), v.size(-2)};
}

// A GEMM of one batch entry whose build packs A in a layout the team can share
// (CpuKernels::gemm_shared_pack): block by block of rows, every thread packs a slice of the
// block's rows, and after a barrier computes its panels from the whole block. Two buffers
// alternate, so one barrier per block suffices: a thread packs block c + 1 only after the
// barrier that every thread reaches once done with block c - 1, the other buffer's block.
// args(bi, r0, r1, n0, n1): the kernel arguments of rows [r0, r1), columns [n0, n1).
template <class Args>
void RunSharedPack(const CpuContext& ctx, int threads, int64_t panels, int64_t panel, int64_t m,
                   const Args& args) {
  const GemmSharedPack& shared = ctx.k().gemm_shared_pack;
  const int64_t block_rows = shared.rows;
  const int64_t bytes = shared.bytes(args(0, 0, m < block_rows ? m : block_rows, 0, panel));
  char* buffers = static_cast<char*>(ctx.TeamScratch(2 * bytes));
  ctx.Parallel(threads, [&](int t, int team) {
    const Range cols = SplitRange(panels, team, t);
    int64_t block = 0;
    for (int64_t r0 = 0; r0 < m; r0 += block_rows, ++block) {
      const int64_t r1 = m - r0 < block_rows ? m : r0 + block_rows;
      GemmArgs g = args(0, r0, r1, cols.begin * panel, cols.end * panel);
      void* packed = buffers + (block % 2) * bytes;
      const Range rows = SplitRange((r1 - r0 + 15) / 16 * 16, team, t, 16);
      if (rows.begin < rows.end) shared.pack(g, rows.begin, rows.end, packed);
      ctx.Barrier();
      if (cols.begin == cols.end) continue;
      g.a_packed = packed;
      ctx.k().gemm(g, ctx.GemmScratch(t));
    }
  });
}

// out_view = a_view · p.bᵀ for the rows of these views (slices of p.a and p.out), by `path`.
void RunRows(const CpuContext& ctx, const GemmParams& p, const TensorView& a_view,
             const TensorView& out_view, GemmPath path) {
  const int64_t batch = a_view.ndim() == 3 ? a_view.size(0) : 1;
  const int64_t m = a_view.size(-2), k = a_view.size(-1), n = p.b.size(-2);
  if (m == 0) return;
  const Operand a = AsOperand(a_view), b = AsOperand(p.b), out = AsOperand(out_view);
  const int64_t b_elem = static_cast<int64_t>(DTypeSize(p.b.dtype()));
  const int64_t panel = ctx.k().gemm_panel_cols;
  const int64_t panels = (n + panel - 1) / panel;
  const int64_t items = batch * panels;
  const int threads = ctx.ThreadsFor(batch * m * n * (k > 0 ? k : 1));
  // The kernel arguments for rows [r0, r1) of batch entry bi, columns [n0, n1).
  const auto args = [&](int64_t bi, int64_t r0, int64_t r1, int64_t n0, int64_t n1) {
    GemmArgs g;
    g.a = reinterpret_cast<const float*>(a.data) + bi * a.batch_stride + r0 * a.row_stride;
    g.lda = a.row_stride;
    g.b = b.data + bi * b.batch_stride * b_elem;
    g.b_dtype = p.b.dtype();
    g.ldb = b.row_stride;
    g.c = reinterpret_cast<float*>(out.data) + bi * out.batch_stride + r0 * out.row_stride;
    g.ldc = out.row_stride;
    g.m = r1 - r0;
    g.k = k;
    g.n_begin = n0;
    g.n_end = n1 < n ? n1 : n;
    g.path = path;
    g.a_bf16 = ctx.RoundsInputsFor(p.b.dtype());
    return g;
  };
  const auto call = [&](int t, int64_t bi, int64_t r0, int64_t r1, int64_t n0, int64_t n1) {
    ctx.k().gemm(args(bi, r0, r1, n0, n1), ctx.GemmScratch(t));
  };
  // Row groups per item, so that a few wide items still occupy the team.
  const int64_t row_groups = items >= threads ? 1 : threads / items;
  const GemmSharedPack& shared = ctx.k().gemm_shared_pack;
  if (shared.pack != nullptr && batch == 1 && threads > 1 && row_groups == 1 &&
      shared.applies(args(0, 0, m < shared.rows ? m : shared.rows, 0, n))) {
    RunSharedPack(ctx, threads, panels, panel, m, args);
    return;
  }
  ctx.Parallel(threads, [&](int t, int team) {
    const Range units = SplitRange(items * row_groups, team, t);
    for (int64_t u = units.begin; u < units.end;) {
      const int64_t item = u / row_groups;
      const int64_t bi = item / panels;
      const int64_t first = item - bi * panels;
      if (row_groups == 1) {
        // Merge this thread's consecutive panels of one batch entry into one call.
        const int64_t last = units.end - 1 < (bi + 1) * panels - 1 ? units.end - 1
                                                                  : (bi + 1) * panels - 1;
        call(t, bi, 0, m, first * panel, (last - bi * panels + 1) * panel);
        u = last + 1;
      } else {
        const Range rows = SplitRange(m, static_cast<int>(row_groups), u % row_groups);
        call(t, bi, rows.begin, rows.end, first * panel, (first + 1) * panel);
        ++u;
      }
    }
  });
}

void RunGemm(const CpuContext& ctx, const GemmParams& p, const GemmShape& s) {
  const int64_t m = s.m;
  if (!ctx.batch_invariant()) {
    RunRows(ctx, p, p.a, p.out, GemmPath::kBySize);
    return;
  }
  // Batch-invariant: decode rows always by dot products, prompt rows always packed, so a row's
  // result does not depend on how many rows of either kind share the call.
  const int row_dim = s.batched ? 1 : 0;
  const int64_t d = p.decode_rows < 0 ? 0 : (p.decode_rows > m ? m : p.decode_rows);
  RunRows(ctx, p, p.a.Slice(row_dim, 0, d), p.out.Slice(row_dim, 0, d), GemmPath::kFixedDot);
  RunRows(ctx, p, p.a.Slice(row_dim, d, m - d), p.out.Slice(row_dim, d, m - d),
          GemmPath::kPacked);
}

}  // namespace

void CpuGemm(const CpuContext& ctx, const GemmParams& p) {
  const GemmShape s = CheckGemm(p);
  if (s.batch == 0 || s.m == 0 || s.n == 0) return;
  // One row streaming the weights (a decode): the online prefetch tuner may time it.
  const OnlineStreamCall call = s.batch == 1 && s.m == 1
                                    ? BeginOnlineStreamCall(p.b.data(), p.b.nbytes())
                                    : OnlineStreamCall{};
  if (call.candidate < 0) {
    RunGemm(ctx, p, s);
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  RunGemm(ctx, p, s);
  EndOnlineStreamCall(
      call, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

}  // namespace mlaserve
