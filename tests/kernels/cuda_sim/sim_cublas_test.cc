// The simulator's cuBLAS subset against a naive row-by-row GEMM written from cuBLAS's documented
// semantics (column-major; op(A) is m x k, op(B) k x n; C = alpha op(A) op(B) + beta C), and the
// bf16 conversions against round-to-nearest-even computed here bit by bit.
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/compat.cuh"

namespace mlaserve::sim {
namespace {

struct Case {
  cublasOperation_t ta, tb;
  int m, n, k, lda, ldb, ldc;
};

// The documented definition, element by element, in double.
std::vector<double> Naive(const Case& c, const std::vector<float>& a, const std::vector<float>& b,
                          const std::vector<float>& c0, float alpha, float beta) {
  std::vector<double> out(c0.begin(), c0.end());
  for (int i = 0; i < c.m; ++i) {
    for (int j = 0; j < c.n; ++j) {
      double sum = 0;
      for (int l = 0; l < c.k; ++l) {
        const double av = c.ta == CUBLAS_OP_N ? a[i + l * c.lda] : a[l + i * c.lda];
        const double bv = c.tb == CUBLAS_OP_N ? b[l + j * c.ldb] : b[j + l * c.ldb];
        sum += av * bv;
      }
      out[i + j * c.ldc] = alpha * sum + (beta == 0 ? 0.0 : beta * c0[i + j * c.ldc]);
    }
  }
  return out;
}

template <typename T>
T* Device(const std::vector<T>& host) {
  T* d;
  EXPECT_EQ(cudaMalloc(&d, host.size() * sizeof(T)), cudaSuccess);
  cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  return d;
}

class SimCublasTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(cublasCreate(&handle_), CUBLAS_STATUS_SUCCESS); }
  void TearDown() override { cublasDestroy(handle_); }
  cublasHandle_t handle_ = nullptr;
};

TEST_F(SimCublasTest, GemmExEveryTransposeWithPaddedLeadingDimensions) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (cublasOperation_t ta : {CUBLAS_OP_N, CUBLAS_OP_T}) {
    for (cublasOperation_t tb : {CUBLAS_OP_N, CUBLAS_OP_T}) {
      for (float beta : {0.0f, 1.0f, 0.5f}) {
        Case c{ta, tb, 7, 5, 9, 0, 0, 11};
        c.lda = (ta == CUBLAS_OP_N ? c.m : c.k) + 2;
        c.ldb = (tb == CUBLAS_OP_N ? c.k : c.n) + 3;
        std::vector<float> a(c.lda * (ta == CUBLAS_OP_N ? c.k : c.m));
        std::vector<float> b(c.ldb * (tb == CUBLAS_OP_N ? c.n : c.k));
        std::vector<float> c0(c.ldc * c.n);
        for (auto* v : {&a, &b, &c0}) {
          for (float& x : *v) x = dist(rng);
        }
        if (beta == 0) {
          for (float& x : c0) x = std::numeric_limits<float>::quiet_NaN();  // must not be read
        }
        float *da = Device(a), *db = Device(b), *dc = Device(c0);
        const float alpha = 1.5f;
        ASSERT_EQ(cublasGemmEx(handle_, ta, tb, c.m, c.n, c.k, &alpha, da, CUDA_R_32F, c.lda, db,
                               CUDA_R_32F, c.ldb, &beta, dc, CUDA_R_32F, c.ldc, CUBLAS_COMPUTE_32F,
                               CUBLAS_GEMM_DEFAULT),
                  CUBLAS_STATUS_SUCCESS);
        std::vector<float> got(c0.size());
        cudaMemcpy(got.data(), dc, got.size() * sizeof(float), cudaMemcpyDeviceToHost);
        const std::vector<double> want = Naive(c, a, b, c0, alpha, beta);
        for (int j = 0; j < c.n; ++j) {
          for (int i = 0; i < c.m; ++i) {
            EXPECT_NEAR(got[i + j * c.ldc], want[i + j * c.ldc], 1e-5)
                << "ta=" << ta << " tb=" << tb << " beta=" << beta << " i=" << i << " j=" << j;
          }
        }
        cudaFree(da);
        cudaFree(db);
        cudaFree(dc);
      }
    }
  }
}

TEST_F(SimCublasTest, StridedBatchedBf16InputsWithF32Output) {
  const int m = 4, n = 3, k = 6, batch = 3;
  const long long sa = m * k + 5, sb = k * n + 1, sc = m * n + 2;
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> dist(-2, 2);
  std::vector<float> af(sa * batch), bf(sb * batch);
  for (float& x : af) x = __bfloat162float(__float2bfloat16(dist(rng)));
  for (float& x : bf) x = __bfloat162float(__float2bfloat16(dist(rng)));
  std::vector<__nv_bfloat16> a(af.size()), b(bf.size());
  for (size_t i = 0; i < af.size(); ++i) a[i] = __float2bfloat16(af[i]);
  for (size_t i = 0; i < bf.size(); ++i) b[i] = __float2bfloat16(bf[i]);
  std::vector<float> c0(sc * batch, 0.0f);
  auto *da = Device(a), *db = Device(b);
  float* dc = Device(c0);
  const float alpha = 1, beta = 0;
  // op(A) = Aᵀ with A stored k x m (lda = k); B stored k x n (ldb = k).
  ASSERT_EQ(
      cublasGemmStridedBatchedEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, da,
                                 CUDA_R_16BF, k, sa, db, CUDA_R_16BF, k, sb, &beta, dc, CUDA_R_32F,
                                 m, sc, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      CUBLAS_STATUS_SUCCESS);
  std::vector<float> got(c0.size());
  cudaMemcpy(got.data(), dc, got.size() * sizeof(float), cudaMemcpyDeviceToHost);
  for (int p = 0; p < batch; ++p) {
    const Case c{CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, k, k, m};
    const std::vector<float> ap(af.begin() + p * sa, af.begin() + p * sa + k * m);
    const std::vector<float> bp(bf.begin() + p * sb, bf.begin() + p * sb + k * n);
    const std::vector<double> want = Naive(c, ap, bp, std::vector<float>(m * n, 0.0f), 1, 0);
    for (int i = 0; i < m * n; ++i) EXPECT_NEAR(got[p * sc + i], want[i], 1e-5) << p << " " << i;
  }
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
}

TEST_F(SimCublasTest, InvalidArgumentsAreRejectedAsCublasDoes) {
  const float one = 1;
  float* d;
  cudaMalloc(&d, 64 * sizeof(float));
  // lda below m for op N.
  EXPECT_EQ(
      cublasGemmEx(handle_, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, d, CUDA_R_32F, 3, d,
                   CUDA_R_32F, 4, &one, d, CUDA_R_32F, 4, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      CUBLAS_STATUS_INVALID_VALUE);
  // ldb below n for op T.
  EXPECT_EQ(
      cublasGemmEx(handle_, CUBLAS_OP_N, CUBLAS_OP_T, 4, 5, 4, &one, d, CUDA_R_32F, 4, d,
                   CUDA_R_32F, 4, &one, d, CUDA_R_32F, 4, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      CUBLAS_STATUS_INVALID_VALUE);
  // A f32 with B bf16 is no supported combination.
  EXPECT_EQ(
      cublasGemmEx(handle_, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, d, CUDA_R_32F, 4, d,
                   CUDA_R_16BF, 4, &one, d, CUDA_R_32F, 4, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      CUBLAS_STATUS_NOT_SUPPORTED);
  cudaFree(d);
}

TEST_F(SimCublasTest, GemmIsRecordedDuringCaptureAndReadsInputsAtReplay) {
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  cublasSetStream(handle_, stream);
  std::vector<float> a = {2}, b = {3}, c = {0};
  float *da = Device(a), *db = Device(b), *dc = Device(c);
  const float one = 1, zero = 0;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ(cublasGemmEx(handle_, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, da, CUDA_R_32F, 1, db,
                         CUDA_R_32F, 1, &zero, dc, CUDA_R_32F, 1, CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  cudaGraph_t graph;
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  const float five = 5;
  cudaMemcpy(da, &five, sizeof five, cudaMemcpyHostToDevice);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  float got;
  cudaMemcpy(&got, dc, sizeof got, cudaMemcpyDeviceToHost);
  EXPECT_EQ(got, 15.0f);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
}

// Round to nearest even, from the bits, independent of CUDA's header.
uint16_t ReferenceBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

TEST(SimBf16Test, ConversionsRoundToNearestEvenLikeTheReference) {
  std::vector<float> values = {0.0f,
                               -0.0f,
                               1.0f,
                               1.00390625f,
                               1.0078125f,
                               1.01171875f,
                               3.0e38f,
                               -3.4028235e38f,
                               1e-40f,
                               -1e-45f,
                               std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity()};
  std::mt19937 rng(1);
  for (int i = 0; i < 100000; ++i) {
    uint32_t u = rng();
    float f;
    std::memcpy(&f, &u, 4);
    if (f == f) values.push_back(f);
  }
  for (float f : values) {
    const __nv_bfloat16 b = __float2bfloat16(f);
    uint16_t bits;
    std::memcpy(&bits, &b, 2);
    ASSERT_EQ(bits, ReferenceBf16(f)) << f;
    uint32_t widened = uint32_t{bits} << 16;
    float back;
    std::memcpy(&back, &widened, 4);
    ASSERT_EQ(__bfloat162float(b), back);
  }
  EXPECT_TRUE(std::isnan(__bfloat162float(__float2bfloat16(std::nanf("")))));
}

}  // namespace
}  // namespace mlaserve::sim
