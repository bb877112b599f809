#include "kernels/mla_split_plan.h"

#include <algorithm>

#include "kernels/check.h"

namespace mlaserve {

int64_t MlaSplitCapacity(int64_t num_seqs, int64_t workers, MlaSplitRule rule) {
  // Balanced: Σ ceil(b_s / target) <= Σ (b_s / target + 1) <= workers + num_seqs, as
  // target >= B / workers. Per sequence: ceil(b / ceil(b / workers)) <= workers each.
  return rule == MlaSplitRule::kBalanced ? num_seqs + workers : num_seqs * workers;
}

MlaPositionRange MlaSplitRange(int64_t len, int64_t parts, int64_t part, int64_t block_size) {
  const int64_t units = (len + block_size - 1) / block_size;
  auto bound = [&](int64_t p) { return std::min(units * p / parts * block_size, len); };
  return {bound(part), bound(part + 1)};
}

int64_t PlanMlaSplits(absl::Span<const int32_t> seq_lens, int64_t block_size, int64_t workers,
                      absl::Span<int32_t> offsets, absl::Span<MlaSplitItem> items,
                      MlaSplitRule rule) {
  const int64_t num_seqs = static_cast<int64_t>(seq_lens.size());
  MLASERVE_CHECK(workers >= 1 && block_size >= 1);
  MLASERVE_CHECK(static_cast<int64_t>(offsets.size()) == num_seqs + 1);
  MLASERVE_CHECK(static_cast<int64_t>(items.size()) >= MlaSplitCapacity(num_seqs, workers, rule));
  // Blocks per item for `blocks` cache blocks over the workers, at least one.
  auto target_for = [&](int64_t blocks) {
    return std::max<int64_t>(1, (blocks + workers - 1) / workers);
  };
  int64_t total_blocks = 0;
  for (const int32_t len : seq_lens) {
    MLASERVE_CHECK(len >= 1);
    total_blocks += (len + block_size - 1) / block_size;
  }
  const int64_t balanced_target = target_for(total_blocks);
  int64_t n = 0;
  for (int64_t s = 0; s < num_seqs; ++s) {
    offsets[s] = static_cast<int32_t>(n);
    const int64_t len = seq_lens[s], blocks = (len + block_size - 1) / block_size;
    const int64_t target = rule == MlaSplitRule::kBalanced ? balanced_target : target_for(blocks);
    const int64_t parts = (blocks + target - 1) / target;
    for (int64_t part = 0; part < parts; ++part) {
      const MlaPositionRange r = MlaSplitRange(len, parts, part, block_size);
      items[n++] = {static_cast<int32_t>(s), static_cast<int32_t>(r.begin),
                    static_cast<int32_t>(r.end)};
    }
  }
  offsets[num_seqs] = static_cast<int32_t>(n);
  for (int64_t i = n; i < static_cast<int64_t>(items.size()); ++i) items[i] = {-1, 0, 0};
  return n;
}

}  // namespace mlaserve
