// CudaBackend: the Backend on one CUDA device (or on the SIMT simulator: the same source built
// with MLASERVE_CUDA_SIM, namespace cuda_sim).
//
// - One non-blocking stream carries every op, copy and graph launch, in order.
// - Memory: Allocate is cudaMalloc (start-up only; never during capture). Construction
//   allocates the pinned host staging buffer of the copies, the bf16 staging buffer of GEMM
//   inputs, cuBLAS's workspace and the attention workspace. No managed memory; with
//   MLASERVE_POISON=1 fresh allocations are filled with 0xFF bytes.
// - Errors: ops only enqueue. The first launch or cuBLAS error since the last Synchronize() is
//   kept (naming the op) and returned by Synchronize(). Shape or dtype mismatches abort.
// - Capture: BeginCapture starts stream capture (thread-local mode); EndCapture instantiates
//   the CUDA graph. During capture Allocate, CopyFromHost, CopyToHost and Synchronize are
//   misuse: they fail (the error is also kept for Synchronize) and touch nothing.
// - Gemm: f32 weights: cuBLAS f32 GEMM. bf16 weights with kBF16 activations: `a` is rounded
//   into the bf16 staging buffer, then cuBLAS bf16 x bf16 -> f32. bf16 weights with f32
//   activations: calls of at most 64 rows (decode steps) stream the weights through the
//   project's GEMV kernel (one warp per output column, 16-byte loads, 8 rows per pass); larger
//   ones stage `a` cut exactly into three bf16 parts (hi + mid + lo = a) and run cuBLAS bf16 x
//   bf16 -> f32 once per part, adding into out, so each product stays exact. Calls cuBLAS cannot
//   take (staging too small, int32 strides) go through the project's tiled kernel.
// - batch_invariant: GemmParams::decode_rows go through the GEMV kernel and the other rows
//   through the tiled kernel, each with one reduction order per output element whatever else
//   shares the call; every other op reduces each row by itself with a fixed block size, and
//   split-KV decode plans each sequence as if it were alone (kernels/mla_split_plan.h).
//   cuBLAS's algorithm choice (which may depend on m) is therefore never used then.
//
// Thread-compatible: one thread at a time, like every Backend.
#ifndef MLASERVE_KERNELS_CUDA_CUDA_BACKEND_H_
#define MLASERVE_KERNELS_CUDA_CUDA_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/cuda/attention_ops.h"
#include "kernels/cuda/compat.cuh"
#include "kernels/cuda/cuda_backend_factory.h"

namespace mlaserve::MLASERVE_CUDA_NS {

struct GemmProblem;  // simple_ops.h

class CudaBackend final : public Backend {
 public:
  // Bytes of the pinned host staging buffer (copies larger than this go in chunks).
  static constexpr size_t kHostStagingBytes = size_t{8} << 20;
  // Bytes of the device bf16 staging buffer of GEMM inputs (larger inputs use the tiled kernel).
  static constexpr size_t kGemmStagingBytes = size_t{32} << 20;
  // Bytes of the cuBLAS workspace (set explicitly so that capture never allocates).
  static constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(const CudaBackendOptions& options);
  ~CudaBackend() override;

  std::string_view name() const override { return "cuda"; }
  bool batch_invariant() const override { return batch_invariant_; }
  DType activation_dtype() const override { return activation_dtype_; }
  // About two blocks per multiprocessor over all heads (MlaDecodeWorkers), in both modes: a
  // batch-invariant backend's plans split each sequence by its own length (MlaSplitRuleFor).
  int64_t mla_decode_split_workers(int64_t num_heads) const override;
  absl::StatusOr<DeviceBuffer> Allocate(size_t bytes) override;
  uint64_t memory_capacity() const override;  // the device's total memory (cudaMemGetInfo)
  void CopyFromHost(const void* src, size_t bytes, const TensorView& dst) override;
  void CopyToHost(const TensorView& src, void* dst, size_t bytes) override;
  const void* HostAddress(const TensorView&) const override { return nullptr; }

  void Embedding(const EmbeddingParams& p) override;
  void RmsNorm(const RmsNormParams& p) override;
  void Gemm(const GemmParams& p) override;  // cuda_gemm.cc
  void SiluMul(const SiluMulParams& p) override;
  void Add(const AddParams& p) override;
  void Copy(const CopyParams& p) override;
  void ApplyRope(const RopeParams& p) override;
  void WriteKvCache(const KvWriteParams& p) override;
  void GatherKvCache(const GatherKvParams& p) override;
  void MlaPrefill(const MlaPrefillParams& p) override;
  void MergeAttn(const MergeAttnParams& p) override;
  void MlaDecode(const MlaDecodeParams& p) override;
  void MoeRoute(const MoeRouteParams& p) override;
  void MoeAlignBlockSize(const MoeAlignParams& p) override;
  void MoeExperts(const MoeExpertsParams& p) override;
  void TopLogprobs(const TopLogprobsParams& p) override;
  void SampleTokens(const SampleTokensParams& p) override;

  void BeginCapture() override;
  std::unique_ptr<Graph> EndCapture() override;
  absl::Status Synchronize() override;

 private:
  class CudaGraph;

  explicit CudaBackend(const CudaBackendOptions& options);
  absl::Status Init();
  // Keeps the first error: a CUDA error of `op`, a cuBLAS status, or a misuse.
  void Record(cudaError_t err, const char* op);
  void RecordCublas(cublasStatus_t status, const char* op);
  void RecordStatus(absl::Status status);
  // g.out = a · g.bᵀ + beta · g.out through cuBLAS, a and b of type ab_type (f32 or bf16),
  // a's rows lda elements apart and its batches a_batch_stride (cuda_gemm.cc).
  void Cublas(const GemmProblem& g, const void* a, cudaDataType_t ab_type, int64_t lda,
              int64_t a_batch_stride, float beta);
  // A misuse during capture: false (and the error kept) when capturing.
  bool CheckNotCapturing(const char* what);

  const int device_;
  const bool batch_invariant_;
  const DType activation_dtype_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  void* host_staging_ = nullptr;          // pinned, kHostStagingBytes
  __nv_bfloat16* gemm_staging_ = nullptr;  // device, kGemmStagingBytes
  void* cublas_workspace_ = nullptr;      // device, kCublasWorkspaceBytes
  AttentionWorkspace attention_workspace_;
  bool capturing_ = false;
  absl::Status first_error_;
};

}  // namespace mlaserve::MLASERVE_CUDA_NS

#endif  // MLASERVE_KERNELS_CUDA_CUDA_BACKEND_H_
