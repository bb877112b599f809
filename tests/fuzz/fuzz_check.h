// FUZZ_CHECK: the invariant a fuzz target asserts on a result that came back OK. A violation
// prints the condition and aborts, which libFuzzer reports as a crash with the input saved.
#ifndef MLASERVE_TESTS_FUZZ_FUZZ_CHECK_H_
#define MLASERVE_TESTS_FUZZ_FUZZ_CHECK_H_

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(cond)                                                                 \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)

#endif  // MLASERVE_TESTS_FUZZ_FUZZ_CHECK_H_
