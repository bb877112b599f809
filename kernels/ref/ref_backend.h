// RefBackend: the oracle. Every op is a plain loop that follows its params.h contract
// literally, so other backends are tested against it. Dot products, norms and softmax sums run
// in double and are rounded to the output dtype once, which makes the oracle closer to the
// exact result than any production kernel it is compared with.
//
// Departures from the Backend contract, deliberate because the oracle favours clarity over
// speed: some ops allocate small host scratch vectors per call (never device buffers), and
// nothing is multithreaded. Results are deterministic.
//
// Beyond params.h, MoeAlignBlockSize writes only the first num_tokens_post_pad / block_size
// entries of block_expert_ids (the valid blocks); consumers must not read the others.
//
// Thread-compatible: one thread at a time, like every Backend.
#ifndef MLASERVE_KERNELS_REF_REF_BACKEND_H_
#define MLASERVE_KERNELS_REF_REF_BACKEND_H_

#include <memory>
#include <string_view>

#include "kernels/host_backend.h"

namespace mlaserve {

class RefBackend : public HostBackend {
 public:
  explicit RefBackend(DType activation_dtype = DType::kF32) : HostBackend(activation_dtype) {}
  std::string_view name() const override { return "ref"; }
  bool batch_invariant() const override { return true; }  // plain loops, row by row

 protected:
  // ref_backend.cc: dense elementwise and linear ops.
  void RunEmbedding(const EmbeddingParams& p) override;
  void RunRmsNorm(const RmsNormParams& p) override;
  void RunGemm(const GemmParams& p) override;
  void RunSiluMul(const SiluMulParams& p) override;
  void RunAdd(const AddParams& p) override;
  void RunCopy(const CopyParams& p) override;
  void RunApplyRope(const RopeParams& p) override;
  // ref_attention.cc: paged latent cache and MLA attention.
  void RunWriteKvCache(const KvWriteParams& p) override;
  void RunGatherKvCache(const GatherKvParams& p) override;
  void RunMlaPrefill(const MlaPrefillParams& p) override;
  void RunMergeAttn(const MergeAttnParams& p) override;
  void RunMlaDecode(const MlaDecodeParams& p) override;
  // ref_moe.cc: router, alignment and routed experts.
  void RunMoeRoute(const MoeRouteParams& p) override;
  void RunMoeAlignBlockSize(const MoeAlignParams& p) override;
  void RunMoeExperts(const MoeExpertsParams& p) override;
};

std::unique_ptr<Backend> MakeRefBackend(DType activation_dtype = DType::kF32);

}  // namespace mlaserve

#endif  // MLASERVE_KERNELS_REF_REF_BACKEND_H_
