// Split-KV plan for absorbed MLA decode (MlaDecodeParams): which positions of which sequence
// each parallel work item attends. Planned on the host from the step's sequence lengths, with
// the rest of the step's metadata, so that a captured decode graph reads it from a device
// buffer; the CPU backend cuts its own per-thread ranges with the same MlaSplitRange.
//
// Balancing rule (FlashMLA's scheduler metadata, in blocks of the paged cache): the step's
// total cache blocks are divided by `workers` into a per-item target; a sequence of b blocks
// gets ceil(b / target) items of near-equal, block-aligned position ranges. Items are listed
// sequence by sequence, so sequence s owns items [offsets[s], offsets[s + 1]). Whatever the
// lengths, a plan needs at most MlaSplitCapacity(num_seqs, workers) items, which is what a
// decode-graph bucket sizes its buffers for.
#ifndef MLASERVE_KERNELS_MLA_SPLIT_PLAN_H_
#define MLASERVE_KERNELS_MLA_SPLIT_PLAN_H_

#include <cstdint>

#include "absl/types/span.h"

namespace mlaserve {

// One work item: positions [begin, end) of sequence `seq`. seq < 0 marks an unused slot.
struct MlaSplitItem {
  int32_t seq;
  int32_t begin;
  int32_t end;
};
static_assert(sizeof(MlaSplitItem) == 3 * sizeof(int32_t), "items are stored as [n, 3] i32");

// Upper bound of the items of any plan of num_seqs sequences for `workers` (>= 1).
int64_t MlaSplitCapacity(int64_t num_seqs, int64_t workers);

// Positions of part `part` of `parts` near-equal contiguous pieces of [0, len), with interior
// boundaries on multiples of block_size. A piece may be empty when parts > blocks.
struct MlaPositionRange {
  int64_t begin;
  int64_t end;
};
MlaPositionRange MlaSplitRange(int64_t len, int64_t parts, int64_t part, int64_t block_size);

// Plans seq_lens (each >= 1) over `workers` (>= 1): writes offsets[0 .. num_seqs] and
// items[0 .. capacity), marking slots past the plan unused (seq = -1, empty range). Every item
// of the plan covers a non-empty range. Returns the number of items planned.
// REQUIRES: offsets.size() == seq_lens.size() + 1,
//           items.size() >= MlaSplitCapacity(seq_lens.size(), workers).
int64_t PlanMlaSplits(absl::Span<const int32_t> seq_lens, int64_t block_size, int64_t workers,
                      absl::Span<int32_t> offsets, absl::Span<MlaSplitItem> items);

}  // namespace mlaserve

#endif  // MLASERVE_KERNELS_MLA_SPLIT_PLAN_H_
