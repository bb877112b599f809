// Split-KV plan for absorbed MLA decode (MlaDecodeParams): which positions of which sequence
// each parallel work item attends. Planned on the host from the step's sequence lengths, with
// the rest of the step's metadata, so that a captured decode graph reads it from a device
// buffer; the CPU backend cuts its own per-thread ranges with the same MlaSplitRange.
//
// Balancing rules (MlaSplitRule), in blocks of the paged cache: a per-item target of cache
// blocks, and a sequence of b blocks gets ceil(b / target) items of near-equal, block-aligned
// position ranges. kBalanced (FlashMLA's scheduler metadata) divides the step's total blocks by
// `workers` for one target over all sequences, so a sequence's items depend on what else the
// step holds; kPerSequence gives each sequence the target it would get alone in the step, so its
// items depend on its own length only (a batch-invariant backend's rule: the kernels then sum
// each item and merge a sequence's items in one order, whatever the batch). Items are listed
// sequence by sequence, so sequence s owns items [offsets[s], offsets[s + 1]). Whatever the
// lengths, a plan needs at most MlaSplitCapacity(num_seqs, workers, rule) items, which is what
// a decode-graph bucket sizes its buffers for.
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

enum class MlaSplitRule : uint8_t { kBalanced, kPerSequence };

// The rule of a backend's plans: kPerSequence where it is batch-invariant (`--deterministic`).
inline MlaSplitRule MlaSplitRuleFor(bool batch_invariant) {
  return batch_invariant ? MlaSplitRule::kPerSequence : MlaSplitRule::kBalanced;
}

// Upper bound of the items of any plan of num_seqs sequences for `workers` (>= 1):
// num_seqs + workers balanced, num_seqs * workers per sequence.
int64_t MlaSplitCapacity(int64_t num_seqs, int64_t workers,
                         MlaSplitRule rule = MlaSplitRule::kBalanced);

// Positions of part `part` of `parts` near-equal contiguous pieces of [0, len), with interior
// boundaries on multiples of block_size. A piece may be empty when parts > blocks.
struct MlaPositionRange {
  int64_t begin;
  int64_t end;
};
MlaPositionRange MlaSplitRange(int64_t len, int64_t parts, int64_t part, int64_t block_size);

// Plans seq_lens (each >= 1) over `workers` (>= 1) by `rule`: writes offsets[0 .. num_seqs]
// and items[0 .. capacity), marking slots past the plan unused (seq = -1, empty range). Every
// item of the plan covers a non-empty range. Returns the number of items planned.
// REQUIRES: offsets.size() == seq_lens.size() + 1,
//           items.size() >= MlaSplitCapacity(seq_lens.size(), workers, rule).
int64_t PlanMlaSplits(absl::Span<const int32_t> seq_lens, int64_t block_size, int64_t workers,
                      absl::Span<int32_t> offsets, absl::Span<MlaSplitItem> items,
                      MlaSplitRule rule = MlaSplitRule::kBalanced);

}  // namespace mlaserve

#endif  // MLASERVE_KERNELS_MLA_SPLIT_PLAN_H_
