#include "kernels/cpu/cpu_threads.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "kernels/cpu/cpu_thread_pool.h"

namespace mlaserve {
namespace {

// One cgroup file system mounted in this process's view (from /proc/self/mountinfo).
struct CgroupMount {
  std::string root;         // the cgroup path the mount shows at its mount point
  std::string mount_point;  // where it is mounted
};

bool HasItem(const std::string& comma_list, absl::string_view item) {
  for (absl::string_view part : absl::StrSplit(comma_list, ',')) {
    if (part == item) return true;
  }
  return false;
}

// mountinfo writes a space, tab, newline or backslash in a path as \ooo (octal).
std::string Unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      const std::string digits = s.substr(i + 1, 3);
      if (digits.find_first_not_of("01234567") == std::string::npos) {
        out.push_back(static_cast<char>(std::stoi(digits, nullptr, 8)));
        i += 3;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

// The first mount of a cgroup2 file system (v2) or of a cgroup file system with the cpu
// controller (v1); false when there is none.
bool FindMount(const std::string& root, bool v2, CgroupMount& mount) {
  std::ifstream in(root + "/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    // ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS
    std::vector<std::string> f;
    std::istringstream words(line);
    for (std::string w; words >> w;) f.push_back(w);
    const auto dash = std::find(f.begin(), f.end(), "-");
    if (f.size() < 5 || dash == f.end() || f.end() - dash < 4) continue;
    const std::string& fstype = dash[1];
    const std::string& super_options = dash[3];
    const bool match =
        v2 ? fstype == "cgroup2" : fstype == "cgroup" && HasItem(super_options, "cpu");
    if (!match) continue;
    mount.root = Unescape(f[3]);
    mount.mount_point = Unescape(f[4]);
    return true;
  }
  return false;
}

// This process's cgroup path in the v2 hierarchy or the v1 hierarchy of the cpu controller;
// false when /proc/self/cgroup names none.
bool FindCgroupPath(const std::string& root, bool v2, std::string& path) {
  std::ifstream in(root + "/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    // HIERARCHY_ID:CONTROLLERS:PATH (the path may itself hold colons)
    const size_t first = line.find(':');
    const size_t second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string id = line.substr(0, first);
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const bool match = v2 ? id == "0" && controllers.empty() : HasItem(controllers, "cpu");
    if (!match) continue;
    path = line.substr(second + 1);
    return true;
  }
  return false;
}

// The limit one cgroup directory sets, in CPUs; 0 when it sets none.
double LimitAt(const std::string& dir, bool v2, std::string& file) {
  if (v2) {
    file = dir + "/cpu.max";
    std::ifstream in(file);
    std::string quota;
    double period = 0;
    if (!(in >> quota >> period) || quota == "max" || period <= 0) return 0;
    char* end = nullptr;
    const double q = std::strtod(quota.c_str(), &end);
    return *end == '\0' && q > 0 ? q / period : 0;
  }
  file = dir + "/cpu.cfs_quota_us";
  double quota = 0, period = 0;
  if (!(std::ifstream(file) >> quota) || quota <= 0) return 0;
  if (!(std::ifstream(dir + "/cpu.cfs_period_us") >> period) || period <= 0) return 0;
  return quota / period;
}

// The tightest limit from the process's cgroup up to the mount's root, in one hierarchy.
void TightenFrom(const std::string& root, bool v2, CgroupCpuLimit& limit) {
  CgroupMount mount;
  std::string path;
  if (!FindMount(root, v2, mount) || !FindCgroupPath(root, v2, path)) return;
  // The part of the path below the mount's root (inside a cgroup namespace both are "/").
  std::string below;
  if (mount.root == "/") {
    below = path;
  } else if (path.rfind(mount.root, 0) == 0 &&
             (path.size() == mount.root.size() || path[mount.root.size()] == '/')) {
    below = path.substr(mount.root.size());
  }
  const std::string top = root + mount.mount_point;
  std::string dir = top + (below == "/" ? "" : below);
  while (true) {
    std::string file;
    const double cpus = LimitAt(dir, v2, file);
    if (cpus > 0 && (limit.cpus == 0 || cpus < limit.cpus)) {
      limit.cpus = cpus;
      limit.file = file;
    }
    if (dir.size() <= top.size()) break;
    dir.erase(dir.rfind('/'));
  }
}

}  // namespace

CgroupCpuLimit ReadCgroupCpuLimit(const std::string& root) {
  CgroupCpuLimit limit;
  TightenFrom(root, /*v2=*/true, limit);
  TightenFrom(root, /*v2=*/false, limit);
  return limit;
}

CpuThreadBudget BudgetCpuThreads(const CpuTopology& topology, const CgroupCpuLimit& limit) {
  CpuThreadBudget b;
  b.topology = topology;
  CpuTopology& t = b.topology;
  t.affinity_cpus = std::max(t.affinity_cpus, 1);
  b.cgroup = limit;
  b.threads = std::min(t.affinity_cpus, CpuThreadPool::kMaxThreads);
  if (t.performance_cpus > 0 && t.performance_cpus < t.affinity_cpus) {
    b.threads = std::min(b.threads, t.performance_cores > 0 ? t.performance_cores
                                                            : t.performance_cpus);
    b.source = "performance_cores";
  } else if (t.affinity_cores > 0 && t.affinity_cores < b.threads) {
    b.threads = t.affinity_cores;
    b.source = "physical_cores";
  }
  if (limit.cpus > 0) {
    const int capped = std::max(1, static_cast<int>(std::floor(limit.cpus + 0.5)));
    if (capped < b.threads) {
      b.threads = capped;
      b.source = "cgroup_cpu_limit";
    }
  }
  return b;
}

std::set<int> ParseCpuList(const std::string& list) {
  std::set<int> cpus;
  std::istringstream in(list);
  for (std::string range; std::getline(in, range, ',');) {
    char* end = nullptr;
    const long first = std::strtol(range.c_str(), &end, 10);
    if (end == range.c_str()) return {};
    long last = first;
    if (*end == '-') {
      const char* second = end + 1;
      last = std::strtol(second, &end, 10);
      if (end == second) return {};
    }
    if ((*end != '\0' && *end != '\n') || first < 0 || last < first) return {};
    for (long c = first; c <= last; ++c) cpus.insert(static_cast<int>(c));
  }
  return cpus;
}

std::vector<int> PerformanceCpus(const std::vector<int>& cpus, const std::string& sysfs_root) {
  std::string list;
  if (!std::getline(std::ifstream(sysfs_root + "/sys/devices/cpu_core/cpus"), list)) return {};
  const std::set<int> performance = ParseCpuList(list);
  std::vector<int> out;
  std::copy_if(cpus.begin(), cpus.end(), std::back_inserter(out),
               [&](int c) { return performance.count(c) > 0; });
  return out;
}

int CountCores(const std::vector<int>& cpus, const std::string& sysfs_root) {
  std::set<std::string> cores;
  for (int cpu : cpus) {
    std::string siblings;
    std::ifstream in(sysfs_root + "/sys/devices/system/cpu/cpu" + std::to_string(cpu) +
                     "/topology/thread_siblings_list");
    if (!std::getline(in, siblings) || siblings.empty()) return 0;
    cores.insert(siblings);
  }
  return static_cast<int>(cores.size());
}

std::vector<int> AffinityCpus() {
  std::vector<int> cpus;
  cpu_set_t mask;
  if (sched_getaffinity(0, sizeof mask, &mask) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &mask)) cpus.push_back(c);
    }
  }
  return cpus;
}

CpuThreadBudget DetectCpuThreadBudget() {
  const std::vector<int> cpus = AffinityCpus();
  const std::vector<int> performance = PerformanceCpus(cpus);
  return BudgetCpuThreads({.affinity_cpus = cpus.empty() ? 1 : static_cast<int>(cpus.size()),
                           .affinity_cores = CountCores(cpus),
                           .performance_cpus = static_cast<int>(performance.size()),
                           .performance_cores = CountCores(performance)},
                          ReadCgroupCpuLimit());
}

}  // namespace mlaserve
