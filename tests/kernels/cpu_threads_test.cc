// The CPU backend's default team size: the cgroup CPU limit read from copies of the files a
// container, a Kubernetes pod and a cgroup v1 host show (engine_flags_test runs the same reading
// against the running kernel's cgroups), the performance cores of a hybrid processor and the
// physical cores of the affinity mask, from copied sysfs trees and against lscpu.
#include "kernels/cpu/cpu_threads.h"

#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_thread_pool.h"
#include "tests/kernels/fake_root.h"

namespace mlaserve {
namespace {

using test::FakeRoot;

constexpr char kV2Mount[] = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n";

TEST(CgroupCpuLimitTest, PodLimitOnTheV2PathWinsOverLooserLevels) {
  const FakeRoot root({
      {"/proc/self/mountinfo", "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n" + std::string(kV2Mount)},
      {"/proc/self/cgroup", "0::/kubepods.slice/pod7/ctr\n"},
      {"/sys/fs/cgroup/kubepods.slice/cpu.max", "1600000 100000\n"},
      {"/sys/fs/cgroup/kubepods.slice/pod7/cpu.max", "400000 100000\n"},
      {"/sys/fs/cgroup/kubepods.slice/pod7/ctr/cpu.max", "max 100000\n"},
  });
  const CgroupCpuLimit limit = ReadCgroupCpuLimit(root.path());
  EXPECT_DOUBLE_EQ(limit.cpus, 4.0);
  EXPECT_EQ(limit.file, root.path() + "/sys/fs/cgroup/kubepods.slice/pod7/cpu.max");
}

TEST(CgroupCpuLimitTest, NamespacedContainerReadsItsOwnRoot) {
  const FakeRoot root({
      {"/proc/self/mountinfo", kV2Mount},
      {"/proc/self/cgroup", "0::/\n"},
      {"/sys/fs/cgroup/cpu.max", "150000 100000\n"},
  });
  EXPECT_DOUBLE_EQ(ReadCgroupCpuLimit(root.path()).cpus, 1.5);
}

TEST(CgroupCpuLimitTest, V1CpuControllerUnderItsMountRoot) {
  // A docker container without a cgroup namespace: the mount shows the container's cgroup, and
  // /proc/self/cgroup names it by its full path. The mount point holds an escaped space; a
  // memory controller's file of the same name must not be taken for the cpu controller's.
  const FakeRoot root({
      {"/proc/self/mountinfo",
       "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
       "32 31 0:29 /docker/abc /sys/fs/cgroup/cpu\\040acct rw,relatime master:3 - cgroup "
       "cgroup rw,cpu,cpuacct\n"
       "33 31 0:30 /docker/abc /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"},
      {"/proc/self/cgroup", "5:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/\n"},
      {"/sys/fs/cgroup/cpu acct/cpu.cfs_quota_us", "250000\n"},
      {"/sys/fs/cgroup/cpu acct/cpu.cfs_period_us", "100000\n"},
      {"/sys/fs/cgroup/memory/cpu.cfs_quota_us", "100000\n"},
      {"/sys/fs/cgroup/memory/cpu.cfs_period_us", "100000\n"},
  });
  const CgroupCpuLimit limit = ReadCgroupCpuLimit(root.path());
  EXPECT_DOUBLE_EQ(limit.cpus, 2.5);
  EXPECT_EQ(limit.file, root.path() + "/sys/fs/cgroup/cpu acct/cpu.cfs_quota_us");
}

TEST(CgroupCpuLimitTest, NoLimitAnywhere) {
  const FakeRoot root({
      {"/proc/self/mountinfo",
       std::string(kV2Mount) + "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"},
      {"/proc/self/cgroup", "1:cpu:/a\n0::/a\n"},
      {"/sys/fs/cgroup/a/cpu.max", "max 100000\n"},
      {"/sys/fs/cgroup/cpu/a/cpu.cfs_quota_us", "-1\n"},
      {"/sys/fs/cgroup/cpu/a/cpu.cfs_period_us", "100000\n"},
  });
  const CgroupCpuLimit limit = ReadCgroupCpuLimit(root.path());
  EXPECT_EQ(limit.cpus, 0);
  EXPECT_EQ(limit.file, "");
  // No cgroup files at all (another OS view, a restricted sandbox): no limit either.
  FakeRoot empty;
  EXPECT_EQ(ReadCgroupCpuLimit(empty.path()).cpus, 0);
}

// A mask of `cpus` processors, one per core.
CpuTopology Cpus(int cpus) { return {.affinity_cpus = cpus, .affinity_cores = cpus}; }

TEST(CpuThreadBudgetTest, TheLimitCapsTheMaskRoundedToTheNearestThread) {
  const CpuThreadBudget pod = BudgetCpuThreads(Cpus(64), {.cpus = 4.0, .file = "f"});
  EXPECT_EQ(pod.threads, 4);
  EXPECT_STREQ(pod.source, "cgroup_cpu_limit");
  EXPECT_EQ(pod.topology.affinity_cpus, 64);
  EXPECT_EQ(BudgetCpuThreads(Cpus(8), {.cpus = 2.5}).threads, 3);
  EXPECT_EQ(BudgetCpuThreads(Cpus(8), {.cpus = 2.25}).threads, 2);
  EXPECT_EQ(BudgetCpuThreads(Cpus(8), {.cpus = 0.3}).threads, 1);
  const CpuThreadBudget loose = BudgetCpuThreads(Cpus(2), {.cpus = 4.0});
  EXPECT_EQ(loose.threads, 2);
  EXPECT_STREQ(loose.source, "affinity");
  EXPECT_EQ(BudgetCpuThreads(Cpus(6), {}).threads, 6);
  const CpuThreadBudget wide = BudgetCpuThreads(Cpus(384), {});
  EXPECT_EQ(wide.threads, CpuThreadPool::kMaxThreads);
  EXPECT_EQ(wide.topology.affinity_cpus, 384);
}

TEST(CpuThreadBudgetTest, OneThreadPerPhysicalCore) {
  // 32 logical processors on 16 cores with two hardware threads each.
  const CpuThreadBudget smt = BudgetCpuThreads({.affinity_cpus = 32, .affinity_cores = 16}, {});
  EXPECT_EQ(smt.threads, 16);
  EXPECT_STREQ(smt.source, "physical_cores");
  EXPECT_EQ(smt.topology.affinity_cores, 16);
  // A limit below the cores still caps; one above them does not.
  const CpuThreadBudget capped =
      BudgetCpuThreads({.affinity_cpus = 32, .affinity_cores = 16}, {.cpus = 6.0});
  EXPECT_EQ(capped.threads, 6);
  EXPECT_STREQ(capped.source, "cgroup_cpu_limit");
  EXPECT_EQ(BudgetCpuThreads({.affinity_cpus = 32, .affinity_cores = 16}, {.cpus = 20.0}).threads,
            16);
  // Cores unknown (sysfs without topology): a thread per processor.
  const CpuThreadBudget unknown = BudgetCpuThreads({.affinity_cpus = 8, .affinity_cores = 0}, {});
  EXPECT_EQ(unknown.threads, 8);
  EXPECT_STREQ(unknown.source, "affinity");
  // 600 processors on 300 cores: still at most the pool's size.
  EXPECT_EQ(BudgetCpuThreads({.affinity_cpus = 600, .affinity_cores = 300}, {}).threads,
            CpuThreadPool::kMaxThreads);
}

TEST(CpuThreadBudgetTest, HybridProcessorsRunOnTheirPerformanceCores) {
  const FakeRoot root({
      {"/sys/devices/cpu_core/cpus", "0-7\n"},
      {"/sys/devices/cpu_atom/cpus", "8-15\n"},
  });
  EXPECT_EQ(PerformanceCpus({0, 1, 8, 9, 10}, root.path()), (std::vector<int>{0, 1}));
  EXPECT_EQ(PerformanceCpus({8, 9}, root.path()), (std::vector<int>{}));
  FakeRoot uniform;  // not hybrid: no cpu_core PMU
  EXPECT_EQ(PerformanceCpus({0, 1}, uniform.path()), (std::vector<int>{}));

  // 8 performance cores without a second hardware thread and 8 efficiency cores.
  const CpuTopology flat = {.affinity_cpus = 16,
                            .affinity_cores = 16,
                            .performance_cpus = 8,
                            .performance_cores = 8};
  const CpuThreadBudget hybrid = BudgetCpuThreads(flat, {});
  EXPECT_EQ(hybrid.threads, 8);
  EXPECT_STREQ(hybrid.source, "performance_cores");
  EXPECT_EQ(BudgetCpuThreads(flat, {.cpus = 4.0}).threads, 4);  // the limit still caps
  // 8 performance cores with two hardware threads each and 8 efficiency cores: one thread per
  // performance core.
  const CpuThreadBudget smt = BudgetCpuThreads(
      {.affinity_cpus = 24, .affinity_cores = 16, .performance_cpus = 16, .performance_cores = 8},
      {});
  EXPECT_EQ(smt.threads, 8);
  EXPECT_STREQ(smt.source, "performance_cores");
  // A mask of performance cores only: one per core.
  const CpuThreadBudget only = BudgetCpuThreads(
      {.affinity_cpus = 16, .affinity_cores = 8, .performance_cpus = 16, .performance_cores = 8},
      {});
  EXPECT_EQ(only.threads, 8);
  EXPECT_STREQ(only.source, "physical_cores");
  EXPECT_EQ(BudgetCpuThreads(Cpus(4), {}).threads, 4);  // only efficiency cores
}

TEST(ParseCpuListTest, RangesAndSingles) {
  EXPECT_EQ(ParseCpuList("0-3,8,10-11\n"), (std::set<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(ParseCpuList(""), (std::set<int>{}));
  EXPECT_EQ(ParseCpuList("3-1"), (std::set<int>{}));
  EXPECT_EQ(ParseCpuList("a"), (std::set<int>{}));
}

TEST(CountCoresTest, SiblingsOfOneCoreCountOnce) {
  FakeRoot root;
  for (const auto& [cpu, siblings] : std::map<int, std::string>{
           {0, "0,4"}, {4, "0,4"}, {1, "1,5"}, {5, "1,5"}, {2, "2-3"}, {3, "2-3"}}) {
    root.Write(
        "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/thread_siblings_list",
        siblings + "\n");
  }
  EXPECT_EQ(CountCores({0, 4, 1}, root.path()), 2);
  EXPECT_EQ(CountCores({0, 1, 2, 3, 4, 5}, root.path()), 3);
  EXPECT_EQ(CountCores({6}, root.path()), 0);  // sysfs does not say
}

// This host's cores as lscpu counts them (distinct core and socket ids of the processors this
// process may run on), against the budget's reading of sysfs.
TEST(CountCoresTest, AgreesWithLscpu) {
  cpu_set_t mask;
  ASSERT_EQ(sched_getaffinity(0, sizeof mask, &mask), 0);
  FILE* out = popen("lscpu -p=CPU,CORE,SOCKET 2>/dev/null", "r");
  ASSERT_NE(out, nullptr);
  std::set<std::pair<std::string, std::string>> cores;
  char line[256];
  while (std::fgets(line, sizeof line, out) != nullptr) {
    if (line[0] == '#') continue;
    std::istringstream fields(line);
    std::string cpu, core, socket;
    std::getline(fields, cpu, ',');
    std::getline(fields, core, ',');
    std::getline(fields, socket);
    if (CPU_ISSET(std::stoi(cpu), &mask)) cores.insert({core, socket});
  }
  if (pclose(out) != 0 || cores.empty()) GTEST_SKIP() << "no lscpu here";
  const CpuThreadBudget budget = DetectCpuThreadBudget();
  EXPECT_EQ(budget.topology.affinity_cores, static_cast<int>(cores.size()));
  EXPECT_EQ(budget.topology.affinity_cpus, CPU_COUNT(&mask));
  if (budget.cgroup.cpus == 0 && budget.topology.performance_cpus == 0) {
    // No limit, not hybrid: one thread per core lscpu lists.
    EXPECT_EQ(budget.threads, std::min(static_cast<int>(cores.size()), CpuThreadPool::kMaxThreads));
  }
}

}  // namespace
}  // namespace mlaserve
