// How many threads the CPU backend starts when none is asked for (--threads=0): the processors
// the process may run on (its affinity mask: taskset, a cpuset, Kubernetes' static CPU manager),
// only their performance cores on a hybrid processor, capped by the CPU bandwidth limit of its
// cgroup (a Kubernetes CPU limit, `docker --cpus`), which leaves the mask at every processor of
// the node. Without the cap a pod limited to four CPUs on a 64-core node would start 64
// threads, and the kernel would stall all of them for most of every scheduling period once they
// had spent the quota. (The hybrid rule is not measured: no hybrid host has been at hand.)
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

// How many of the processors `cpus` are performance cores of a hybrid processor, as
// `sysfs_root`/sys/devices/cpu_core/cpus lists them (Linux describes the two core types of a
// hybrid Intel processor as the PMUs cpu_core and cpu_atom); 0 when the processor is not hybrid.
int CountPerformanceCpus(const std::vector<int>& cpus, const std::string& sysfs_root = "");

// How many physical cores the processors `cpus` belong to, as
// `sysfs_root`/sys/devices/system/cpu/cpuN/topology/thread_siblings_list groups them (a core
// with simultaneous multithreading lists two or more); 0 when sysfs does not say.
int CountCores(const std::vector<int>& cpus, const std::string& sysfs_root = "");

// The default team size and the facts it came from.
struct CpuThreadBudget {
  int affinity_cpus = 1;  // processors in the affinity mask
  // Physical cores among them (0: unknown). Where it is smaller than affinity_cpus the default
  // team runs a thread on each logical processor of a core; whether one thread per core is
  // faster has not been measured (docs/cli.md, --threads).
  int affinity_cores = 0;
  // Performance cores among them on a hybrid processor (0: not hybrid). Where some but not all
  // are, the team leaves out the efficiency cores: every op splits its work evenly over the
  // team, so a slower core (no AVX-512, a narrower vector unit) would hold up every other thread.
  int performance_cpus = 0;
  CgroupCpuLimit cgroup;  // the cgroup's limit (cpus 0: none)
  // min(performance_cpus or else affinity_cpus, cgroup.cpus rounded,
  // CpuThreadPool::kMaxThreads), at least 1
  int threads = 1;
  // Why `threads`: "affinity" (the mask), "performance_cores" (its performance cores) or
  // "cgroup_cpu_limit" (the cap).
  const char* source = "affinity";
};

// The budget from the mask's processor count, its performance cores and a limit (pure).
CpuThreadBudget BudgetCpuThreads(int affinity_cpus, const CgroupCpuLimit& limit,
                                 int performance_cpus = 0);

// This process's budget, read now (the affinity mask and the running system's cgroup files).
CpuThreadBudget DetectCpuThreadBudget();

}  // namespace mlaserve

#endif  // MLASERVE_KERNELS_CPU_CPU_THREADS_H_
