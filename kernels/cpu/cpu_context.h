// CpuContext: what every CPU op needs besides its params — the ISA kernel table, the thread
// team and the per-thread scratch that the backend allocates once at construction. The ops
// (cpu_gemm.cc, cpu_elementwise.cc, cpu_attention.cc, cpu_mla_decode.cc, cpu_moe.cc,
// cpu_moe_experts.cc) are free functions over it.
#ifndef MLASERVE_KERNELS_CPU_CPU_CONTEXT_H_
#define MLASERVE_KERNELS_CPU_CPU_CONTEXT_H_

#include <cstdint>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_thread_pool.h"
#include "kernels/params.h"

namespace mlaserve {

// [begin, end) of a split.
struct Range {
  int64_t begin;
  int64_t end;
};

// Part `part` of `parts` near-equal contiguous pieces of [0, n), with interior boundaries on
// multiples of `align`.
inline Range SplitRange(int64_t n, int parts, int part, int64_t align = 1) {
  const int64_t units = (n + align - 1) / align;
  auto bound = [&](int p) {
    const int64_t u = units * p / parts;
    return u * align < n ? u * align : n;
  };
  return {bound(part), bound(part + 1)};
}

class CpuContext {
 public:
  // Floats of op scratch per thread beyond the Gemm scratch: enough for MLA decode over 128
  // heads of a 512 + 64 latent at once (fewer heads per pass when a model needs more).
  static constexpr int64_t kOpScratchFloats = 192 * 1024;
  // Int32 entries of index scratch per thread (MoE row lists).
  static constexpr int64_t kIndexScratch = 1024;
  // Bytes of scratch per thread, a multiple of 64.
  static constexpr int64_t kThreadScratchBytes =
      (kGemmScratchFloats + kOpScratchFloats) * 4 + kIndexScratch * 4;

  // `arena`: pool.size() * kThreadScratchBytes bytes, 64-byte aligned. Both are owned by the
  // caller and outlive the context. `batch_invariant` and `activation_dtype`: see CpuBackend.
  CpuContext(const CpuKernels& kernels, CpuThreadPool& pool, char* arena, bool batch_invariant,
             DType activation_dtype)
      : kernels_(&kernels),
        pool_(&pool),
        arena_(arena),
        batch_invariant_(batch_invariant),
        activation_dtype_(activation_dtype) {}

  const CpuKernels& k() const { return *kernels_; }
  bool batch_invariant() const { return batch_invariant_; }
  // Whether GEMM inputs against bf16 weights are rounded to bf16 (GemmArgs::a_bf16).
  bool RoundsInputsFor(DType weights) const {
    return RoundsGemmInput(activation_dtype_, weights);
  }
  int num_threads() const { return pool_->size(); }

  // Decode rows against weights of at least this many bytes per thread take the tiles where the
  // build has them (cpu_decode_tiles.h); < 0: none. Set once, before any op runs.
  void set_decode_tile_min_bytes(int64_t bytes_per_thread) {
    decode_tile_min_bytes_ = bytes_per_thread;
  }
  // The path of a batch-invariant call's decode rows against `weights`: kFixedTiles for a bf16
  // matrix at or over the threshold on a build with CpuKernels::fixed_tiles, else kFixedDot.
  // It reads the weight and the team size only, so a row's path does not depend on its company.
  GemmPath DecodeRowsPath(const TensorView& weights) const {
    const bool tiles = kernels_->fixed_tiles && decode_tile_min_bytes_ >= 0 &&
                       weights.ndim() == 2 && weights.dtype() == DType::kBF16 &&
                       static_cast<int64_t>(weights.nbytes()) >=
                           decode_tile_min_bytes_ * num_threads();
    return tiles ? GemmPath::kFixedTiles : GemmPath::kFixedDot;
  }

  // Scratch private to thread `t` of the current parallel region (t < num_threads()).
  float* GemmScratch(int t) const { return reinterpret_cast<float*>(Thread(t)); }
  float* OpScratch(int t) const { return GemmScratch(t) + kGemmScratchFloats; }
  int32_t* IndexScratch(int t) const {
    return reinterpret_cast<int32_t*>(OpScratch(t) + kOpScratchFloats);
  }

  // Threads worth waking for an op of `work` multiply-adds (or element touches): waking the
  // team costs a few microseconds, so small ops run on the calling thread.
  int ThreadsFor(int64_t work) const {
    constexpr int64_t kWorkPerThread = 1 << 17;
    const int64_t t = work / kWorkPerThread;
    return t < 1 ? 1 : (t < num_threads() ? static_cast<int>(t) : num_threads());
  }

  // Runs fn(thread, threads) for thread < threads on the persistent team, the calling thread
  // taking part, and returns when all are done. fn may call Barrier().
  template <class Fn>
  void Parallel(int threads, Fn&& fn) const {
    auto body = [&fn, threads](int t) { fn(t, threads); };
    pool_->Run(threads, body);
  }

  // Inside Parallel: waits for every thread of the region.
  void Barrier() const { pool_->Barrier(); }

 private:
  char* Thread(int t) const { return arena_ + static_cast<int64_t>(t) * kThreadScratchBytes; }

  const CpuKernels* kernels_;
  CpuThreadPool* pool_;
  char* arena_;
  bool batch_invariant_;
  DType activation_dtype_;
  int64_t decode_tile_min_bytes_ = -1;
};

void CpuEmbedding(const CpuContext& ctx, const EmbeddingParams& p);
void CpuRmsNorm(const CpuContext& ctx, const RmsNormParams& p);
void CpuGemm(const CpuContext& ctx, const GemmParams& p);
void CpuSiluMul(const CpuContext& ctx, const SiluMulParams& p);
void CpuAdd(const CpuContext& ctx, const AddParams& p);
void CpuCopy(const CpuContext& ctx, const CopyParams& p);
void CpuApplyRope(const CpuContext& ctx, const RopeParams& p);
void CpuWriteKvCache(const CpuContext& ctx, const KvWriteParams& p);
void CpuGatherKvCache(const CpuContext& ctx, const GatherKvParams& p);
void CpuMlaPrefill(const CpuContext& ctx, const MlaPrefillParams& p);
void CpuMergeAttn(const CpuContext& ctx, const MergeAttnParams& p);
void CpuMlaDecode(const CpuContext& ctx, const MlaDecodeParams& p);
void CpuMoeRoute(const CpuContext& ctx, const MoeRouteParams& p);
void CpuMoeAlignBlockSize(const CpuContext& ctx, const MoeAlignParams& p);
void CpuMoeExperts(const CpuContext& ctx, const MoeExpertsParams& p);

}  // namespace mlaserve

#endif  // MLASERVE_KERNELS_CPU_CPU_CONTEXT_H_
