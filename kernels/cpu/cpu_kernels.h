// The instruction-set-specific primitives of the CPU backend, gathered in one table per ISA
// build (cpu_kernels_{amx,avx512,avx2,scalar}.cc; the AVX-512 file holds two builds, with and
// without the BF16 dot-product instructions, and the AMX build is the BF16 one with its packed
// GEMM on tiles). The ops in kernels/cpu/*.cc are ISA-neutral:
// they validate, partition work over threads and call these primitives, so every ISA runs the
// same algorithm and differs only in vector width and register blocking.
//
// Primitives are single-threaded and allocation-free; any scratch they need is passed in.
#ifndef MLASERVE_KERNELS_CPU_CPU_KERNELS_H_
#define MLASERVE_KERNELS_CPU_CPU_KERNELS_H_

#include <cstdint>

#include "kernels/cpu/cpu_features.h"
#include "kernels/dtype.h"

namespace mlaserve {

// One block of C (+)= A · Bᵀ: rows i < m of C, columns [n_begin, n_end), f32 accumulation.
// Rows may be gathered (row_ids) so that MoE experts read and write their tokens in place.
// How a GEMM call picks its kernel. Each of kFixedDot, kFixedTiles and kPacked has one
// reduction order per output element whatever m, which is what batch invariance needs; kBySize
// switches between them by m (the faster choice, but a row then rounds differently in calls of
// other sizes).
enum class GemmPath : uint8_t {
  kBySize,    // dot products for m <= GemvImpl::kMaxM rows, packed micro-kernels beyond
  kFixedDot,  // dot products at a fixed depth, in row chunks, for any m (decode rows)
  kPacked,    // packed micro-kernels for any m (prompt rows)
  // Tile products at a fixed depth, in chunks of 16 rows, for any m: decode rows against bf16
  // weights on builds with CpuKernels::fixed_tiles (no other build is given it).
  kFixedTiles,
};

struct GemmArgs {
  const float* a = nullptr;        // row i at a + (a_rows ? a_rows[i] : i) * lda, k elements
  int64_t lda = 0;
  const int32_t* a_rows = nullptr;  // optional [m]
  const void* b = nullptr;         // [n, k] f32 or bf16: row j at b + j * ldb (elements)
  DType b_dtype = DType::kBF16;
  int64_t ldb = 0;
  float* c = nullptr;              // row i at c + (c_rows ? c_rows[i] : i) * ldc
  int64_t ldc = 0;
  const int32_t* c_rows = nullptr;  // optional [m]
  int64_t m = 0;
  int64_t k = 0;
  int64_t n_begin = 0;
  int64_t n_end = 0;
  // When > 0, the columns [n_begin + n_repeat, n_end + n_repeat) as well (n_repeat >=
  // n_end - n_begin), with the same results as a second call over them: one call for two
  // slices of a weight, such as a slice of an expert's gate and the same slice of its up
  // projection. The packed path packs each block of A once for both.
  int64_t n_repeat = 0;
  bool accumulate = false;  // C += A · Bᵀ instead of C = A · Bᵀ
  GemmPath path = GemmPath::kBySize;
  // Each element of A is rounded to bf16 (nearest even) before the products, which stay exact
  // in f32 with bf16 weights (bf16 activations, --dtype=bfloat16). Builds with bf16 dot-product
  // instructions then multiply with them on the packed and the dot-product paths.
  bool a_bf16 = false;
};

// C += A · B with B stored [k, n] (the value side of attention: rows of B are cache rows).
struct GemmNnArgs {
  const float* a = nullptr;  // [m, k], row stride lda
  int64_t lda = 0;
  const void* b = nullptr;   // [k, n] f32 or bf16, row stride ldb (elements)
  DType b_dtype = DType::kBF16;
  int64_t ldb = 0;
  float* c = nullptr;        // [m, n], row stride ldc
  int64_t ldc = 0;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
};

// Floats of scratch one Gemm call needs (packed A block and one packed B panel), for every ISA.
inline constexpr int64_t kGemmScratchFloats = 512 * (512 + 16) + 512 * 32;

// What a sampler needs of one row of logits x[0, n), from CpuKernels::row_stats. The row is
// read once, in blocks of kRowStatsBlock entries with non-temporal prefetches ahead (so that a
// batch of vocabulary-wide rows does not push the decode step's own lines out of L2 and L3):
// each block's maximum, then its terms from L1.
inline constexpr int64_t kRowStatsBlock = 256;
struct RowStats {
  float max = 0.0f;         // the largest x[i] (a NaN in x may or may not be taken for it)
  int64_t first_block = 0;  // start of the first block whose maximum is `max`
  // Σ exp(x[i] - max): each term in f32 (within an ulp) against the largest value read up to
  // its block, summed lane-wise in f32 per block, the blocks in double, each block's sum
  // scaled by exp(that value - max): within ~1e-6 relative of the exact sum.
  double sum_exp = 0.0;
};

// What the Gumbel screen of a sampled draw needs (sampling::DrawToken; the rule:
// cpu_gumbel_screen.h): the row, its largest value, 1 / temperature, the row's noise stream
// (sampling::RowStream) and the best Gumbel-max score found so far.
struct GumbelScreen {
  const float* values = nullptr;
  float max = 0.0f;
  double inv_temperature = 1.0;
  uint64_t stream = 0;
  double best = 0.0;
};

struct CpuKernels {
  CpuIsa isa;
  // Columns of one packed B panel: work split over threads in multiples of it keeps every
  // panel but the last full.
  int gemm_panel_cols;
  // Whether the routed experts' rows against bf16 weights all take GemmPath::kFixedDot (a few
  // dozen rows per expert, where packing each item's weight panel costs more than the dot
  // products' extra loads), rather than the packed path beyond kMaxM rows.
  bool expert_rows_by_dot;
  // Whether GemmPath::kFixedTiles runs on tiles here (the AMX builds).
  bool fixed_tiles;
  // scratch: kGemmScratchFloats, 64-byte aligned, private to the calling thread.
  void (*gemm)(const GemmArgs& args, float* scratch);
  void (*gemm_nn)(const GemmNnArgs& args);
  // Largest x[i], i < n (n >= 1).
  float (*max)(const float* x, int64_t n);
  // x[i] = exp(x[i] - shift); returns the sum of the new values.
  float (*exp_sum)(float* x, int64_t n, float shift);
  // A row's softmax statistics from one read of x[0, n) (n >= 1), which stays out of the
  // outer caches (RowStats).
  RowStats (*row_stats)(const float* x, int64_t n);
  // p[i] = exp((x[i] - max) / temperature) in double, i < n: sampling::RelativeProbability
  // over a row (x[i] <= max or NaN), each within an ulp or two of std::exp's value (the
  // portable build: std::exp itself).
  void (*relative_probabilities)(const float* x, int64_t n, float max, float temperature,
                                 double* p);
  // The tokens ids[i] (i itself when ids is null), begin <= i < end, that the Gumbel screen
  // keeps (those whose score could still reach screen.best), in order, into out; returns how
  // many. Every build keeps exactly the tokens the scalar rule keeps.
  int32_t (*gumbel_screen)(const GumbelScreen& screen, const int32_t* ids, int32_t begin,
                           int32_t end, int32_t* out);
  // x[i] *= s.
  void (*scale)(float* x, int64_t n, float s);
  // y[i] += a * x[i].
  void (*axpy)(float* y, const float* x, int64_t n, float a);
  // out[i] = silu(gate[i]) * up[i]; out may alias gate.
  void (*silu_mul)(const float* gate, const float* up, float* out, int64_t n);
  // Σ x[i]².
  float (*sum_squares)(const float* x, int64_t n);
  // out[i] = x[i] * s * w[i], w f32 or bf16; out may alias x.
  void (*scale_mul)(const float* x, float s, const void* w, DType w_dtype, float* out, int64_t n);
};

// The table of `isa`; the ISA must be supported by the processor (see SelectCpuIsa).
const CpuKernels& GetCpuKernels(CpuIsa isa);

// One table per build, defined in the ISA-specific files.
const CpuKernels& AmxBf16Kernels();
const CpuKernels& Avx512Bf16Kernels();
const CpuKernels& Avx512Kernels();
const CpuKernels& Avx2Kernels();
const CpuKernels& ScalarKernels();

// The AMX build's algorithm over a software model of the tile instructions (EmulatedTiles in
// cpu_amx_tiles.h): it runs wherever the avx512_bf16 build runs, and tests use it to prove the
// AMX GEMM on processors without AMX. GetCpuKernels never returns it.
const CpuKernels& AmxEmulatedKernels();

}  // namespace mlaserve

#endif  // MLASERVE_KERNELS_CPU_CPU_KERNELS_H_
