// The SIMD builds' double-precision exp (ExpD, over the double lanes of a traits type V):
// exp(x) = 2^n · exp(r) with n = round(x / ln2) and r = x - n · ln2 in two parts, so that r is
// exact to double rounding for |n| < 2^21, and exp(r), |r| <= ln2/2, by its Taylor polynomial of
// degree 13, whose truncation error is below 0.02 ulp there: within an ulp or two of std::exp
// for x <= 0, 0 from x = -746 down (-inf included), NaN for NaN. Instantiate ExpD only from the
// ISA files, with their traits; the constants serve the Gumbel screen's rule too.
#ifndef MLASERVE_KERNELS_CPU_CPU_EXP_DOUBLE_H_
#define MLASERVE_KERNELS_CPU_CPU_EXP_DOUBLE_H_

namespace mlaserve::cpu_impl {

inline constexpr double kLn2Hi = 6.93147180369123816490e-01;  // 32 low bits zero
inline constexpr double kLn2Lo = 1.90821492927058770002e-10;  // ln2 - kLn2Hi
inline constexpr double kLog2E = 1.4426950408889634;

inline constexpr int kExpTaylorTerms = 14;
// 1/13!, 1/12!, ..., 1/1!, 1/0!: Horner's order, highest degree first.
inline constexpr double kExpTaylor[kExpTaylorTerms] = {
    1.0 / 6227020800.0, 1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0,
    1.0 / 362880.0,     1.0 / 40320.0,     1.0 / 5040.0,     1.0 / 720.0,
    1.0 / 120.0,        1.0 / 24.0,        1.0 / 6.0,        0.5,
    1.0,                1.0};

// V provides, on its double lanes D: Set1D, MulD, MaxD and MinD (a NaN in the second operand
// passes), RoundD (to nearest), FmaD (a * b + c), FnmaddD (c - a * b) and ScaleByPow2 (p · 2^n
// for integral n, rounded once).
template <class V>
typename V::D ExpD(typename V::D x) {
  x = V::MaxD(V::Set1D(-746.0), x);
  x = V::MinD(V::Set1D(709.8), x);
  const typename V::D n = V::RoundD(V::MulD(x, V::Set1D(kLog2E)));
  typename V::D r = V::FnmaddD(n, V::Set1D(kLn2Hi), x);
  r = V::FnmaddD(n, V::Set1D(kLn2Lo), r);
  typename V::D p = V::Set1D(kExpTaylor[0]);
  for (int i = 1; i < kExpTaylorTerms; ++i) p = V::FmaD(p, r, V::Set1D(kExpTaylor[i]));
  return V::ScaleByPow2(p, n);
}

}  // namespace mlaserve::cpu_impl

#endif  // MLASERVE_KERNELS_CPU_CPU_EXP_DOUBLE_H_
