// Backend: executes tensor ops on one device. Owned and used by one thread (the engine thread).
//
// Contract for every op method:
// - it only enqueues work (the CPU backends run it at once), never allocates, and is legal
//   between BeginCapture and EndCapture, where it is recorded instead of run;
// - shape or dtype mismatches are programmer errors (MLASERVE_CHECK);
// - device errors are sticky and reported by the next Synchronize().
// Semantics of each op are documented on its params struct in kernels/params.h.
#ifndef MLASERVE_KERNELS_BACKEND_H_
#define MLASERVE_KERNELS_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/next_step_reader.h"
#include "kernels/params.h"
#include "kernels/tensor.h"

namespace mlaserve {

// An allocation owned by a Backend. Move-only; freed on destruction.
class DeviceBuffer {
 public:
  using Deleter = void (*)(void*);
  DeviceBuffer() = default;
  DeviceBuffer(void* data, size_t bytes, Deleter deleter)
      : data_(data), bytes_(bytes), deleter_(deleter) {}
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      Reset();
      data_ = o.data_;
      bytes_ = o.bytes_;
      deleter_ = o.deleter_;
      o.data_ = nullptr;
      o.bytes_ = 0;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Reset(); }

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void Reset() {
    if (data_ != nullptr && deleter_ != nullptr) deleter_(data_);
    data_ = nullptr;
  }
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Deleter deleter_ = nullptr;
};

// A recorded sequence of ops bound to fixed buffers. Replay re-runs them with whatever the
// buffers hold at that moment; it performs no allocation and no shape logic.
class Graph {
 public:
  virtual ~Graph() = default;
  // next_step: reads what the host reads after this replay and before the next step's ops
  // (the next step's planning: most likely the lines this step's planning read). A host graph
  // calls it once, in its last op, when the calling thread's part of that op has ended and
  // other threads may still work: that op's weights have evicted those lines, and read after
  // the replay, one needed after another, each would come from memory in turn. A device graph
  // ignores it. REQUIRES: next_step.read may be called until Replay returns.
  virtual void Replay(const NextStepReader& next_step) = 0;
  // Bytes the graph itself owns, beyond the buffers its ops are bound to (an instantiated
  // CUDA graph's memory; on the host, the storage of the recorded op list).
  virtual uint64_t memory_bytes() const = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string_view name() const = 0;  // "ref", "cpu" or "cuda"
  // Whether each row's result of every op is independent of the other rows in the call (one
  // reduction order per row whatever the batch), so that a sequence's logits do not depend on
  // what else is batched with it (`--deterministic`).
  virtual bool batch_invariant() const = 0;
  // The precision activations meet bf16 weights in (`--dtype`): kF32, or kBF16, where every
  // element of a Gemm's `a` and of MoeExperts' x and expert activations is first rounded to bf16
  // (nearest even) when the weights it multiplies are bf16. Products and sums stay f32, and
  // everything else (residual stream, norms, attention, routing) stays f32 either way.
  virtual DType activation_dtype() const = 0;
  // How many parallel work items an MlaDecode over `num_heads` heads wants the positions of a
  // step's sequences spread over (the `workers` of kernels/mla_split_plan.h), or 0 where the
  // backend takes no split-KV plan (the host backends split internally). A batch-invariant
  // backend's plans split each sequence by its own length (MlaSplitRuleFor).
  virtual int64_t mla_decode_split_workers(int64_t num_heads) const {
    (void)num_heads;
    return 0;
  }

  // Start-up only. The memory is uninitialized; with MLASERVE_POISON=1 in the environment it
  // is filled with 0xFF bytes (NaN for floats, -1 for i32) so that reads of unwritten
  // elements show up in tests.
  virtual absl::StatusOr<DeviceBuffer> Allocate(size_t bytes) = 0;
  // Bytes of memory Allocate draws from (the host's physical memory for the host backends).
  virtual uint64_t memory_capacity() const = 0;
  // Copies between host memory and a contiguous device view (blocking for CopyToHost).
  virtual void CopyFromHost(const void* src, size_t bytes, const TensorView& dst) = 0;
  virtual void CopyToHost(const TensorView& src, void* dst, size_t bytes) = 0;
  // Where the host can read a contiguous device view in place, with every op enqueued so far
  // finished, and write it while no enqueued op reads it (the host backends: view.data());
  // nullptr where it has to be copied. The answer does not depend on when it is asked: asked
  // before the ops that write the view, it is where their results can be read once they have
  // run.
  virtual const void* HostAddress(const TensorView& view) const = 0;

  // Host work between ops, such as drawing each row's token from logits read in place: runs
  // fn(task, lane) once for every task < count and returns when all have returned. Tasks may
  // run at the same time on up to host_lanes() threads, `lane` (< host_lanes()) naming the one
  // running a task (for per-lane scratch), so a task touches only its own outputs. Called by the
  // backend's owner between ops, never while a capture is open. Default: the tasks in order on
  // the calling thread, lane 0.
  virtual int host_lanes() const { return 1; }
  virtual void RunHostTasks(int64_t count, absl::FunctionRef<void(int64_t task, int lane)> fn) {
    for (int64_t task = 0; task < count; ++task) fn(task, 0);
  }

  virtual void Embedding(const EmbeddingParams& p) = 0;
  virtual void RmsNorm(const RmsNormParams& p) = 0;
  virtual void Gemm(const GemmParams& p) = 0;
  virtual void SiluMul(const SiluMulParams& p) = 0;
  virtual void Add(const AddParams& p) = 0;
  virtual void Copy(const CopyParams& p) = 0;
  virtual void ApplyRope(const RopeParams& p) = 0;
  virtual void WriteKvCache(const KvWriteParams& p) = 0;
  virtual void GatherKvCache(const GatherKvParams& p) = 0;
  virtual void MlaPrefill(const MlaPrefillParams& p) = 0;
  virtual void MergeAttn(const MergeAttnParams& p) = 0;
  virtual void MlaDecode(const MlaDecodeParams& p) = 0;
  virtual void MoeRoute(const MoeRouteParams& p) = 0;
  virtual void MoeAlignBlockSize(const MoeAlignParams& p) = 0;
  virtual void MoeExperts(const MoeExpertsParams& p) = 0;
  virtual void TopLogprobs(const TopLogprobsParams& p) = 0;
  virtual void SampleTokens(const SampleTokensParams& p) = 0;

  // Between these two calls ops are recorded, not run. The returned graph replays them.
  virtual void BeginCapture() = 0;
  virtual std::unique_ptr<Graph> EndCapture() = 0;

  // Waits for enqueued work; returns the first device error since the last call.
  virtual absl::Status Synchronize() = 0;
};

// Fills freshly allocated memory with the poison pattern when MLASERVE_POISON=1.
bool PoisonEnabled();
void MaybePoison(void* data, size_t bytes);

}  // namespace mlaserve

#endif  // MLASERVE_KERNELS_BACKEND_H_
