// The median of a benchmark's samples (the mean of the middle two for an even count).
#ifndef MLASERVE_TOOLS_BENCH_MEDIAN_H_
#define MLASERVE_TOOLS_BENCH_MEDIAN_H_

#include <algorithm>
#include <vector>

namespace mlaserve::bench {

inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace mlaserve::bench

#endif  // MLASERVE_TOOLS_BENCH_MEDIAN_H_
