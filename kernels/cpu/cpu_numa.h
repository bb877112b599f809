// Where the CPU backend's large buffers (weights, KV cache, workspaces) live on a host whose
// processors span several NUMA nodes (a two-socket server; an AMD EPYC in NPS2/NPS4 mode).
//
// Each buffer is populated when it is allocated, by the allocating thread, so by default all of
// them land on that thread's node: every decode step then streams the weights from one node's
// memory controllers while the other nodes' stand idle, and the threads elsewhere read them
// across the interconnect. Where the processors of the affinity mask span more than one node
// the backend therefore interleaves the pages of every buffer of 2 MiB or more over those nodes
// (mbind MPOL_INTERLEAVE, before the pages are populated), the placement `numactl
// --interleave` gives a whole process. MLASERVE_CPU_NUMA=local keeps the kernel's default;
// MLASERVE_CPU_NUMA=interleave asks for interleaving even on one node (where it changes nothing
// but can be checked). A kernel or sandbox that refuses the policy (Docker's default seccomp
// profile allows mbind only with CAP_SYS_NICE; docs/deployment.md) leaves the default, and the
// start-up log says so.
//
// Thread-compatible; reads sysfs and calls the kernel only.
#ifndef MLASERVE_KERNELS_CPU_CPU_NUMA_H_
#define MLASERVE_KERNELS_CPU_CPU_NUMA_H_

#include <cstddef>
#include <string>
#include <vector>

namespace mlaserve {

// The nodes (ascending) whose processors, as `sysfs_root`/sys/devices/system/node/node*/cpulist
// lists them, include any of `cpus`. Empty when sysfs describes no nodes.
std::vector<int> NumaNodesOf(const std::vector<int>& cpus, const std::string& sysfs_root = "");

// The nodes of this process's affinity mask (read once).
const std::vector<int>& AffinityNumaNodes();

struct NumaPlacement {
  std::vector<int> nodes;  // the affinity mask's nodes
  bool interleave = false;
  // "one_node", "several_nodes" (the default rule) or "MLASERVE_CPU_NUMA".
  std::string source;
};

// The placement for `nodes` under the value of MLASERVE_CPU_NUMA (`env`: nullptr when unset;
// values other than "local" and "interleave" are ignored).
NumaPlacement ChooseNumaPlacement(const std::vector<int>& nodes, const char* env);

// Interleaves the pages of [data, data + bytes) over `nodes`, moving pages already placed.
// REQUIRES: data page-aligned, nodes non-empty. Returns 0, or the errno the kernel refused with.
int InterleavePages(void* data, size_t bytes, const std::vector<int>& nodes);

}  // namespace mlaserve

#endif  // MLASERVE_KERNELS_CPU_CPU_NUMA_H_
