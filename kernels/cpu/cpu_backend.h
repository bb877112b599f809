// CpuBackend: the production CPU backend. Same op semantics as the RefBackend oracle
// (kernels/params.h), run with SIMD kernels chosen at construction for this processor
// (AVX-512, AVX2 or portable; MLASERVE_CPU_ISA caps the choice, see cpu_features.h) on a
// persistent team of num_threads() threads (cpu_thread_pool.h), the caller being one of them.
//
// Memory: all scratch (per-thread GEMM packing panels, attention and routing buffers) is
// allocated once, here at construction, for the largest shapes the ops accept; ops never
// allocate. Work is split statically so that each thread streams its own slice of weight rows.
//
// Thread-compatible: one thread at a time calls the ops, like every Backend.
#ifndef MLASERVE_KERNELS_CPU_CPU_BACKEND_H_
#define MLASERVE_KERNELS_CPU_CPU_BACKEND_H_

#include <memory>
#include <string_view>

#include "kernels/cpu/cpu_context.h"
#include "kernels/cpu/cpu_decode_tiles.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/cpu_numa.h"
#include "kernels/cpu/cpu_thread_pool.h"
#include "kernels/host_backend.h"

namespace mlaserve {

class CpuBackend : public HostBackend {
 public:
  // num_threads = 0 uses the processors the process may run on, capped by its cgroup's CPU
  // limit (DetectCpuThreadBudget, cpu_threads.h). `batch_invariant` fixes one
  // reduction order per row (see Backend::batch_invariant): GEMM rows of decodes always take
  // the dot-product path at a fixed depth and prompt rows always the packed path, whatever the
  // row counts (GemmParams::decode_rows), and decode attention never splits a sequence over
  // threads. `activation_dtype`: see Backend::activation_dtype; kBF16 runs prompt GEMMs on the
  // bf16 dot-product instructions where the processor has them and they are the faster multiply
  // (CpuIsa::kAvx512Bf16; SelectIsaForActivations, cpu_bf16_multiply.h), or on AMX tiles
  // (CpuIsa::kAmxBf16, which in f32 mode splits each activation exactly into three bf16 parts).
  explicit CpuBackend(int num_threads, bool batch_invariant = false,
                      DType activation_dtype = DType::kF32);
  // The same on a given kernel table instead of the processor's best (tests: e.g.
  // AmxEmulatedKernels, which must run on this processor, see cpu_kernels.h).
  CpuBackend(const CpuKernels& kernels, int num_threads, bool batch_invariant = false,
             DType activation_dtype = DType::kF32);
  ~CpuBackend() override;

  std::string_view name() const override { return "cpu"; }
  bool batch_invariant() const override { return ctx_.batch_invariant(); }
  CpuIsa isa() const { return ctx_.k().isa; }
  int num_threads() const { return ctx_.num_threads(); }
  // The kernels, threads and scratch the ops run with (e.g. for TuneStreaming).
  const CpuContext& context() const { return ctx_; }
  // Which decode rows run on tiles under batch invariance: MLASERVE_CPU_DECODE_TILES (read at
  // construction) on builds with CpuKernels::fixed_tiles, none on the others.
  const DecodeTiles& decode_tiles() const { return decode_tiles_; }
  // Where the pages of its buffers of 2 MiB or more go (cpu_numa.h): chosen at construction
  // from the affinity mask's NUMA nodes and MLASERVE_CPU_NUMA, and tried once on a scratch
  // mapping then; a refused interleave leaves `interleave` false and its errno here (0: none).
  const NumaPlacement& numa_placement() const { return numa_; }
  int numa_refused_errno() const { return numa_refused_errno_; }

  // The team that runs the ops, each thread taking the next task until none is left.
  int host_lanes() const override { return num_threads(); }
  void RunHostTasks(int64_t count, absl::FunctionRef<void(int64_t task, int lane)> fn) override;

 protected:
  void RunEmbedding(const EmbeddingParams& p) override { CpuEmbedding(ctx_, p); }
  void RunRmsNorm(const RmsNormParams& p) override { CpuRmsNorm(ctx_, p); }
  void RunGemm(const GemmParams& p) override { CpuGemm(ctx_, p); }
  void RunSiluMul(const SiluMulParams& p) override { CpuSiluMul(ctx_, p); }
  void RunAdd(const AddParams& p) override { CpuAdd(ctx_, p); }
  void RunCopy(const CopyParams& p) override { CpuCopy(ctx_, p); }
  void RunApplyRope(const RopeParams& p) override { CpuApplyRope(ctx_, p); }
  void RunWriteKvCache(const KvWriteParams& p) override { CpuWriteKvCache(ctx_, p); }
  void RunGatherKvCache(const GatherKvParams& p) override { CpuGatherKvCache(ctx_, p); }
  void RunMlaPrefill(const MlaPrefillParams& p) override { CpuMlaPrefill(ctx_, p); }
  void RunMergeAttn(const MergeAttnParams& p) override { CpuMergeAttn(ctx_, p); }
  void RunMlaDecode(const MlaDecodeParams& p) override { CpuMlaDecode(ctx_, p); }
  void RunMoeRoute(const MoeRouteParams& p) override { CpuMoeRoute(ctx_, p); }
  void RunMoeAlignBlockSize(const MoeAlignParams& p) override { CpuMoeAlignBlockSize(ctx_, p); }
  void RunMoeExperts(const MoeExpertsParams& p) override { CpuMoeExperts(ctx_, p); }
  void PlaceLargeBuffer(void* data, size_t bytes) override;

 private:
  std::unique_ptr<CpuThreadPool> pool_;
  char* arena_;  // num_threads() * CpuContext::kThreadScratchBytes, owned
  CpuContext ctx_;
  int numa_refused_errno_ = 0;  // before numa_, whose initialization sets it
  NumaPlacement numa_;
  DecodeTiles decode_tiles_;
};

std::unique_ptr<Backend> MakeCpuBackend(int num_threads, bool batch_invariant = false,
                                        DType activation_dtype = DType::kF32);

}  // namespace mlaserve

#endif  // MLASERVE_KERNELS_CPU_CPU_BACKEND_H_
