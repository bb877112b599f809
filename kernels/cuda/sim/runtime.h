// The CUDA runtime subset the project's host code calls, under the runtime's own names in
// namespace mlaserve::sim (sim.h routes the global names here by macro, so the simulator and the
// real libcudart link into one binary). Device memory is host memory from the heap, so
// AddressSanitizer sees overflows, and with MLASERVE_POISON=1 every allocation starts as 0xFF.
// Streams run their work at once, in order. A stream in capture records launches, copies and
// memsets with their arguments by value instead, exactly as a CUDA graph records them, and
// rejects what CUDA rejects while a capture is open (allocation, synchronous copies,
// synchronisation); an instantiated graph replays the records. Errors follow CUDA: a kernel fault
// is sticky until cudaDeviceReset, other errors are returned once by cudaGetLastError.
//
// Thread-safety: the functions may be called from any thread; a stream is used by one at a time.
#ifndef MLASERVE_KERNELS_CUDA_SIM_RUNTIME_H_
#define MLASERVE_KERNELS_CUDA_SIM_RUNTIME_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <string>

namespace mlaserve::sim {

// Runs `op` on `stream` now, or records it when the stream captures; the result of a run op is
// also recorded as the launch's error (kernel faults sticky).
cudaError_t Enqueue(cudaStream_t stream, std::function<cudaError_t()> op);
// The dynamic shared memory a launch of `func` may use (cudaFuncSetAttribute's opt-in).
cudaError_t CheckDynamicShared(const void* func, size_t bytes);
// Records `error` as the last error (and as sticky when it is a kernel fault); returns it.
cudaError_t SetError(cudaError_t error);

cudaError_t cudaMalloc(void** ptr, size_t bytes);
template <typename T>
cudaError_t cudaMalloc(T** ptr, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(ptr), bytes);
}
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMallocHost(void** ptr, size_t bytes);
template <typename T>
cudaError_t cudaMallocHost(T** ptr, size_t bytes) {
  return cudaMallocHost(reinterpret_cast<void**>(ptr), bytes);
}
cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned int flags);
cudaError_t cudaFreeHost(void* ptr);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = nullptr);
cudaError_t cudaMemset(void* dst, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream = nullptr);
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value);
template <typename T>
cudaError_t cudaFuncSetAttribute(T* func, cudaFuncAttribute attr, int value) {
  return ::mlaserve::sim::cudaFuncSetAttribute(reinterpret_cast<const void*>(func), attr, value);
}
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaDeviceReset();

cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph);
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph,
                                 unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);

cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaEventDestroy(cudaEvent_t event);

cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorString(cudaError_t error);
const char* cudaGetErrorName(cudaError_t error);

}  // namespace mlaserve::sim

#endif  // MLASERVE_KERNELS_CUDA_SIM_RUNTIME_H_
