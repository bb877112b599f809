// How many threads the CPU backend starts when none is asked for (--threads=0): one per physical
// core the process may run on (its affinity mask: taskset, a cpuset, Kubernetes' static CPU
// manager), only the performance cores on a hybrid processor, capped by the CPU bandwidth limit
// of its cgroup (a Kubernetes CPU limit, `docker --cpus`), which leaves the mask at every
// processor of the node. Without the cap a pod limited to four CPUs on a 64-core node would start
// 64 threads, and the kernel would stall all of them for most of every scheduling period once
// they had spent the quota.
//
// One thread per core, not per logical processor: the second hardware thread of a core shares
// its vector units (the prompt GEMMs are bound by them) and its outstanding memory requests (the
// decode GEMVs are bound by those), so it adds no throughput to either, while every op splits its
// work evenly over the team and waits for its slowest member, and each extra member adds to every
// op's hand-off. llama.cpp, the reference CPU engine, defaults to the same count. (Neither this
// rule nor the hybrid one is measured here: no host with simultaneous multithreading or a hybrid
// processor has been at hand; docs/performance.md says so.)
//
// The limit is read the way the kernel applies it: the process's cgroup (/proc/self/cgroup)
// under the cgroup file systems it has mounted (/proc/self/mountinfo), every level from that
// cgroup up to the mount's root, the tightest one winning; cgroup v2 `cpu.max` ("max 100000" or
// "QUOTA PERIOD") and cgroup v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us` (-1: no limit).
// A fractional limit rounds to the nearest whole thread, halves up, never below one: on the
// 2-vCPU Zen 4 host a second thread under a 1.5-CPU limit prefilled 1.4-1.7x faster and decoded
// as fast, under 1.25 CPUs it prefilled 1.2-1.4x faster but decoded 0.85x, and under 1 CPU it
// decoded at 0.6x (docs/performance.md, "Threads under a cgroup CPU limit").
//
// Thread-compatible; reads files only.
#ifndef MLASERVE_KERNELS_CPU_CPU_THREADS_H_
#define MLASERVE_KERNELS_CPU_CPU_THREADS_H_

#include <set>
#include <string>
#include <vector>

namespace mlaserve {

// The CPU bandwidth limit that applies to this process.
struct CgroupCpuLimit {
  double cpus = 0;   // quota / period of the tightest limit; 0: no limit found
  std::string file;  // the file that set it (as read, under `root`); empty when none
};

// Reads the limit from the files under `root` ("" for the running system; tests point it at a
// copy of /proc/self and the cgroup mounts).
CgroupCpuLimit ReadCgroupCpuLimit(const std::string& root = "");

// The processors of this process's affinity mask, ascending (empty if it cannot be read).
std::vector<int> AffinityCpus();

// The processors of a sysfs list such as "0-3,8-11" (empty for an empty or malformed list).
std::set<int> ParseCpuList(const std::string& list);

// The processors among `cpus` that are performance cores of a hybrid processor, as
// `sysfs_root`/sys/devices/cpu_core/cpus lists them (Linux describes the two core types of a
// hybrid Intel processor as the PMUs cpu_core and cpu_atom); empty when it is not hybrid.
std::vector<int> PerformanceCpus(const std::vector<int>& cpus, const std::string& sysfs_root = "");

// How many physical cores the processors `cpus` belong to, as
// `sysfs_root`/sys/devices/system/cpu/cpuN/topology/thread_siblings_list groups them (a core
// with simultaneous multithreading lists two or more); 0 when sysfs does not say.
int CountCores(const std::vector<int>& cpus, const std::string& sysfs_root = "");

// What the default team is drawn from: the mask's processors and their physical cores (0:
// unknown), and those of its performance cores on a hybrid processor (0: not hybrid). Where some
// but not all processors are performance cores, the team leaves out the efficiency cores: every
// op splits its work evenly over the team, so a slower core (no AVX-512, a narrower vector unit)
// would hold up every other thread.
struct CpuTopology {
  int affinity_cpus = 1;
  int affinity_cores = 0;
  int performance_cpus = 0;
  int performance_cores = 0;
};

// The default team size and the facts it came from.
struct CpuThreadBudget {
  CpuTopology topology;   // affinity_cpus at least 1
  CgroupCpuLimit cgroup;  // the cgroup's limit (cpus 0: none)
  // min(the physical cores of the performance processors or else of the mask (its processors
  // where the cores are unknown), cgroup.cpus rounded, CpuThreadPool::kMaxThreads), at least 1
  int threads = 1;
  // Why `threads`: "affinity" (every processor of the mask, one thread per core already),
  // "physical_cores" (one per core of the mask, its second hardware threads left out),
  // "performance_cores" (one per performance core) or "cgroup_cpu_limit" (the cap).
  const char* source = "affinity";
};

// The budget from the topology and a limit (pure).
CpuThreadBudget BudgetCpuThreads(const CpuTopology& topology, const CgroupCpuLimit& limit);

// This process's budget, read now (the affinity mask and the running system's cgroup files).
CpuThreadBudget DetectCpuThreadBudget();

}  // namespace mlaserve

#endif  // MLASERVE_KERNELS_CPU_CPU_THREADS_H_
