// Split-KV MLA decode on the CUDA backend against the oracle (kernels/ref): plans of 1 to many
// items per sequence built by PlanMlaSplits by both rules for 1 to 300 workers (more items than
// the launch has block rows, so blocks take several), ragged lengths that are not multiples of
// the block size, graph-bucket padding rows (length 1 over block 0), plan slots past the plan
// left unused, and the workspaces left poisoned (MLASERVE_POISON=1) so that a read of a partial
// result nobody wrote shows. Also: per-sequence plans make a sequence's decode the same bits
// alone and in company (--deterministic).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/mla_split_plan.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/parity/parity.h"

namespace mlaserve::test {
namespace {

using CudaMlaSplitTest = CudaVsRefTest;

struct SplitCase {
  int64_t heads, rank, rope, block_size, workers;
  std::vector<int32_t> lens;
  int64_t padding_rows;  // extra rows of length 1 over block 0, as a graph bucket pads
};

std::string Describe(const SplitCase& c, DType dt, MlaSplitRule rule) {
  std::string lens;
  for (int32_t len : c.lens) lens += std::to_string(len) + ",";
  return std::string(DTypeName(dt)) + " heads=" + std::to_string(c.heads) +
         " block=" + std::to_string(c.block_size) + " workers=" + std::to_string(c.workers) +
         " lens=" + lens + " padding=" + std::to_string(c.padding_rows) +
         (rule == MlaSplitRule::kBalanced ? " balanced" : " per-sequence");
}

// Runs `backend`'s MlaDecode over `p` with a plan of `rule` for `lens` (the rows of p) over
// `workers`, with fresh (poisoned) split workspaces. Returns the items planned.
int64_t DecodeWithPlan(Backend& backend, MlaDecodeParams p, const std::vector<int32_t>& lens,
                       int64_t block_size, int64_t workers, MlaSplitRule rule) {
  const int64_t seqs = static_cast<int64_t>(lens.size());
  const int64_t heads = p.q_latent.size(1), rank = p.q_latent.size(2);
  const int64_t capacity = MlaSplitCapacity(seqs, workers, rule);
  std::vector<int32_t> offsets(static_cast<size_t>(seqs + 1));
  std::vector<MlaSplitItem> items(static_cast<size_t>(capacity));
  const int64_t used = PlanMlaSplits(lens, block_size, workers, absl::MakeSpan(offsets),
                                     absl::MakeSpan(items), rule);
  std::vector<int32_t> flat(3 * items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    flat[3 * i] = items[i].seq;
    flat[3 * i + 1] = items[i].begin;
    flat[3 * i + 2] = items[i].end;
  }
  TestTensor offsets_d = IntTensor(backend, {seqs + 1}, offsets);
  TestTensor items_d = IntTensor(backend, {capacity, 3}, flat);
  TestTensor split_out(backend, DType::kF32, {capacity, heads, rank});
  TestTensor split_lse(backend, DType::kF32, {capacity, heads});
  p.split_offsets = offsets_d.view();
  p.split_items = items_d.view();
  p.split_out = split_out.view();
  p.split_lse = split_lse.view();
  backend.MlaDecode(p);
  EXPECT_TRUE(backend.Synchronize().ok());
  return used;
}

TEST_F(CudaMlaSplitTest, SplitDecodeMatchesRef) {
  std::mt19937 rng(91);
  const std::vector<SplitCase> cases = {
      {16, 512, 64, 64, 8, {1000}, 0},                // one sequence, 8 items
      {16, 512, 64, 64, 1, {1000, 3}, 0},             // one item each
      {3, 24, 8, 16, 300, {1000, 1, 63, 64, 65}, 0},  // as many items as blocks
      {4, 24, 8, 5, 6, {7, 13, 200}, 2},              // odd block size, padding rows
      {128, 64, 16, 64, 3, {129, 2}, 1},              // many heads
      {2, 32, 8, 16, 17, {1, 1, 1}, 5},               // nothing to split
  };
  for (DType dt : {DType::kBF16, DType::kF32}) {
    for (const SplitCase& c : cases) {
      for (MlaSplitRule rule : {MlaSplitRule::kBalanced, MlaSplitRule::kPerSequence}) {
        SCOPED_TRACE(Describe(c, dt, rule));
        std::vector<int32_t> lens = c.lens;
        const int64_t live = static_cast<int64_t>(lens.size());
        lens.insert(lens.end(), c.padding_rows, 1);
        const int64_t seqs = static_cast<int64_t>(lens.size());
        const int64_t max_blocks = MaxBlocksPerSeq(lens, c.block_size);
        // Live sequences own shuffled blocks 1.. of the cache; padding rows read block 0 only.
        const int64_t blocks = 1 + live * max_blocks;
        std::vector<int32_t> perm = RandomPermutation(rng, static_cast<int32_t>(blocks - 1));
        std::vector<int32_t> table(static_cast<size_t>(seqs * max_blocks), 0);
        for (int64_t i = 0; i < live * max_blocks; ++i) table[i] = perm[i] + 1;
        const MlaDecodeInputs in = MakeMlaDecodeInputs(ref(), rng, dt, c.heads, c.rank, c.rope,
                                                       c.block_size, lens, table, blocks);
        TestTensor out_ref = in.NewOutput(ref());
        ref().MlaDecode(in.Params(out_ref));

        const MlaDecodeInputs in_cuda = in.CloneTo(cuda());
        TestTensor out_cuda = in_cuda.NewOutput(cuda());
        const int64_t used =
            DecodeWithPlan(cuda(), in_cuda.Params(out_cuda), lens, c.block_size, c.workers, rule);
        if (c.workers > 1 && c.lens[0] >= 1000) {
          EXPECT_GT(used, seqs) << "the case must split";
        }
        ExpectClose(out_cuda.Read(), out_ref.Read(), 2e-5, 1e-4, "out", out_ref.shape());
      }
    }
  }
}

// --deterministic: with per-sequence plans a sequence's decode is the same bits alone and among
// sequences of other lengths, which would change its items under a balanced plan.
TEST_F(CudaMlaSplitTest, PerSequencePlansKeepADecodeIndependentOfItsCompany) {
  std::mt19937 rng(17);
  const int64_t heads = 8, rank = 48, rope = 16, block_size = 16;
  const int64_t workers = cuda_invariant().mla_decode_split_workers(heads);
  ASSERT_GE(workers, 2);
  const std::vector<int32_t> lens = {700, 1, 1500, 33, 700, 2000, 129};
  const int64_t seqs = static_cast<int64_t>(lens.size());
  const int64_t max_blocks = MaxBlocksPerSeq(lens, block_size);
  const int64_t blocks = seqs * max_blocks;
  const std::vector<int32_t> table = RandomPermutation(rng, static_cast<int32_t>(blocks));
  const MlaDecodeInputs in = MakeMlaDecodeInputs(ref(), rng, DType::kBF16, heads, rank, rope,
                                                 block_size, lens, table, blocks);
  TestTensor out_ref = in.NewOutput(ref());
  ref().MlaDecode(in.Params(out_ref));
  const MlaDecodeInputs dev = in.CloneTo(cuda_invariant());
  TestTensor together = dev.NewOutput(cuda_invariant());
  DecodeWithPlan(cuda_invariant(), dev.Params(together), lens, block_size, workers,
                 MlaSplitRule::kPerSequence);
  const std::vector<float> all = together.Read();
  ExpectClose(all, out_ref.Read(), 2e-5, 1e-4, "together", out_ref.shape());
  const size_t row = static_cast<size_t>(heads * rank);
  for (int64_t s : {0, 2, 4, 5}) {
    SCOPED_TRACE("sequence " + std::to_string(s) + " of length " + std::to_string(lens[s]));
    // Under the balanced rule the company would change this sequence's items.
    std::vector<int32_t> off_all(lens.size() + 1), off_alone(2);
    std::vector<MlaSplitItem> items_all(MlaSplitCapacity(seqs, workers)),
        items_alone(MlaSplitCapacity(1, workers));
    PlanMlaSplits(lens, block_size, workers, absl::MakeSpan(off_all), absl::MakeSpan(items_all));
    PlanMlaSplits({lens[s]}, block_size, workers, absl::MakeSpan(off_alone),
                  absl::MakeSpan(items_alone));
    EXPECT_NE(off_all[s + 1] - off_all[s], off_alone[1]) << "a case the balanced rule splits "
                                                            "differently alone";
    // Alone: the sequence's rows of every input, its own one-sequence plan.
    TestTensor alone(cuda_invariant(), DType::kF32, {1, heads, rank});
    MlaDecodeParams p = dev.Params(alone);
    p.q_latent = p.q_latent.Slice(0, s, 1);
    p.q_pe = p.q_pe.Slice(0, s, 1);
    p.block_tables = p.block_tables.Slice(0, s, 1);
    p.seq_lens = p.seq_lens.Slice(0, s, 1);
    DecodeWithPlan(cuda_invariant(), p, {lens[s]}, block_size, workers, MlaSplitRule::kPerSequence);
    const std::vector<float> one = alone.Read();
    EXPECT_EQ(std::memcmp(one.data(), all.data() + s * row, row * sizeof(float)), 0)
        << "the decode of a sequence changed with its company";
  }
}

TEST_F(CudaMlaSplitTest, WorkersFollowTheDeviceInBothModes) {
  // Two blocks per multiprocessor over all heads; a batch-invariant backend plans by the
  // per-sequence rule over the same workers.
  EXPECT_GE(cuda().mla_decode_split_workers(16), 2);
  EXPECT_GE(cuda().mla_decode_split_workers(16), cuda().mla_decode_split_workers(128));
  EXPECT_GE(cuda().mla_decode_split_workers(128), 1);
  EXPECT_EQ(cuda_invariant().mla_decode_split_workers(16), cuda().mla_decode_split_workers(16));
  EXPECT_EQ(MlaSplitRuleFor(cuda_invariant().batch_invariant()), MlaSplitRule::kPerSequence);
  EXPECT_EQ(ref().mla_decode_split_workers(16), 0);
}

}  // namespace
}  // namespace mlaserve::test
