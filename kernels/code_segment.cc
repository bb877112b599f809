#include "kernels/code_segment.h"

#include <link.h>

namespace mlaserve {

AddressRange ExecutableSegmentOf(const void* code) {
  struct Search {
    uintptr_t address;
    AddressRange found;
  } search{reinterpret_cast<uintptr_t>(code), {}};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* s = static_cast<Search*>(data);
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& segment = info->dlpi_phdr[i];
          if (segment.p_type != PT_LOAD || (segment.p_flags & PF_X) == 0) continue;
          const AddressRange range{info->dlpi_addr + segment.p_vaddr, segment.p_memsz};
          if (range.Contains(s->address)) {
            s->found = range;
            return 1;
          }
        }
        return 0;
      },
      &search);
  return search.found;
}

}  // namespace mlaserve
