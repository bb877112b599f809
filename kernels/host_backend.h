// HostBackend: the part shared by the backends that run on the host CPU (ref and cpu).
// Memory is host memory (64-byte aligned), copies are memcpy, ops run synchronously, and
// capture records each op as a closure over its params (the views point at fixed buffers, so
// a replay sees whatever those buffers hold then). Subclasses implement the Run* methods.
//
// While a replay runs op i it publishes the cache lines the host reads from op i's end to op
// i + 1's start: op i's return path (its calling code, its profile slot) and op i + 1's
// dispatch (its record, closure and calling code, this object's lines); during the last op,
// the first op's dispatch, for the next replay. An op that streamed gigabytes of weights
// leaves none of them cached, and reading them one after another from memory is most of the
// host time between two ops. A subclass whose ops end waiting on other threads (CpuBackend)
// prefetches them while it waits (next_op_lines), and during the last op runs the caller's
// reader of what the next step's planning reads (Graph::Replay, next_step_reader).
#ifndef MLASERVE_KERNELS_HOST_BACKEND_H_
#define MLASERVE_KERNELS_HOST_BACKEND_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/types/span.h"
#include "kernels/backend.h"
#include "kernels/op_profile.h"

namespace mlaserve {

// One op of a host capture: the heap closure that runs it (holding the op's params) and the
// function that calls the closure.
struct RecordedOp {
  void (*run)(const void* closure) = nullptr;
  std::unique_ptr<void, void (*)(void*)> closure{nullptr, nullptr};
  uint32_t closure_bytes = 0;
  const void* profile_slot = nullptr;  // the op's OpProfile::Claim, when profiling
  // Set by the graph: the lines read from this op's end to the next op's start (kept here, in
  // the line a replay reads anyway to run this op).
  absl::Span<const void* const> next_lines;
};

class HostBackend : public Backend {
 public:
  // activation_dtype: kF32 or kBF16 (see Backend::activation_dtype).
  explicit HostBackend(DType activation_dtype = DType::kF32);

  DType activation_dtype() const override { return activation_dtype_; }
  absl::StatusOr<DeviceBuffer> Allocate(size_t bytes) override;
  uint64_t memory_capacity() const override;  // physical memory (sysconf)
  void CopyFromHost(const void* src, size_t bytes, const TensorView& dst) override;
  void CopyToHost(const TensorView& src, void* dst, size_t bytes) override;
  const void* HostAddress(const TensorView& view) const override { return view.data(); }

  void Embedding(const EmbeddingParams& p) override { Dispatch(&HostBackend::RunEmbedding, p, "Embedding"); }
  void RmsNorm(const RmsNormParams& p) override { Dispatch(&HostBackend::RunRmsNorm, p, "RmsNorm"); }
  void Gemm(const GemmParams& p) override { Dispatch(&HostBackend::RunGemm, p, "Gemm"); }
  void SiluMul(const SiluMulParams& p) override { Dispatch(&HostBackend::RunSiluMul, p, "SiluMul"); }
  void Add(const AddParams& p) override { Dispatch(&HostBackend::RunAdd, p, "Add"); }
  void Copy(const CopyParams& p) override { Dispatch(&HostBackend::RunCopy, p, "Copy"); }
  void ApplyRope(const RopeParams& p) override { Dispatch(&HostBackend::RunApplyRope, p, "ApplyRope"); }
  void WriteKvCache(const KvWriteParams& p) override {
    Dispatch(&HostBackend::RunWriteKvCache, p, "WriteKvCache");
  }
  void GatherKvCache(const GatherKvParams& p) override {
    Dispatch(&HostBackend::RunGatherKvCache, p, "GatherKvCache");
  }
  void MlaPrefill(const MlaPrefillParams& p) override { Dispatch(&HostBackend::RunMlaPrefill, p, "MlaPrefill"); }
  void MergeAttn(const MergeAttnParams& p) override { Dispatch(&HostBackend::RunMergeAttn, p, "MergeAttn"); }
  void MlaDecode(const MlaDecodeParams& p) override { Dispatch(&HostBackend::RunMlaDecode, p, "MlaDecode"); }
  void MoeRoute(const MoeRouteParams& p) override { Dispatch(&HostBackend::RunMoeRoute, p, "MoeRoute"); }
  void MoeAlignBlockSize(const MoeAlignParams& p) override {
    Dispatch(&HostBackend::RunMoeAlignBlockSize, p, "MoeAlignBlockSize");
  }
  void MoeExperts(const MoeExpertsParams& p) override { Dispatch(&HostBackend::RunMoeExperts, p, "MoeExperts"); }
  void TopLogprobs(const TopLogprobsParams& p) override {
    Dispatch(&HostBackend::RunTopLogprobs, p, "TopLogprobs");
  }
  void SampleTokens(const SampleTokensParams& p) override {
    Dispatch(&HostBackend::RunSampleTokens, p, "SampleTokens");
  }

  void BeginCapture() override;
  std::unique_ptr<Graph> EndCapture() override;
  absl::Status Synchronize() override { return absl::OkStatus(); }

  // The per-op profile (MLASERVE_PROFILE=1), or nullptr.
  const OpProfile* profile() const { return profile_.get(); }

 protected:
  virtual void RunEmbedding(const EmbeddingParams& p) = 0;
  virtual void RunRmsNorm(const RmsNormParams& p) = 0;
  virtual void RunGemm(const GemmParams& p) = 0;
  virtual void RunSiluMul(const SiluMulParams& p) = 0;
  virtual void RunAdd(const AddParams& p) = 0;
  virtual void RunCopy(const CopyParams& p) = 0;
  virtual void RunApplyRope(const RopeParams& p) = 0;
  virtual void RunWriteKvCache(const KvWriteParams& p) = 0;
  virtual void RunGatherKvCache(const GatherKvParams& p) = 0;
  virtual void RunMlaPrefill(const MlaPrefillParams& p) = 0;
  virtual void RunMergeAttn(const MergeAttnParams& p) = 0;
  virtual void RunMlaDecode(const MlaDecodeParams& p) = 0;
  virtual void RunMoeRoute(const MoeRouteParams& p) = 0;
  virtual void RunMoeAlignBlockSize(const MoeAlignParams& p) = 0;
  virtual void RunMoeExperts(const MoeExpertsParams& p) = 0;
  // Host memory is read in place, so every host backend shares the reference's selection
  // (kernels/ref/ref_sampling.cc); the engine samples host logits itself and never calls them.
  virtual void RunTopLogprobs(const TopLogprobsParams& p);
  virtual void RunSampleTokens(const SampleTokensParams& p);
  // Called by Allocate for each buffer of 2 MiB or more (2 MiB-aligned, `bytes` whole pages)
  // before its pages are populated: a subclass may set their memory policy. Does nothing here.
  virtual void PlaceLargeBuffer(void* data, size_t bytes) {}

  // During a replay, the cache lines read from the running op's end to the next op's start
  // (for the last op: to the first op's start in the next replay); empty otherwise (eager
  // ops, after a replay). The address is fixed for the backend's life.
  const absl::Span<const void* const>* next_op_lines() const { return &next_op_lines_; }
  // During a replay's last op, Graph::Replay's next_step reader; empty otherwise. A subclass
  // whose last op ends waiting on other threads (CpuBackend) calls it then and empties it. The
  // address is fixed for the backend's life.
  NextStepReader* next_step_reader() { return &next_step_reader_; }

 private:
  template <class Closure>
  static void RunClosure(const void* closure) {
    (*static_cast<const Closure*>(closure))();
  }
  template <class Closure>
  static void DeleteClosure(void* closure) {
    delete static_cast<Closure*>(closure);
  }

  template <typename P>
  void Dispatch(void (HostBackend::*run)(const P&), const P& p, const char* op) {
    OpProfile::Slot* const slot = profile_ ? profile_->Claim(op) : nullptr;
    if (recording_ != nullptr) {
      auto closure = [this, run, p, slot] { Run(run, p, slot); };
      using Closure = decltype(closure);
      recording_->push_back({.run = &RunClosure<Closure>,
                             .closure = {new Closure(std::move(closure)), &DeleteClosure<Closure>},
                             .closure_bytes = static_cast<uint32_t>(sizeof(Closure)),
                             .profile_slot = slot});
    } else {
      Run(run, p, slot);
    }
  }
  // Runs the op, timed into `slot` when profiling.
  template <typename P>
  void Run(void (HostBackend::*run)(const P&), const P& p, OpProfile::Slot* slot) {
    if (slot == nullptr) {
      (this->*run)(p);
      return;
    }
    const int64_t start = profile_->Now();
    (this->*run)(p);
    OpProfile::AddTo(slot, profile_->Now() - start);
  }

  DType activation_dtype_;
  std::unique_ptr<std::vector<RecordedOp>> recording_;
  // Per-op wall time, kept when MLASERVE_PROFILE=1 and printed to stderr on destruction.
  std::unique_ptr<OpProfile> profile_ = OpProfile::FromEnvironment();
  // Beside profile_, which the next op's dispatch reads too: one line for both.
  absl::Span<const void* const> next_op_lines_;
  NextStepReader next_step_reader_;
};

}  // namespace mlaserve

#endif  // MLASERVE_KERNELS_HOST_BACKEND_H_
