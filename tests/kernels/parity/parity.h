// Op-family parity bodies shared by the CPU tests (tests/kernels/cpu_vs_ref_*) and the CUDA tests
// (tests/kernels/cuda/cuda_vs_ref_*): each body runs one op family of the backend under test
// and of the oracle (kernels/ref) on the same cases and holds both backends to the same grid
// and tolerances. Inputs are made on the oracle and cloned to the backend under test, so
// MLASERVE_POISON=1 applies to both. Failures are gtest failures at the body's lines, labelled
// with the case.
#ifndef MLASERVE_TESTS_KERNELS_PARITY_PARITY_H_
#define MLASERVE_TESTS_KERNELS_PARITY_PARITY_H_

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "kernels/backend.h"
#include "tests/kernels/kernel_test_util.h"

namespace mlaserve::test {

// The backends a parity body compares.
struct ParityBackends {
  Backend& ref;       // the oracle, f32 activations
  Backend& ref_bf16;  // the oracle with bf16 activations (--dtype=bfloat16)
  Backend& dut;       // the backend under test, f32 activations
  Backend& dut_bf16;  // the backend under test with bf16 activations
};

// MLA attention: prefill (causal with and without cached context, non-causal, queries that see
// no key, an empty sequence), the log-sum-exp merge including infinite lse, and absorbed decode
// over a shuffled paged cache (one long sequence, several, ragged lengths, odd block sizes).
void ExpectMlaPrefillMatchesRef(const ParityBackends& b);
void ExpectMergeAttnMatchesRef(const ParityBackends& b);
void ExpectMlaDecodeMatchesRef(const ParityBackends& b);

// MoE: routing for every scoring and top-k method (ties common), block alignment bit-exact,
// and the routed experts over expert counts, top-k, token counts and block sizes with bf16 and
// f32 weights, in f32 and bf16 activations.
void ExpectMoeRouteMatchesRef(const ParityBackends& b);
void ExpectMoeAlignMatchesRefExactly(const ParityBackends& b);
void ExpectMoeExpertsMatchRef(const ParityBackends& b);
// `invariant` is a batch-invariant backend: decode tokens' rows (MoeExpertsParams::decode_tokens)
// keep their bits whatever shares the call; prompt tokens' rows likewise.
void ExpectMoeExpertsDecodeTokensInvariant(Backend& ref, Backend& invariant);

// The inputs of one MlaDecode call: block tables, lengths, a random paged latent cache of
// `cache_dtype` and random f32 queries, all on one backend.
struct MlaDecodeInputs {
  TestTensor tables;    // [seqs, max_blocks] i32
  TestTensor lens;      // [seqs] i32
  TestTensor cache;     // [blocks, block_size, rank + rope]
  TestTensor q_latent;  // [seqs, heads, rank] f32
  TestTensor q_pe;      // [seqs, heads, rope] f32

  static constexpr float kSoftmaxScale = 0.125f;

  // Params over these inputs writing `out` ([seqs, heads, rank] f32, on the same backend);
  // no split plan.
  MlaDecodeParams Params(const TestTensor& out) const;
  // A new [seqs, heads, rank] f32 output tensor on the inputs' backend.
  TestTensor NewOutput(Backend& backend) const;
  MlaDecodeInputs CloneTo(Backend& backend) const;
};

// Blocks a sequence of each length occupies, at most.
int64_t MaxBlocksPerSeq(std::span<const int32_t> lens, int64_t block_size);

// Inputs over the given table ([lens.size(), table.size() / lens.size()]) into a cache of
// `blocks` blocks; the cache and queries are drawn from rng in that order.
MlaDecodeInputs MakeMlaDecodeInputs(Backend& backend, std::mt19937& rng, DType cache_dtype,
                                    int64_t heads, int64_t rank, int64_t rope, int64_t block_size,
                                    std::span<const int32_t> lens, std::span<const int32_t> table,
                                    int64_t blocks);

}  // namespace mlaserve::test

#endif  // MLASERVE_TESTS_KERNELS_PARITY_PARITY_H_
