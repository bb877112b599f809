// The CPU backend's default team size: the cgroup CPU limit read from copies of the files a
// container, a Kubernetes pod and a cgroup v1 host show (engine_flags_test runs the same reading
// against the running kernel's cgroups), the performance cores of a hybrid processor and the
// physical cores of the affinity mask, from copied sysfs trees and against lscpu.
#include "kernels/cpu/cpu_threads.h"

#include <sched.h>

#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>

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

TEST(CpuThreadBudgetTest, TheLimitCapsTheMaskRoundedToTheNearestThread) {
  const CpuThreadBudget pod = BudgetCpuThreads(64, {.cpus = 4.0, .file = "f"});
  EXPECT_EQ(pod.threads, 4);
  EXPECT_STREQ(pod.source, "cgroup_cpu_limit");
  EXPECT_EQ(pod.affinity_cpus, 64);
  EXPECT_EQ(BudgetCpuThreads(8, {.cpus = 2.5}).threads, 3);
  EXPECT_EQ(BudgetCpuThreads(8, {.cpus = 2.25}).threads, 2);
  EXPECT_EQ(BudgetCpuThreads(8, {.cpus = 0.3}).threads, 1);
  const CpuThreadBudget loose = BudgetCpuThreads(2, {.cpus = 4.0});
  EXPECT_EQ(loose.threads, 2);
  EXPECT_STREQ(loose.source, "affinity");
  EXPECT_EQ(BudgetCpuThreads(6, {}).threads, 6);
  const CpuThreadBudget wide = BudgetCpuThreads(384, {});
  EXPECT_EQ(wide.threads, CpuThreadPool::kMaxThreads);
  EXPECT_EQ(wide.affinity_cpus, 384);
}

TEST(CpuThreadBudgetTest, HybridProcessorsRunOnTheirPerformanceCores) {
  const FakeRoot root({
      {"/sys/devices/cpu_core/cpus", "0-7\n"},
      {"/sys/devices/cpu_atom/cpus", "8-15\n"},
  });
  EXPECT_EQ(CountPerformanceCpus({0, 1, 8, 9, 10}, root.path()), 2);
  EXPECT_EQ(CountPerformanceCpus({8, 9}, root.path()), 0);
  FakeRoot uniform;  // not hybrid: no cpu_core PMU
  EXPECT_EQ(CountPerformanceCpus({0, 1}, uniform.path()), 0);

  const CpuThreadBudget hybrid = BudgetCpuThreads(16, {}, 8);
  EXPECT_EQ(hybrid.threads, 8);
  EXPECT_STREQ(hybrid.source, "performance_cores");
  EXPECT_EQ(BudgetCpuThreads(16, {.cpus = 4.0}, 8).threads, 4);  // the limit still caps
  EXPECT_STREQ(BudgetCpuThreads(8, {}, 8).source, "affinity");   // only performance cores
  EXPECT_EQ(BudgetCpuThreads(4, {}, 0).threads, 4);              // only efficiency cores
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
  EXPECT_EQ(budget.affinity_cores, static_cast<int>(cores.size()));
  EXPECT_EQ(budget.affinity_cpus, CPU_COUNT(&mask));
}

}  // namespace
}  // namespace mlaserve
