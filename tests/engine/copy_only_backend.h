// CopyOnlyBackend: a HostBackend for tests that only allocate and copy (weight loading).
// Every op aborts: a test that reaches one is using the wrong backend.
#ifndef MLASERVE_TESTS_ENGINE_COPY_ONLY_BACKEND_H_
#define MLASERVE_TESTS_ENGINE_COPY_ONLY_BACKEND_H_

#include <string_view>

#include "kernels/check.h"
#include "kernels/host_backend.h"

namespace mlaserve {

class CopyOnlyBackend : public HostBackend {
 public:
  std::string_view name() const override { return "copy-only"; }
  bool batch_invariant() const override { return true; }

 protected:
  void RunEmbedding(const EmbeddingParams&) override { MLASERVE_CHECK(false); }
  void RunRmsNorm(const RmsNormParams&) override { MLASERVE_CHECK(false); }
  void RunGemm(const GemmParams&) override { MLASERVE_CHECK(false); }
  void RunSiluMul(const SiluMulParams&) override { MLASERVE_CHECK(false); }
  void RunAdd(const AddParams&) override { MLASERVE_CHECK(false); }
  void RunCopy(const CopyParams&) override { MLASERVE_CHECK(false); }
  void RunApplyRope(const RopeParams&) override { MLASERVE_CHECK(false); }
  void RunWriteKvCache(const KvWriteParams&) override { MLASERVE_CHECK(false); }
  void RunGatherKvCache(const GatherKvParams&) override { MLASERVE_CHECK(false); }
  void RunMlaPrefill(const MlaPrefillParams&) override { MLASERVE_CHECK(false); }
  void RunMergeAttn(const MergeAttnParams&) override { MLASERVE_CHECK(false); }
  void RunMlaDecode(const MlaDecodeParams&) override { MLASERVE_CHECK(false); }
  void RunMoeRoute(const MoeRouteParams&) override { MLASERVE_CHECK(false); }
  void RunMoeAlignBlockSize(const MoeAlignParams&) override { MLASERVE_CHECK(false); }
  void RunMoeExperts(const MoeExpertsParams&) override { MLASERVE_CHECK(false); }
};

}  // namespace mlaserve

#endif  // MLASERVE_TESTS_ENGINE_COPY_ONLY_BACKEND_H_
