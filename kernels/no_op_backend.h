// NoOpBackend: a host backend whose ops return at once. A step on it costs only its host
// overhead (planning, copies, dispatch, graph replay: tools/bench/graph_bench.cc), and a test
// can override the ops it watches. Host memory and capture as HostBackend's.
#ifndef MLASERVE_KERNELS_NO_OP_BACKEND_H_
#define MLASERVE_KERNELS_NO_OP_BACKEND_H_

#include <string_view>

#include "kernels/host_backend.h"

namespace mlaserve {

class NoOpBackend : public HostBackend {
 public:
  std::string_view name() const override { return "no-op"; }
  bool batch_invariant() const override { return true; }

 protected:
  void RunEmbedding(const EmbeddingParams&) override {}
  void RunRmsNorm(const RmsNormParams&) override {}
  void RunGemm(const GemmParams&) override {}
  void RunSiluMul(const SiluMulParams&) override {}
  void RunAdd(const AddParams&) override {}
  void RunCopy(const CopyParams&) override {}
  void RunApplyRope(const RopeParams&) override {}
  void RunWriteKvCache(const KvWriteParams&) override {}
  void RunGatherKvCache(const GatherKvParams&) override {}
  void RunMlaPrefill(const MlaPrefillParams&) override {}
  void RunMergeAttn(const MergeAttnParams&) override {}
  void RunMlaDecode(const MlaDecodeParams&) override {}
  void RunMoeRoute(const MoeRouteParams&) override {}
  void RunMoeAlignBlockSize(const MoeAlignParams&) override {}
  void RunMoeExperts(const MoeExpertsParams&) override {}
};

}  // namespace mlaserve

#endif  // MLASERVE_KERNELS_NO_OP_BACKEND_H_
