// MLASERVE_CHECK: aborts with file:line and a message when an invariant is broken.
// For programmer errors only; anything that depends on input, config or environment
// returns absl::Status instead.
#ifndef MLASERVE_KERNELS_CHECK_H_
#define MLASERVE_KERNELS_CHECK_H_

#include <cstdio>
#include <cstdlib>

#define MLASERVE_CHECK(cond)                                                       \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      std::fprintf(stderr, "%s:%d: MLASERVE_CHECK failed: %s\n", __FILE__, __LINE__, \
                   #cond);                                                         \
      std::abort();                                                                \
    }                                                                              \
  } while (0)

#define MLASERVE_CHECK_MSG(cond, msg)                                                      \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "%s:%d: MLASERVE_CHECK failed: %s (%s)\n", __FILE__, __LINE__, \
                   #cond, msg);                                                            \
      std::abort();                                                                        \
    }                                                                                      \
  } while (0)

#endif  // MLASERVE_KERNELS_CHECK_H_
