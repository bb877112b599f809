// CudaBackend: memory, copies, errors, capture and the dispatch of the simple ops.
#include "kernels/cuda/cuda_backend.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/check.h"
#include "kernels/cuda/moe_ops.h"
#include "kernels/cuda/simple_ops.h"

namespace mlaserve {
namespace MLASERVE_CUDA_NS {
namespace {

absl::Status CudaStatus(cudaError_t err, const char* what) {
  return absl::InternalError(
      absl::StrCat(what, ": ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")"));
}

void FreeDevice(void* p) { cudaFree(p); }

}  // namespace

// An instantiated CUDA graph; Replay launches it on the backend's stream.
class CudaBackend::CudaGraph final : public Graph {
 public:
  // exec: nullptr when the capture failed (Replay then reports that).
  CudaGraph(CudaBackend* backend, cudaGraphExec_t exec, uint64_t bytes)
      : backend_(backend), exec_(exec), bytes_(bytes) {}
  ~CudaGraph() override {
    if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
  }
  void Replay(const NextStepReader& /*next_step*/) override {
    if (exec_ == nullptr) {
      backend_->RecordStatus(
          absl::FailedPreconditionError("Replay: the graph's capture failed"));
      return;
    }
    backend_->Record(cudaGraphLaunch(exec_, backend_->stream_), "Replay");
  }
  uint64_t memory_bytes() const override { return bytes_; }

 private:
  CudaBackend* backend_;
  cudaGraphExec_t exec_;
  uint64_t bytes_;
};

CudaBackend::CudaBackend(const CudaBackendOptions& options)
    : device_(options.device),
      batch_invariant_(options.batch_invariant),
      activation_dtype_(options.activation_dtype) {}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(
    const CudaBackendOptions& options) {
  if (options.activation_dtype != DType::kF32 && options.activation_dtype != DType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat("activation dtype must be float32 or bfloat16, not ",
                                                   std::string(DTypeName(options.activation_dtype))));
  }
  std::unique_ptr<CudaBackend> backend(new CudaBackend(options));
  if (absl::Status s = backend->Init(); !s.ok()) return s;
  return backend;
}

absl::Status CudaBackend::Init() {
  int count = 0;
  if (cudaError_t err = cudaGetDeviceCount(&count); err != cudaSuccess || count == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("no CUDA device is available (", cudaGetErrorString(err), ")"));
  }
  if (device_ < 0 || device_ >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA device ", device_, " does not exist (", count, " devices)"));
  }
  if (cudaError_t err = cudaSetDevice(device_); err != cudaSuccess) {
    return CudaStatus(err, "cudaSetDevice");
  }
  if (cudaError_t err = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
      err != cudaSuccess) {
    return CudaStatus(err, "cudaStreamCreateWithFlags");
  }
  if (cudaError_t err = cudaMallocHost(&host_staging_, kHostStagingBytes); err != cudaSuccess) {
    return CudaStatus(err, "cudaMallocHost (copy staging)");
  }
  void* gemm_staging = nullptr;
  if (cudaError_t err = cudaMalloc(&gemm_staging, kGemmStagingBytes); err != cudaSuccess) {
    return CudaStatus(err, "cudaMalloc (GEMM staging)");
  }
  gemm_staging_ = static_cast<__nv_bfloat16*>(gemm_staging);
  if (cudaError_t err = cudaMalloc(&cublas_workspace_, kCublasWorkspaceBytes); err != cudaSuccess) {
    return CudaStatus(err, "cudaMalloc (cuBLAS workspace)");
  }
  if (cudaError_t err = cudaMalloc(&attention_workspace_.data, kAttentionWorkspaceBytes);
      err != cudaSuccess) {
    return CudaStatus(err, "cudaMalloc (attention workspace)");
  }
  attention_workspace_.bytes = kAttentionWorkspaceBytes;
  if (cudaError_t err = cudaDeviceGetAttribute(&attention_workspace_.num_sms,
                                               cudaDevAttrMultiProcessorCount, device_);
      err != cudaSuccess) {
    return CudaStatus(err, "cudaDeviceGetAttribute (multiprocessor count)");
  }
  if (cublasCreate(&cublas_) != CUBLAS_STATUS_SUCCESS ||
      cublasSetStream(cublas_, stream_) != CUBLAS_STATUS_SUCCESS ||
      cublasSetWorkspace(cublas_, cublas_workspace_, kCublasWorkspaceBytes) !=
          CUBLAS_STATUS_SUCCESS) {
    return absl::InternalError("cuBLAS initialisation failed");
  }
  if (PoisonEnabled()) {
    for (auto [p, bytes] : {std::pair<void*, size_t>{gemm_staging_, kGemmStagingBytes},
                            {attention_workspace_.data, kAttentionWorkspaceBytes}}) {
      if (cudaError_t err = cudaMemsetAsync(p, 0xff, bytes, stream_); err != cudaSuccess) {
        return CudaStatus(err, "cudaMemsetAsync (poison)");
      }
    }
  }
  if (cudaError_t err = cudaStreamSynchronize(stream_); err != cudaSuccess) {
    return CudaStatus(err, "cudaStreamSynchronize (start-up)");
  }
  return absl::OkStatus();
}

CudaBackend::~CudaBackend() {
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  if (cublas_ != nullptr) cublasDestroy(cublas_);
  if (attention_workspace_.data != nullptr) cudaFree(attention_workspace_.data);
  if (cublas_workspace_ != nullptr) cudaFree(cublas_workspace_);
  if (gemm_staging_ != nullptr) cudaFree(gemm_staging_);
  if (host_staging_ != nullptr) cudaFreeHost(host_staging_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

void CudaBackend::Record(cudaError_t err, const char* op) {
  if (err != cudaSuccess) RecordStatus(CudaStatus(err, op));
}

void CudaBackend::RecordCublas(cublasStatus_t status, const char* op) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    RecordStatus(absl::InternalError(absl::StrCat(op, ": cuBLAS status ", static_cast<int>(status))));
  }
}

void CudaBackend::RecordStatus(absl::Status status) {
  if (first_error_.ok()) first_error_ = std::move(status);
}

bool CudaBackend::CheckNotCapturing(const char* what) {
  if (!capturing_) return true;
  RecordStatus(absl::FailedPreconditionError(absl::StrCat(what, " during graph capture")));
  return false;
}

absl::StatusOr<DeviceBuffer> CudaBackend::Allocate(size_t bytes) {
  if (!CheckNotCapturing("Allocate")) {
    return absl::FailedPreconditionError("Allocate during graph capture");
  }
  void* p = nullptr;
  if (bytes > 0) {
    if (cudaError_t err = cudaMalloc(&p, bytes); err != cudaSuccess) {
      return absl::ResourceExhaustedError(absl::StrCat("cudaMalloc of ", bytes, " bytes: ",
                                                       cudaGetErrorString(err)));
    }
    if (PoisonEnabled()) Record(cudaMemsetAsync(p, 0xff, bytes, stream_), "Allocate (poison)");
  }
  return DeviceBuffer(p, bytes, &FreeDevice);
}

uint64_t CudaBackend::memory_capacity() const {
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) return 0;
  return total_bytes;
}

void CudaBackend::CopyFromHost(const void* src, size_t bytes, const TensorView& dst) {
  MLASERVE_CHECK(dst.is_contiguous() && static_cast<int64_t>(bytes) <= dst.nbytes());
  if (!CheckNotCapturing("CopyFromHost")) return;
  for (size_t done = 0; done < bytes; done += kHostStagingBytes) {
    const size_t n = std::min(kHostStagingBytes, bytes - done);
    std::memcpy(host_staging_, static_cast<const char*>(src) + done, n);
    Record(cudaMemcpyAsync(dst.ptr<char>() + done, host_staging_, n, cudaMemcpyHostToDevice,
                           stream_),
           "CopyFromHost");
    // The staging buffer is reused by the next chunk (and the next call).
    Record(cudaStreamSynchronize(stream_), "CopyFromHost");
  }
}

void CudaBackend::CopyToHost(const TensorView& src, void* dst, size_t bytes) {
  MLASERVE_CHECK(src.is_contiguous() && static_cast<int64_t>(bytes) <= src.nbytes());
  if (!CheckNotCapturing("CopyToHost")) return;
  for (size_t done = 0; done < bytes; done += kHostStagingBytes) {
    const size_t n = std::min(kHostStagingBytes, bytes - done);
    Record(cudaMemcpyAsync(host_staging_, src.ptr<const char>() + done, n,
                           cudaMemcpyDeviceToHost, stream_),
           "CopyToHost");
    Record(cudaStreamSynchronize(stream_), "CopyToHost");
    std::memcpy(static_cast<char*>(dst) + done, host_staging_, n);
  }
}

void CudaBackend::Embedding(const EmbeddingParams& p) {
  Record(LaunchEmbedding(p, stream_), "Embedding");
}
void CudaBackend::RmsNorm(const RmsNormParams& p) { Record(LaunchRmsNorm(p, stream_), "RmsNorm"); }
void CudaBackend::SiluMul(const SiluMulParams& p) { Record(LaunchSiluMul(p, stream_), "SiluMul"); }
void CudaBackend::Add(const AddParams& p) { Record(LaunchAdd(p, stream_), "Add"); }
void CudaBackend::Copy(const CopyParams& p) { Record(LaunchCopy(p, stream_), "Copy"); }
void CudaBackend::ApplyRope(const RopeParams& p) {
  Record(LaunchApplyRope(p, stream_), "ApplyRope");
}
void CudaBackend::WriteKvCache(const KvWriteParams& p) {
  Record(LaunchWriteKvCache(p, stream_), "WriteKvCache");
}
void CudaBackend::GatherKvCache(const GatherKvParams& p) {
  Record(LaunchGatherKvCache(p, stream_), "GatherKvCache");
}
void CudaBackend::MlaPrefill(const MlaPrefillParams& p) {
  Record(LaunchMlaPrefill(p, attention_workspace_, cublas_, stream_), "MlaPrefill");
}
void CudaBackend::MergeAttn(const MergeAttnParams& p) {
  Record(LaunchMergeAttn(p, stream_), "MergeAttn");
}
int64_t CudaBackend::mla_decode_split_workers(int64_t num_heads) const {
  if (num_heads <= 0) return 0;
  return MlaDecodeWorkers(attention_workspace_, num_heads);
}

void CudaBackend::MlaDecode(const MlaDecodeParams& p) {
  Record(LaunchMlaDecode(p, attention_workspace_, stream_), "MlaDecode");
}
void CudaBackend::MoeRoute(const MoeRouteParams& p) {
  Record(LaunchMoeRoute(p, stream_), "MoeRoute");
}
void CudaBackend::MoeAlignBlockSize(const MoeAlignParams& p) {
  Record(LaunchMoeAlignBlockSize(p, stream_), "MoeAlignBlockSize");
}
void CudaBackend::TopLogprobs(const TopLogprobsParams& p) {
  Record(LaunchTopLogprobs(p, stream_), "TopLogprobs");
}

void CudaBackend::SampleTokens(const SampleTokensParams& p) {
  Record(LaunchSampleTokens(p, stream_), "SampleTokens");
}

void CudaBackend::MoeExperts(const MoeExpertsParams& p) {
  Record(LaunchMoeExperts(p, activation_dtype_, batch_invariant_, cublas_, stream_), "MoeExperts");
}

void CudaBackend::BeginCapture() {
  MLASERVE_CHECK_MSG(!capturing_, "BeginCapture while capturing");
  capturing_ = true;
  Record(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "BeginCapture");
}

std::unique_ptr<Graph> CudaBackend::EndCapture() {
  MLASERVE_CHECK_MSG(capturing_, "EndCapture without BeginCapture");
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  if (cudaError_t err = cudaStreamEndCapture(stream_, &graph); err != cudaSuccess) {
    Record(err, "EndCapture");
    return std::make_unique<CudaGraph>(this, nullptr, 0);
  }
  size_t free_before = 0, free_after = 0, total = 0;
  Record(cudaMemGetInfo(&free_before, &total), "EndCapture");
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (err != cudaSuccess) {
    Record(err, "EndCapture (cudaGraphInstantiate)");
    return std::make_unique<CudaGraph>(this, nullptr, 0);
  }
  Record(cudaMemGetInfo(&free_after, &total), "EndCapture");
  // What instantiation took from the device (0 where it fit in memory the driver already held).
  const uint64_t bytes = free_before > free_after ? free_before - free_after : 0;
  return std::make_unique<CudaGraph>(this, exec, bytes);
}

absl::Status CudaBackend::Synchronize() {
  if (capturing_) {
    RecordStatus(absl::FailedPreconditionError("Synchronize during graph capture"));
  } else {
    Record(cudaStreamSynchronize(stream_), "Synchronize");
  }
  return std::exchange(first_error_, absl::OkStatus());
}

absl::StatusOr<std::unique_ptr<Backend>> NewCudaBackend(const CudaBackendOptions& options) {
  absl::StatusOr<std::unique_ptr<CudaBackend>> backend = CudaBackend::Create(options);
  if (!backend.ok()) return backend.status();
  return std::unique_ptr<Backend>(std::move(*backend));
}

}  // namespace MLASERVE_CUDA_NS

}  // namespace mlaserve
