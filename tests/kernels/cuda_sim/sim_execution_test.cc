// The simulator's execution model against deliberate kernel bugs, each of which it must catch,
// and against correct kernels, which must give the right answer under every thread schedule.
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/launch.cuh"

namespace mlaserve::sim {
namespace {

using ::mlaserve::MLASERVE_CUDA_NS::Launch;

constexpr int kThreads = 256;

// Block sum through shared memory: each thread stores, then (after a barrier) thread 0 adds.
__global__ void BlockSum(const float* in, float* out, bool with_barrier) {
  MLASERVE_SHARED(float, partial, [kThreads]);
  const int t = threadIdx.x;
  partial[t] = in[blockIdx.x * kThreads + t];
  if (with_barrier) __syncthreads();
  if (t == 0) {
    float sum = 0;
    for (int i = 0; i < kThreads; ++i) sum += partial[i];
    out[blockIdx.x] = sum;
  }
}

class SimTest : public ::testing::Test {
 protected:
  void TearDown() override {
    cudaDeviceReset();  // kernel faults are sticky, as on a device
    SetSchedule(Schedule::kForward);
  }
};

std::vector<float> RunBlockSum(bool with_barrier, int blocks, cudaError_t* status) {
  std::vector<float> in(blocks * kThreads);
  std::iota(in.begin(), in.end(), 1.0f);
  float *d_in, *d_out;
  EXPECT_EQ(cudaMalloc(&d_in, in.size() * sizeof(float)), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&d_out, blocks * sizeof(float)), cudaSuccess);
  cudaMemcpy(d_in, in.data(), in.size() * sizeof(float), cudaMemcpyHostToDevice);
  *status = Launch(BlockSum, dim3(blocks), dim3(kThreads), 0, nullptr, d_in, d_out, with_barrier);
  std::vector<float> out(blocks);
  cudaMemcpy(out.data(), d_out, blocks * sizeof(float), cudaMemcpyDeviceToHost);
  cudaFree(d_in);
  cudaFree(d_out);
  return out;
}

TEST_F(SimTest, BlockSumWithItsBarrierIsRightUnderEverySchedule) {
  for (Schedule s : {Schedule::kForward, Schedule::kReverse, Schedule::kShuffle}) {
    SetSchedule(s, 7);
    cudaError_t status;
    const std::vector<float> out = RunBlockSum(true, 5, &status);
    ASSERT_EQ(status, cudaSuccess);
    for (int b = 0; b < 5; ++b) {
      const double first = b * kThreads + 1, last = (b + 1) * kThreads;
      EXPECT_EQ(out[b], (first + last) * kThreads / 2) << "block " << b;
    }
  }
}

TEST_F(SimTest, AMissingBarrierGivesAWrongSumUnderSomeSchedule) {
  int wrong = 0;
  for (Schedule s : {Schedule::kForward, Schedule::kReverse, Schedule::kShuffle}) {
    SetSchedule(s, 3);
    cudaError_t status;
    const std::vector<float> out = RunBlockSum(false, 1, &status);
    ASSERT_EQ(status, cudaSuccess);
    if (!(out[0] == (1.0 + kThreads) * kThreads / 2)) ++wrong;  // NaN from poisoned shared memory
  }
  EXPECT_GE(wrong, 1);
}

__global__ void DivergentBarrier(int* out) {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1;
}

TEST_F(SimTest, ABarrierInADivergentBranchIsReported) {
  int* d;
  ASSERT_EQ(cudaMalloc(&d, 64 * sizeof(int)), cudaSuccess);
  EXPECT_EQ(Launch(DivergentBarrier, dim3(1), dim3(64), 0, nullptr, d), cudaErrorLaunchFailure);
  const std::string error = LastKernelError();
  EXPECT_NE(error.find("divergent __syncthreads()"), std::string::npos) << error;
  EXPECT_NE(error.find("DivergentBarrier"), std::string::npos) << error;
  EXPECT_NE(error.find("block (0,0,0)"), std::string::npos) << error;
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);  // sticky
  cudaDeviceReset();
  cudaFree(d);
}

__global__ void ShuffleOutsideMask(float* out) {
  // Lanes 16..31 call with a mask that names only lanes 0..15.
  out[threadIdx.x] = __shfl_xor_sync(0x0000ffffu, 1.0f, 1);
}

__global__ void ShuffleNamingAnIdleLane(float* out) {
  if (threadIdx.x < 16) out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

TEST_F(SimTest, AShuffleWithAWrongMaskIsReported) {
  float* d;
  ASSERT_EQ(cudaMalloc(&d, 32 * sizeof(float)), cudaSuccess);
  EXPECT_EQ(Launch(ShuffleOutsideMask, dim3(1), dim3(32), 0, nullptr, d), cudaErrorLaunchFailure);
  EXPECT_NE(LastKernelError().find("does not name"), std::string::npos) << LastKernelError();
  cudaDeviceReset();
  EXPECT_EQ(Launch(ShuffleNamingAnIdleLane, dim3(1), dim3(32), 0, nullptr, d),
            cudaErrorLaunchFailure);
  EXPECT_NE(LastKernelError().find("has exited"), std::string::npos) << LastKernelError();
  cudaDeviceReset();
  cudaFree(d);
}

__global__ void AddScalar(float* x, float s) { x[threadIdx.x] += s; }
__global__ void AddFromDevice(float* x, const float* s) { x[threadIdx.x] += *s; }

TEST_F(SimTest, AByValueArgumentGoesStaleUnderGraphReplay) {
  float *x, *s;
  ASSERT_EQ(cudaMalloc(&x, 4 * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&s, sizeof(float)), cudaSuccess);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  const float zeros[4] = {0, 0, 0, 0};
  float step_value = 1.0f;
  cudaMemcpy(x, zeros, sizeof zeros, cudaMemcpyHostToDevice);
  cudaMemcpy(s, &step_value, sizeof(float), cudaMemcpyHostToDevice);

  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ(Launch(AddScalar, dim3(1), dim3(2), 0, stream, x, step_value), cudaSuccess);
  ASSERT_EQ(Launch(AddFromDevice, dim3(1), dim3(4), 0, stream, x, s), cudaSuccess);
  cudaGraph_t graph;
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  float host[4];
  cudaMemcpy(host, x, sizeof host, cudaMemcpyDeviceToHost);
  EXPECT_EQ(host[0], 0.0f);  // captured, not run

  step_value = 10.0f;  // the next step's value, as a host variable and through device memory
  cudaMemcpy(s, &step_value, sizeof(float), cudaMemcpyHostToDevice);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaMemcpy(host, x, sizeof host, cudaMemcpyDeviceToHost);
  EXPECT_EQ(host[0], 1.0f + 10.0f);  // the by-value 1.0 captured at launch: stale
  EXPECT_EQ(host[2], 10.0f);         // read through the buffer: current
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  cudaFree(x);
  cudaFree(s);
}

TEST_F(SimTest, CaptureRejectsAllocationAndSynchronisation) {
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 16), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaErrorStreamCaptureUnsupported);
  cudaGraph_t graph;
  EXPECT_EQ(cudaStreamEndCapture(stream, &graph), cudaErrorStreamCaptureInvalidated);
  cudaGetLastError();
  cudaStreamDestroy(stream);
}

__global__ void WarpSums(const float* in, float* xor_sum, float* down_sum, unsigned* ballot,
                         int* any_all) {
  const float v = in[threadIdx.x];
  float a = v, b = v;
  for (int offset = 16; offset > 0; offset /= 2) {
    a += __shfl_xor_sync(0xffffffffu, a, offset);
    b += __shfl_down_sync(0xffffffffu, b, offset);
  }
  xor_sum[threadIdx.x] = a;
  if (threadIdx.x % 32 == 0) down_sum[threadIdx.x / 32] = b;
  const unsigned bits = __ballot_sync(0xffffffffu, v > 10.0f);
  const int any = __any_sync(0xffffffffu, v > 60.0f), all = __all_sync(0xffffffffu, v > 0.0f);
  if (threadIdx.x % 32 == 0) {
    ballot[threadIdx.x / 32] = bits;
    any_all[threadIdx.x / 32] = any * 2 + all;
  }
}

TEST_F(SimTest, WarpShufflesBallotAnyAll) {
  std::vector<float> in(64);
  std::iota(in.begin(), in.end(), 1.0f);
  float *d_in, *x, *down;
  unsigned* ballot;
  int* any_all;
  cudaMalloc(&d_in, 64 * sizeof(float));
  cudaMalloc(&x, 64 * sizeof(float));
  cudaMalloc(&down, 2 * sizeof(float));
  cudaMalloc(&ballot, 2 * sizeof(unsigned));
  cudaMalloc(&any_all, 2 * sizeof(int));
  cudaMemcpy(d_in, in.data(), 64 * sizeof(float), cudaMemcpyHostToDevice);
  for (Schedule s : {Schedule::kForward, Schedule::kReverse, Schedule::kShuffle}) {
    SetSchedule(s, 11);
    ASSERT_EQ(Launch(WarpSums, dim3(1), dim3(64), 0, nullptr, d_in, x, down, ballot, any_all),
              cudaSuccess);
    std::vector<float> hx(64), hd(2);
    unsigned hb[2];
    int ha[2];
    cudaMemcpy(hx.data(), x, 64 * sizeof(float), cudaMemcpyDeviceToHost);
    cudaMemcpy(hd.data(), down, 2 * sizeof(float), cudaMemcpyDeviceToHost);
    cudaMemcpy(hb, ballot, sizeof hb, cudaMemcpyDeviceToHost);
    cudaMemcpy(ha, any_all, sizeof ha, cudaMemcpyDeviceToHost);
    EXPECT_EQ(hx[5], 528.0f);    // 1 + ... + 32
    EXPECT_EQ(hx[40], 1552.0f);  // 33 + ... + 64
    EXPECT_EQ(hd[0], 528.0f);
    EXPECT_EQ(hd[1], 1552.0f);
    EXPECT_EQ(hb[0], 0xfffffc00u);  // values 11..32 are lanes 10..31
    EXPECT_EQ(hb[1], 0xffffffffu);
    EXPECT_EQ(ha[0], 1);      // none above 60, all positive
    EXPECT_EQ(ha[1], 2 + 1);  // 61..64 are above 60
  }
  cudaFree(d_in);
  cudaFree(x);
  cudaFree(down);
  cudaFree(ballot);
  cudaFree(any_all);
}

__global__ void Histogram(const int* in, int n, int* global_bins) {
  MLASERVE_SHARED(int, bins, [8]);
  if (threadIdx.x < 8) bins[threadIdx.x] = 0;
  __syncthreads();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    atomicAdd(&bins[in[i] % 8], 1);
  }
  __syncthreads();
  if (threadIdx.x < 8) atomicAdd(&global_bins[threadIdx.x], bins[threadIdx.x]);
}

TEST_F(SimTest, AtomicsOnSharedAndGlobalMemoryOverManyBlocks) {
  const int n = 100000;
  std::vector<int> in(n);
  std::iota(in.begin(), in.end(), 0);
  int *d_in, *bins;
  cudaMalloc(&d_in, n * sizeof(int));
  cudaMalloc(&bins, 8 * sizeof(int));
  cudaMemcpy(d_in, in.data(), n * sizeof(int), cudaMemcpyHostToDevice);
  cudaMemset(bins, 0, 8 * sizeof(int));
  ASSERT_EQ(Launch(Histogram, dim3(37), dim3(1024), 0, nullptr, d_in, n, bins), cudaSuccess);
  int host[8];
  cudaMemcpy(host, bins, sizeof host, cudaMemcpyDeviceToHost);
  for (int b = 0; b < 8; ++b) EXPECT_EQ(host[b], n / 8) << b;
  cudaFree(d_in);
  cudaFree(bins);
}

__global__ void FillDynamic(float* out, int n) {
  MLASERVE_DYNAMIC_SHARED(float, buffer);
  for (int i = threadIdx.x; i < n; i += blockDim.x) buffer[i] = static_cast<float>(i);
  __syncthreads();
  if (threadIdx.x == 0) out[0] = buffer[n - 1];
}

TEST_F(SimTest, DynamicSharedMemoryAbove48KiBNeedsTheOptIn) {
  const int n = 20000;  // 80,000 bytes
  float* out;
  cudaMalloc(&out, sizeof(float));
  EXPECT_EQ(Launch(FillDynamic, dim3(1), dim3(128), n * sizeof(float), nullptr, out, n),
            cudaErrorInvalidValue);
  cudaGetLastError();
  ASSERT_EQ(cudaFuncSetAttribute(FillDynamic, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 n * sizeof(float)),
            cudaSuccess);
  ASSERT_EQ(Launch(FillDynamic, dim3(1), dim3(128), n * sizeof(float), nullptr, out, n),
            cudaSuccess);
  float host;
  cudaMemcpy(&host, out, sizeof host, cudaMemcpyDeviceToHost);
  EXPECT_EQ(host, n - 1.0f);
  EXPECT_EQ(
      cudaFuncSetAttribute(FillDynamic, cudaFuncAttributeMaxDynamicSharedMemorySize, 228 * 1024),
      cudaErrorInvalidValue);  // above the architecture's 227 KiB
  cudaFree(out);
}

TEST_F(SimTest, InvalidLaunchConfigurationsAreRejected) {
  float* out;
  cudaMalloc(&out, sizeof(float));
  EXPECT_EQ(Launch(FillDynamic, dim3(1), dim3(1025), 0, nullptr, out, 1),
            cudaErrorInvalidConfiguration);
  EXPECT_EQ(Launch(FillDynamic, dim3(0), dim3(32), 0, nullptr, out, 1),
            cudaErrorInvalidConfiguration);
  cudaGetLastError();
  cudaFree(out);
}

__global__ void WriteOnePastTheEnd(float* x, int n) { x[n] = 1.0f; }

TEST_F(SimTest, AnOutOfBoundsWriteIsCaughtByAddressSanitizer) {
#if defined(__SANITIZE_ADDRESS__)
  float* x;
  cudaMalloc(&x, 256 * sizeof(float) - 4);
  EXPECT_DEATH(Launch(WriteOnePastTheEnd, dim3(1), dim3(1), 0, nullptr, x, 255),
               "heap-buffer-overflow");
  cudaFree(x);
#else
  GTEST_SKIP() << "needs an AddressSanitizer build (scripts/sanitize.sh address)";
#endif
}

}  // namespace
}  // namespace mlaserve::sim
