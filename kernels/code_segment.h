// Where a function's machine code lives: the loaded segment (PT_LOAD, executable) of the
// executable or shared object that holds it. CpuThreadPool uses it to tell return addresses
// among the words of a caller's stack frames.
#ifndef MLASERVE_KERNELS_CODE_SEGMENT_H_
#define MLASERVE_KERNELS_CODE_SEGMENT_H_

#include <cstdint>

namespace mlaserve {

// [begin, begin + size) in the address space.
struct AddressRange {
  uintptr_t begin = 0;
  uintptr_t size = 0;

  bool Contains(uintptr_t address) const { return address - begin < size; }
};

// The executable segment holding `code`, or an empty range when no loaded object's executable
// segment holds it (a heap or stack address). Walks the loaded objects (dl_iterate_phdr):
// call it once, not per use.
AddressRange ExecutableSegmentOf(const void* code);

}  // namespace mlaserve

#endif  // MLASERVE_KERNELS_CODE_SEGMENT_H_
