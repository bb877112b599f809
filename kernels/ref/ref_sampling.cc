// TopLogprobs and SampleTokens on the host: the oracle's selection, also what every HostBackend
// runs (host memory is read in place). Log-sum-exp in double; ranking by (logit descending, id
// ascending); draws by sampling::DrawToken, the CPU engine's own.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "kernels/host_backend.h"
#include "kernels/host_sampling.h"
#include "kernels/op_checks.h"
#include "kernels/ref/ref_access.h"

namespace mlaserve {
void HostBackend::RunTopLogprobs(const TopLogprobsParams& p) {
  const TopLogprobsShape shape = CheckTopLogprobs(p);
  std::vector<int32_t> order(static_cast<size_t>(shape.vocab));
  for (int64_t r = 0; r < shape.rows; ++r) {
    const float* row = p.logits.ptr<const float>() + ref::Off(p.logits, r);
    auto at = [&](int64_t v) { return row[v]; };  // the innermost dimension is contiguous
    const double lse = sampling::LogSumExp(absl::MakeConstSpan(row, shape.vocab));
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

void HostBackend::RunSampleTokens(const SampleTokensParams& p) {
  const RowsShape shape = CheckSampleTokens(p);
  sampling::DrawScratch scratch;
  for (int64_t r = 0; r < shape.rows; ++r) {
    const absl::Span<const float> row(p.logits.ptr<const float>() + ref::Off(p.logits, r),
                                      static_cast<size_t>(shape.cols));
    sampling::RowOptions o;
    std::memcpy(&o, p.options.ptr<const int32_t>() + ref::Off(p.options, r), sizeof(o));
    const int32_t token =
        o.temperature == 0.0f
            ? static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin())
            : sampling::DrawToken(row, o, scratch);
    p.token_ids.ptr<int32_t>()[ref::Off(p.token_ids, r)] = token;
    p.logprobs.ptr<float>()[ref::Off(p.logprobs, r)] =
        static_cast<float>(row[token] - sampling::LogSumExp(row));
  }
}

}  // namespace mlaserve
