// Split-KV MLA decode on the CUDA backend against the oracle (kernels/ref): plans of 1 to many
// items per sequence built by PlanMlaSplits for 1 to 300 workers, ragged lengths that are not
// multiples of the block size, graph-bucket padding rows (length 1 over block 0), plan slots
// past the plan left unused, and the workspaces left poisoned (MLASERVE_POISON=1) so that a
// read of a partial result nobody wrote shows. Also: a batch-invariant backend asks for no plan.
#include <algorithm>
#include <cstdint>
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

std::string Describe(const SplitCase& c, DType dt) {
  std::string lens;
  for (int32_t len : c.lens) lens += std::to_string(len) + ",";
  return std::string(DTypeName(dt)) + " heads=" + std::to_string(c.heads) +
         " block=" + std::to_string(c.block_size) + " workers=" + std::to_string(c.workers) +
         " lens=" + lens + " padding=" + std::to_string(c.padding_rows);
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
      SCOPED_TRACE(Describe(c, dt));
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

      const int64_t capacity = MlaSplitCapacity(seqs, c.workers);
      std::vector<int32_t> offsets(static_cast<size_t>(seqs + 1));
      std::vector<MlaSplitItem> items(static_cast<size_t>(capacity));
      const int64_t used = PlanMlaSplits(lens, c.block_size, c.workers, absl::MakeSpan(offsets),
                                         absl::MakeSpan(items));
      std::vector<int32_t> flat(3 * items.size());
      for (size_t i = 0; i < items.size(); ++i) {
        flat[3 * i] = items[i].seq;
        flat[3 * i + 1] = items[i].begin;
        flat[3 * i + 2] = items[i].end;
      }
      if (c.workers > 1 && c.lens[0] >= 1000) {
        EXPECT_GT(used, seqs) << "the case must split";
      }
      TestTensor offsets_c = IntTensor(cuda(), {seqs + 1}, offsets);
      TestTensor items_c = IntTensor(cuda(), {capacity, 3}, flat);
      TestTensor split_out(cuda(), DType::kF32, {capacity, c.heads, c.rank});
      TestTensor split_lse(cuda(), DType::kF32, {capacity, c.heads});
      const MlaDecodeInputs in_cuda = in.CloneTo(cuda());
      TestTensor out_cuda = in_cuda.NewOutput(cuda());
      MlaDecodeParams p = in_cuda.Params(out_cuda);
      p.split_offsets = offsets_c.view();
      p.split_items = items_c.view();
      p.split_out = split_out.view();
      p.split_lse = split_lse.view();
      cuda().MlaDecode(p);
      ExpectClose(out_cuda.Read(), out_ref.Read(), 2e-5, 1e-4, "out", out_ref.shape());
    }
  }
}

TEST_F(CudaMlaSplitTest, WorkersFollowTheDeviceAndInvarianceForbidsSplitting) {
  // Two blocks per multiprocessor over all heads.
  EXPECT_GE(cuda().mla_decode_split_workers(16), 2);
  EXPECT_GE(cuda().mla_decode_split_workers(16), cuda().mla_decode_split_workers(128));
  EXPECT_GE(cuda().mla_decode_split_workers(128), 1);
  EXPECT_EQ(cuda_invariant().mla_decode_split_workers(16), 0);
  EXPECT_EQ(ref().mla_decode_split_workers(16), 0);
}

}  // namespace
}  // namespace mlaserve::test
