#include "kernels/cpu/cpu_numa.h"

#include <linux/mempolicy.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "kernels/check.h"
#include "kernels/cpu/cpu_threads.h"

namespace mlaserve {

std::vector<int> NumaNodesOf(const std::vector<int>& cpus, const std::string& sysfs_root) {
  namespace fs = std::filesystem;
  std::vector<int> nodes;
  std::error_code ec;
  for (const fs::directory_entry& entry :
       fs::directory_iterator(sysfs_root + "/sys/devices/system/node", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() <= 4 || name.compare(0, 4, "node") != 0 ||
        name.find_first_not_of("0123456789", 4) != std::string::npos) {
      continue;
    }
    std::string list;
    std::getline(std::ifstream(entry.path() / "cpulist"), list);
    const std::set<int> node_cpus = ParseCpuList(list);
    if (std::any_of(cpus.begin(), cpus.end(), [&](int c) { return node_cpus.count(c) > 0; })) {
      nodes.push_back(std::stoi(name.substr(4)));
    }
  }
  std::sort(nodes.begin(), nodes.end());
  return nodes;
}

const std::vector<int>& AffinityNumaNodes() {
  static const std::vector<int> nodes = NumaNodesOf(AffinityCpus());
  return nodes;
}

NumaPlacement ChooseNumaPlacement(const std::vector<int>& nodes, const char* env) {
  NumaPlacement p;
  p.nodes = nodes;
  const std::string value = env == nullptr ? "" : env;
  if (!nodes.empty() && (value == "local" || value == "interleave")) {
    p.interleave = value == "interleave";
    p.source = "MLASERVE_CPU_NUMA";
  } else {
    p.interleave = nodes.size() > 1;
    p.source = nodes.size() > 1 ? "several_nodes" : "one_node";
  }
  return p;
}

int InterleavePages(void* data, size_t bytes, const std::vector<int>& nodes) {
  MLASERVE_CHECK(!nodes.empty() && reinterpret_cast<uintptr_t>(data) % 4096 == 0);
  constexpr int kWordBits = 64;
  const int max_node = *std::max_element(nodes.begin(), nodes.end());
  std::vector<uint64_t> mask(static_cast<size_t>(max_node / kWordBits + 1), 0);
  for (int n : nodes) mask[n / kWordBits] |= uint64_t{1} << (n % kWordBits);
  // maxnode counts bits, one past the highest the kernel is to read.
  const unsigned long maxnode = mask.size() * kWordBits + 1;
  if (syscall(SYS_mbind, data, bytes, MPOL_INTERLEAVE, mask.data(), maxnode, MPOL_MF_MOVE) != 0) {
    return errno;
  }
  return 0;
}

}  // namespace mlaserve
