// NUMA placement of the CPU backend's large buffers: the nodes of an affinity mask read from a
// copied sysfs tree, the placement rule, and the running kernel's own account (get_mempolicy)
// of the policy and the node of every page after an interleave, directly and through
// CpuBackend::Allocate.
#include "kernels/cpu/cpu_numa.h"

#include <linux/mempolicy.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/kernels/fake_root.h"

namespace mlaserve {
namespace {

TEST(NumaNodesOfTest, NodesWhoseProcessorsMeetTheMask) {
  const test::FakeRoot tree({
      {"/sys/devices/system/node/node0/cpulist", "0-3,8-11\n"},
      {"/sys/devices/system/node/node1/cpulist", "4-7,12-15\n"},
      {"/sys/devices/system/node/node2/cpulist", "\n"},  // memory only (CXL, HBM)
      {"/sys/devices/system/node/node10/cpulist", "16\n"},
      {"/sys/devices/system/node/power/uevent", ""},  // not a node
  });
  const std::string& root = tree.path();
  EXPECT_EQ(NumaNodesOf({0, 1}, root), (std::vector<int>{0}));
  EXPECT_EQ(NumaNodesOf({2, 13}, root), (std::vector<int>{0, 1}));
  EXPECT_EQ(NumaNodesOf({9, 16}, root), (std::vector<int>{0, 10}));
  EXPECT_EQ(NumaNodesOf({17}, root), (std::vector<int>{}));
  EXPECT_EQ(NumaNodesOf({0}, root + "/absent"), (std::vector<int>{}));
}

TEST(NumaPlacementTest, InterleavesOverSeveralNodesUnlessTold) {
  const NumaPlacement two = ChooseNumaPlacement({0, 1}, nullptr);
  EXPECT_TRUE(two.interleave);
  EXPECT_EQ(two.source, "several_nodes");
  EXPECT_EQ(two.nodes, (std::vector<int>{0, 1}));
  const NumaPlacement one = ChooseNumaPlacement({0}, nullptr);
  EXPECT_FALSE(one.interleave);
  EXPECT_EQ(one.source, "one_node");
  EXPECT_FALSE(ChooseNumaPlacement({0, 1}, "local").interleave);
  EXPECT_EQ(ChooseNumaPlacement({0, 1}, "local").source, "MLASERVE_CPU_NUMA");
  EXPECT_TRUE(ChooseNumaPlacement({0}, "interleave").interleave);
  EXPECT_TRUE(ChooseNumaPlacement({0, 1}, "bogus").interleave);    // ignored
  EXPECT_FALSE(ChooseNumaPlacement({}, "interleave").interleave);  // nothing to spread over
}

// The policy get_mempolicy reports for the mapping holding `addr`, and its nodes.
int PolicyAt(void* addr, std::set<int>* nodes) {
  int mode = -1;
  unsigned long mask[16] = {};
  const unsigned long maxnode = sizeof(mask) * 8;
  EXPECT_EQ(syscall(SYS_get_mempolicy, &mode, mask, maxnode, addr, MPOL_F_ADDR), 0)
      << std::strerror(errno);
  nodes->clear();
  for (int n = 0; n < static_cast<int>(maxnode); ++n) {
    if ((mask[n / 64] >> (n % 64)) & 1) nodes->insert(n);
  }
  return mode;
}

// The node the page holding `addr` is on.
int NodeOfPage(void* addr) {
  int node = -1;
  EXPECT_EQ(syscall(SYS_get_mempolicy, &node, nullptr, 0, addr, MPOL_F_NODE | MPOL_F_ADDR), 0)
      << std::strerror(errno);
  return node;
}

TEST(InterleavePagesTest, TheKernelSpreadsThePagesOverTheNodes) {
  const std::vector<int>& nodes = AffinityNumaNodes();
  if (nodes.empty()) GTEST_SKIP() << "sysfs describes no NUMA nodes";
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t bytes = 64 * page;
  char* data = static_cast<char*>(
      mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(data, MAP_FAILED);
  const int refused = InterleavePages(data, bytes, nodes);
  if (refused == EPERM || refused == ENOSYS) {
    munmap(data, bytes);
    GTEST_SKIP() << "mbind refused here: " << std::strerror(refused);
  }
  ASSERT_EQ(refused, 0) << std::strerror(refused);
  std::set<int> policy_nodes;
  EXPECT_EQ(PolicyAt(data, &policy_nodes), MPOL_INTERLEAVE);
  EXPECT_EQ(policy_nodes, std::set<int>(nodes.begin(), nodes.end()));
  std::memset(data, 1, bytes);
  std::map<int, int> pages_per_node;
  for (size_t off = 0; off < bytes; off += page) ++pages_per_node[NodeOfPage(data + off)];
  for (const auto& [node, pages] : pages_per_node) {
    EXPECT_TRUE(policy_nodes.count(node)) << "page on node " << node;
  }
  // Every node of the mask holds pages (64 pages over at most a few nodes).
  EXPECT_EQ(pages_per_node.size(), nodes.size());
  munmap(data, bytes);
}

TEST(InterleavePagesTest, CpuBackendBuffersTakeThePlacementOfMlaserveCpuNuma) {
  if (AffinityNumaNodes().empty()) GTEST_SKIP() << "sysfs describes no NUMA nodes";
  // "local" first: a heap range mbind has interleaved keeps that policy after it is freed.
  for (const char* value : {"local", "interleave"}) {
    setenv("MLASERVE_CPU_NUMA", value, 1);
    CpuBackend backend(1);
    unsetenv("MLASERVE_CPU_NUMA");
    if (backend.numa_refused_errno() != 0) {
      GTEST_SKIP() << "mbind refused here: " << std::strerror(backend.numa_refused_errno());
    }
    EXPECT_EQ(backend.numa_placement().interleave, std::string(value) == "interleave");
    absl::StatusOr<DeviceBuffer> large = backend.Allocate(size_t{6} << 20);
    absl::StatusOr<DeviceBuffer> small = backend.Allocate(size_t{64} << 10);
    ASSERT_TRUE(large.ok() && small.ok());
    std::set<int> policy_nodes;
    EXPECT_EQ(PolicyAt(large->data(), &policy_nodes),
              std::string(value) == "interleave" ? MPOL_INTERLEAVE : MPOL_DEFAULT)
        << value;
    // Small buffers are left where the allocator puts them.
    EXPECT_EQ(PolicyAt(small->data(), &policy_nodes), MPOL_DEFAULT) << value;
  }
}

}  // namespace
}  // namespace mlaserve
