// TopLogprobs on the host: the oracle's selection, also what every HostBackend runs (host memory
// is read in place). Log-sum-exp in double; ranking by (logit descending, id ascending).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/host_backend.h"
#include "kernels/op_checks.h"
#include "kernels/ref/ref_access.h"

namespace mlaserve {

void HostBackend::RunTopLogprobs(const TopLogprobsParams& p) {
  const TopLogprobsShape shape = CheckTopLogprobs(p);
  std::vector<int32_t> order(static_cast<size_t>(shape.vocab));
  for (int64_t r = 0; r < shape.rows; ++r) {
    const float* row = p.logits.ptr<const float>() + ref::Off(p.logits, r);
    auto at = [&](int64_t v) { return row[v]; };  // the innermost dimension is contiguous
    double max = -INFINITY;
    for (int64_t v = 0; v < shape.vocab; ++v) max = std::max<double>(max, at(v));
    double sum = 0.0;
    for (int64_t v = 0; v < shape.vocab; ++v) sum += std::exp(at(v) - max);
    const double lse = max + std::log(sum);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + shape.k, order.end(),
                      [&](int32_t a, int32_t b) { return at(a) > at(b) || (at(a) == at(b) && a < b); });
    for (int64_t i = 0; i < shape.k; ++i) {
      p.top_ids.ptr<int32_t>()[ref::Off(p.top_ids, r, i)] = order[i];
      p.top_logprobs.ptr<float>()[ref::Off(p.top_logprobs, r, i)] =
          static_cast<float>(at(order[i]) - lse);
    }
  }
}

}  // namespace mlaserve
