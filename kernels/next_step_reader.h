// NextStepReader: a function that reads, one load on each cache line, what the host will read
// after a graph's replay and before the next step's ops run (see Graph::Replay).
#ifndef MLASERVE_KERNELS_NEXT_STEP_READER_H_
#define MLASERVE_KERNELS_NEXT_STEP_READER_H_

namespace mlaserve {

struct NextStepReader {
  void (*read)(const void* context) = nullptr;  // nullptr: nothing to read
  const void* context = nullptr;
};

}  // namespace mlaserve

#endif  // MLASERVE_KERNELS_NEXT_STEP_READER_H_
