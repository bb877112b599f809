#include "kernels/cuda/sim/runtime.h"

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/sim/executor.h"

using Ops = std::vector<std::function<cudaError_t()>>;

struct CUstream_st {
  bool capturing = false;
  bool invalidated = false;  // an illegal call during the capture
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  Ops record;
};
struct CUgraph_st {
  Ops ops;
};
struct CUgraphExec_st {
  Ops ops;
};
struct CUevent_st {
  std::chrono::steady_clock::time_point time;
  bool recorded = false;
};

namespace mlaserve::sim {
namespace {

struct State {
  std::mutex mu;
  std::map<const void*, size_t> device;  // live cudaMalloc blocks
  std::map<const void*, size_t> host;    // live pinned blocks
  size_t used = 0;
  std::map<const void*, int> max_dynamic_smem;  // cudaFuncSetAttribute opt-ins
  cudaError_t last = cudaSuccess;
  cudaError_t sticky = cudaSuccess;
  int capturing = 0;  // streams in global-mode capture
  std::vector<CUstream_st*> captures;
};

State& S() {
  static State* s = new State;
  return *s;
}

constexpr size_t kDefaultCapacity = size_t{16} << 30;
constexpr size_t kDefaultDynamicSmem = size_t{48} << 10;
constexpr size_t kMaxDynamicSmem = 227 * 1024;

size_t Capacity() {
  if (const char* env = std::getenv("MLASERVE_SIM_DEVICE_MEMORY_BYTES")) {
    return std::strtoull(env, nullptr, 10);
  }
  return kDefaultCapacity;
}

// A call CUDA forbids while a capture is open: it fails and spoils every open capture.
bool ForbiddenDuringCapture(State& s) {
  if (s.capturing == 0) return false;
  for (CUstream_st* c : s.captures) c->invalidated = true;
  return true;
}

// Exactly `bytes` (256-byte aligned, as cudaMalloc), so AddressSanitizer sees the end.
void* AllocateBytes(size_t bytes) {
  void* p = nullptr;
  if (posix_memalign(&p, 256, bytes == 0 ? 1 : bytes) != 0) return nullptr;
  MaybePoison(p, bytes);
  return p;
}

cudaError_t RunOps(const Ops& ops) {
  for (const auto& op : ops) {
    if (cudaError_t e = op(); e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace

cudaError_t SetError(cudaError_t error) {
  if (error == cudaSuccess) return error;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.last = error;
  if (error == cudaErrorLaunchFailure && s.sticky == cudaSuccess) s.sticky = error;
  return error;
}

cudaError_t Enqueue(cudaStream_t stream, std::function<cudaError_t()> op) {
  State& s = S();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.sticky != cudaSuccess) return s.sticky;
    if (stream != nullptr && stream->capturing) {
      stream->record.push_back(std::move(op));
      return cudaSuccess;
    }
    if (stream == nullptr && s.capturing > 0) {
      ForbiddenDuringCapture(s);
      s.last = cudaErrorStreamCaptureImplicit;
      return s.last;
    }
  }
  return SetError(op());
}

cudaError_t CheckDynamicShared(const void* func, size_t bytes) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  size_t limit = kDefaultDynamicSmem;
  if (auto it = s.max_dynamic_smem.find(func); it != s.max_dynamic_smem.end()) {
    limit = static_cast<size_t>(it->second);
  }
  if (bytes <= limit) return cudaSuccess;
  s.last = cudaErrorInvalidValue;
  return s.last;
}

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (ForbiddenDuringCapture(s)) return s.last = cudaErrorStreamCaptureUnsupported;
  if (s.used + bytes > Capacity()) return s.last = cudaErrorMemoryAllocation;
  void* p = AllocateBytes(bytes);
  if (p == nullptr) return s.last = cudaErrorMemoryAllocation;
  s.device[p] = bytes;
  s.used += bytes;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (ForbiddenDuringCapture(s)) return s.last = cudaErrorStreamCaptureUnsupported;
  auto it = s.device.find(ptr);
  if (it == s.device.end()) return s.last = cudaErrorInvalidValue;
  s.used -= it->second;
  s.device.erase(it);
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, size_t bytes) {
  return ::mlaserve::sim::cudaHostAlloc(ptr, bytes, 0);
}

cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned int) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (ForbiddenDuringCapture(s)) return s.last = cudaErrorStreamCaptureUnsupported;
  void* p = AllocateBytes(bytes);
  if (p == nullptr) return s.last = cudaErrorMemoryAllocation;
  s.host[p] = bytes;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.host.erase(ptr) == 0) return s.last = cudaErrorInvalidValue;
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  {
    State& s = S();
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.sticky != cudaSuccess) return s.sticky;
    if (ForbiddenDuringCapture(s)) return s.last = cudaErrorStreamCaptureImplicit;
  }
  if (bytes > 0) std::memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind,
                            cudaStream_t stream) {
  return Enqueue(stream, [=] {
    if (bytes > 0) std::memmove(dst, src, bytes);
    return cudaSuccess;
  });
}

cudaError_t cudaMemset(void* dst, int value, size_t bytes) {
  {
    State& s = S();
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.sticky != cudaSuccess) return s.sticky;
    if (ForbiddenDuringCapture(s)) return s.last = cudaErrorStreamCaptureImplicit;
  }
  std::memset(dst, value, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream) {
  return Enqueue(stream, [=] {
    std::memset(dst, value, bytes);
    return cudaSuccess;
  });
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  const size_t total = Capacity();
  *total_bytes = total;
  *free_bytes = s.used < total ? total - s.used : 0;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidDevice; }

cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device != 0) return cudaErrorInvalidDevice;
  *prop = cudaDeviceProp{};
  std::strncpy(prop->name, "mlaserve SIMT simulator (H100-like)", sizeof(prop->name) - 1);
  prop->totalGlobalMem = Capacity();
  prop->sharedMemPerBlock = kDefaultDynamicSmem;
  prop->sharedMemPerBlockOptin = kMaxDynamicSmem;
  prop->sharedMemPerMultiprocessor = 228 * 1024;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 0x7fffffff;
  prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 132;
  prop->l2CacheSize = 50 << 20;
  prop->maxThreadsPerMultiProcessor = 2048;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  cudaDeviceProp p;
  if (cudaError_t e = ::mlaserve::sim::cudaGetDeviceProperties(&p, device); e != cudaSuccess)
    return e;
  switch (attr) {
    case cudaDevAttrMultiProcessorCount:
      *value = p.multiProcessorCount;
      break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = static_cast<int>(p.sharedMemPerBlockOptin);
      break;
    case cudaDevAttrMaxSharedMemoryPerBlock:
      *value = static_cast<int>(p.sharedMemPerBlock);
      break;
    case cudaDevAttrComputeCapabilityMajor:
      *value = p.major;
      break;
    case cudaDevAttrComputeCapabilityMinor:
      *value = p.minor;
      break;
    case cudaDevAttrWarpSize:
      *value = p.warpSize;
      break;
    case cudaDevAttrMaxThreadsPerBlock:
      *value = p.maxThreadsPerBlock;
      break;
    case cudaDevAttrL2CacheSize:
      *value = p.l2CacheSize;
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;
  if (value < 0 || static_cast<size_t>(value) > kMaxDynamicSmem) return cudaErrorInvalidValue;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.max_dynamic_smem[func] = value;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (ForbiddenDuringCapture(s)) return s.last = cudaErrorStreamCaptureUnsupported;
  return s.sticky;
}

cudaError_t cudaDeviceReset() {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.sticky = s.last = cudaSuccess;
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  return ::mlaserve::sim::cudaStreamCreateWithFlags(stream, 0);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int) {
  *stream = new CUstream_st;
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if ((stream != nullptr && stream->capturing) || (stream == nullptr && s.capturing > 0)) {
    ForbiddenDuringCapture(s);
    return s.last = cudaErrorStreamCaptureUnsupported;
  }
  return s.sticky;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  if (stream == nullptr) return cudaErrorStreamCaptureUnsupported;  // not the legacy stream
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (stream->capturing) return s.last = cudaErrorIllegalState;
  stream->capturing = true;
  stream->invalidated = false;
  stream->mode = mode;
  stream->record.clear();
  if (mode != cudaStreamCaptureModeRelaxed) {
    ++s.capturing;
    s.captures.push_back(stream);
  }
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (stream == nullptr || !stream->capturing) return s.last = cudaErrorIllegalState;
  stream->capturing = false;
  if (stream->mode != cudaStreamCaptureModeRelaxed) {
    --s.capturing;
    std::erase(s.captures, stream);
  }
  Ops ops = std::move(stream->record);
  stream->record.clear();
  if (stream->invalidated) {
    *graph = nullptr;
    return s.last = cudaErrorStreamCaptureInvalidated;
  }
  *graph = new CUgraph_st{std::move(ops)};
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  const bool on = stream != nullptr && stream->capturing;
  *status = !on ? cudaStreamCaptureStatusNone
                : (stream->invalidated ? cudaStreamCaptureStatusInvalidated
                                       : cudaStreamCaptureStatusActive);
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  if (graph == nullptr) return cudaErrorInvalidValue;
  *exec = new CUgraphExec_st{graph->ops};
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (exec == nullptr) return cudaErrorInvalidValue;
  return Enqueue(stream, [exec] { return RunOps(exec->ops); });
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return ::mlaserve::sim::cudaEventCreateWithFlags(event, 0);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) {
  *event = new CUevent_st;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  return Enqueue(stream, [event] {
    event->time = std::chrono::steady_clock::now();
    event->recorded = true;
    return cudaSuccess;
  });
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  return event->recorded ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!start->recorded || !end->recorded) return cudaErrorInvalidResourceHandle;
  *ms = std::chrono::duration<float, std::milli>(end->time - start->time).count();
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}

cudaError_t cudaGetLastError() {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.sticky != cudaSuccess) return s.sticky;
  return std::exchange(s.last, cudaSuccess);
}

cudaError_t cudaPeekAtLastError() {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.sticky != cudaSuccess ? s.sticky : s.last;
}

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorLaunchFailure:
      return "cudaErrorLaunchFailure";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorNotSupported:
      return "cudaErrorNotSupported";
    case cudaErrorNotReady:
      return "cudaErrorNotReady";
    case cudaErrorIllegalState:
      return "cudaErrorIllegalState";
    case cudaErrorStreamCaptureUnsupported:
      return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated:
      return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureImplicit:
      return "cudaErrorStreamCaptureImplicit";
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    default:
      return "cudaError (simulator)";
  }
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure (see the simulator's message)";
    case cudaErrorStreamCaptureUnsupported:
      return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
      return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureImplicit:
      return "operation would make the legacy stream depend on a capturing blocking stream";
    default:
      return ::mlaserve::sim::cudaGetErrorName(error);
  }
}

}  // namespace mlaserve::sim
