// Gemm: out[b] = a[b] · b[b]ᵀ. The (batch, column panel) pairs are split over the team, so
// each thread streams contiguous slices of weight rows; when there are fewer pairs than
// threads, the rows of a are split as well. A call of few rows (decode) over many panels hands
// them out in guided claims, each the panels left over twice the team (the claims shrink as the
// work runs out), so a thread that runs slower than the others (a vCPU that serves interrupts,
// a core shared with another tenant) takes fewer columns instead of making the team wait for
// it: on a 2-vCPU Zen 3 host the calling thread waited 3.6-4.1 % of its time at the end of such
// GEMMs with halves fixed in advance, 0.08 % with claims (docs/performance.md). Prompt GEMMs
// keep their fixed slices. A column's bits do not depend on which call computes it
// (cpu_gemm_claims_test).
#include <atomic>
#include <chrono>
#include <cstdint>

#include "kernels/cpu/cpu_context.h"
#include "kernels/cpu/cpu_stream_tuning.h"
#include "kernels/shape_check.h"

namespace mlaserve {
namespace {

// Guided claiming of a GEMM's panels: each claim takes what is left over twice the team, at
// least kMinClaimBytes of weights; used for calls of at most kMaxClaimRows rows where the
// panels make at least kMinClaims such claims per thread.
constexpr int64_t kMinClaimBytes = 256 * 1024;
constexpr int64_t kMinClaims = 4;
constexpr int64_t kMaxClaimRows = 64;

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
  // One kernel call on thread t: rows [r0, r1) of batch entry bi, columns [n0, n1).
  const auto call = [&](int t, int64_t bi, int64_t r0, int64_t r1, int64_t n0, int64_t n1) {
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
    ctx.k().gemm(g, ctx.GemmScratch(t));
  };
  // Row groups per item, so that a few wide items still occupy the team.
  const int64_t row_groups = items >= threads ? 1 : threads / items;
  // Units [begin, end) of (batch entry, panel) pairs on thread t, row_groups == 1: one call per
  // run of consecutive panels of one batch entry.
  const auto run_panels = [&](int t, int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end;) {
      const int64_t bi = u / panels;
      const int64_t stop = end < (bi + 1) * panels ? end : (bi + 1) * panels;
      call(t, bi, 0, m, (u - bi * panels) * panel, (stop - bi * panels) * panel);
      u = stop;
    }
  };
  const int64_t panel_bytes = panel * (k > 0 ? k : 1) * b_elem;
  const int64_t min_claim = (kMinClaimBytes + panel_bytes - 1) / panel_bytes;
  if (m <= kMaxClaimRows && row_groups == 1 && threads > 1 &&
      items >= kMinClaims * threads * min_claim) {
    std::atomic<int64_t> next{0};
    ctx.Parallel(threads, [&](int t, int team) {
      int64_t begin = next.load(std::memory_order_relaxed);
      while (begin < items) {
        const int64_t left = (items - begin) / (2 * team);
        const int64_t end = begin + (left > min_claim ? left : min_claim);
        const int64_t stop = end < items ? end : items;
        if (next.compare_exchange_weak(begin, stop, std::memory_order_relaxed)) {
          run_panels(t, begin, stop);
          begin = next.load(std::memory_order_relaxed);
        }
      }
    });
    return;
  }
  ctx.Parallel(threads, [&](int t, int team) {
    const Range units = SplitRange(items * row_groups, team, t);
    if (row_groups == 1) {
      run_panels(t, units.begin, units.end);
      return;
    }
    for (int64_t u = units.begin; u < units.end; ++u) {
      const int64_t item = u / row_groups;
      const int64_t bi = item / panels;
      const Range rows = SplitRange(m, static_cast<int>(row_groups), u % row_groups);
      call(t, bi, rows.begin, rows.end, (item - bi * panels) * panel,
           (item - bi * panels + 1) * panel);
    }
  });
}

// decode_path: kBySize for every row when the backend is not batch-invariant; else the path of
// the decode rows (CpuContext::DecodeRowsPath), the prompt rows always packed, so a row's result
// does not depend on how many rows of either kind share the call.
void RunGemm(const CpuContext& ctx, const GemmParams& p, const GemmShape& s,
             GemmPath decode_path) {
  const int64_t m = s.m;
  if (decode_path == GemmPath::kBySize) {
    RunRows(ctx, p, p.a, p.out, GemmPath::kBySize);
    return;
  }
  const int row_dim = s.batched ? 1 : 0;
  const int64_t d = p.decode_rows < 0 ? 0 : (p.decode_rows > m ? m : p.decode_rows);
  RunRows(ctx, p, p.a.Slice(row_dim, 0, d), p.out.Slice(row_dim, 0, d), decode_path);
  RunRows(ctx, p, p.a.Slice(row_dim, d, m - d), p.out.Slice(row_dim, d, m - d),
          GemmPath::kPacked);
}

}  // namespace

void CpuGemm(const CpuContext& ctx, const GemmParams& p) {
  const GemmShape s = CheckGemm(p);
  if (s.batch == 0 || s.m == 0 || s.n == 0) return;
  const GemmPath decode_path =
      ctx.batch_invariant() ? ctx.DecodeRowsPath(p.b) : GemmPath::kBySize;
  // One row streaming the weights through the dot products, whose prefetch the online tuner
  // chooses (a decode; not a prompt row or a decode row on tiles under batch invariance): the
  // tuner may time it.
  const bool dot_row = s.batch == 1 && s.m == 1 &&
                       (decode_path == GemmPath::kBySize ||
                        (p.decode_rows >= 1 && decode_path == GemmPath::kFixedDot));
  const OnlineStreamCall call =
      dot_row ? BeginOnlineStreamCall(p.b.data(), p.b.nbytes()) : OnlineStreamCall{};
  if (call.candidate < 0) {
    RunGemm(ctx, p, s, decode_path);
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  RunGemm(ctx, p, s, decode_path);
  EndOnlineStreamCall(
      call, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

}  // namespace mlaserve
