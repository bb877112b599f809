// --dtype, --backend and --threads reach the backend BackendFromFlags creates, --kv_cache_dtype
// the model options; bad values are errors that name the flag; --threads=0 follows the CPU
// limit of the cgroup the process runs in.
#include "server/cli/engine_flags.h"

#include <sched.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/flags/flag.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/dtype.h"

namespace mlaserve {
namespace {

using ::testing::HasSubstr;

class EngineFlagsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::SetFlag(&FLAGS_backend, "cpu");
    absl::SetFlag(&FLAGS_threads, 1);
  }
  void TearDown() override {
    absl::SetFlag(&FLAGS_dtype, "float32");
    absl::SetFlag(&FLAGS_kv_cache_dtype, "auto");
    absl::SetFlag(&FLAGS_backend, "auto");
    absl::SetFlag(&FLAGS_threads, 0);
  }
};

TEST_F(EngineFlagsTest, DtypeSetsTheBackendsActivationDtype) {
  for (const auto& [flag, dtype] :
       {std::pair{"float32", DType::kF32}, std::pair{"bfloat16", DType::kBF16}}) {
    absl::SetFlag(&FLAGS_dtype, flag);
    for (const char* backend : {"cpu", "ref"}) {
      absl::SetFlag(&FLAGS_backend, backend);
      absl::StatusOr<std::unique_ptr<Backend>> b = BackendFromFlags();
      ASSERT_TRUE(b.ok()) << b.status();
      EXPECT_EQ((*b)->activation_dtype(), dtype) << flag << " " << backend;
      EXPECT_EQ((*b)->name(), backend);
    }
  }
}

TEST_F(EngineFlagsTest, UnknownDtypeIsAnErrorNamingTheFlag) {
  for (const char* flag : {"float16", "bf16", ""}) {
    absl::SetFlag(&FLAGS_dtype, flag);
    absl::StatusOr<std::unique_ptr<Backend>> b = BackendFromFlags();
    ASSERT_FALSE(b.ok()) << flag;
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(b.status().message(), HasSubstr("--dtype"));
    EXPECT_THAT(b.status().message(), HasSubstr("float32 or bfloat16"));
  }
}

TEST_F(EngineFlagsTest, KvCacheDtypeFollowsTheActivationsUnlessNamed) {
  struct Case {
    const char* dtype;
    const char* kv_cache_dtype;
    DType expected;
  };
  for (const Case& c : {Case{"float32", "auto", DType::kF32}, Case{"bfloat16", "auto", DType::kBF16},
                        Case{"float32", "bfloat16", DType::kBF16},
                        Case{"bfloat16", "float32", DType::kF32}}) {
    // The activations' dtype as the backend the flags create reports it.
    absl::SetFlag(&FLAGS_dtype, c.dtype);
    absl::StatusOr<std::unique_ptr<Backend>> b = BackendFromFlags();
    ASSERT_TRUE(b.ok()) << b.status();
    absl::SetFlag(&FLAGS_kv_cache_dtype, c.kv_cache_dtype);
    absl::StatusOr<ModelOptions> o = ModelOptionsFromFlags((*b)->activation_dtype());
    ASSERT_TRUE(o.ok()) << o.status();
    EXPECT_EQ(o->kv_cache_dtype, c.expected) << c.dtype << " " << c.kv_cache_dtype;
  }
}

TEST_F(EngineFlagsTest, UnknownKvCacheDtypeIsAnErrorNamingTheFlag) {
  for (const char* flag : {"float16", "fp8", ""}) {
    absl::SetFlag(&FLAGS_kv_cache_dtype, flag);
    absl::StatusOr<ModelOptions> o = ModelOptionsFromFlags(DType::kBF16);
    ASSERT_FALSE(o.ok()) << flag;
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(o.status().message(), HasSubstr("--kv_cache_dtype"));
    EXPECT_THAT(o.status().message(), HasSubstr("auto, float32 or bfloat16"));
  }
}

// The path of this process's cgroup in the v1 cpu hierarchy, or "" (no such line).
std::string SelfV1CpuCgroup() {
  std::ifstream in("/proc/self/cgroup");
  for (std::string line; std::getline(in, line);) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    const std::string controllers = "," + line.substr(a + 1, b - a - 1) + ",";
    if (controllers.find(",cpu,") != std::string::npos) return line.substr(b + 1);
  }
  return "";
}

// The running kernel: this process moved into a new cgroup v1 child of its own cpu cgroup with a
// quota of 1.2 CPUs, a CPU backend created there, the process moved back. Skipped where the
// hierarchy is not mounted at the usual place or this process may not create cgroups (not root).
TEST_F(EngineFlagsTest, DefaultThreadsFollowTheCgroupCpuLimit) {
  namespace fs = std::filesystem;
  cpu_set_t cpus;
  ASSERT_EQ(sched_getaffinity(0, sizeof cpus, &cpus), 0);
  if (CPU_COUNT(&cpus) < 2) GTEST_SKIP() << "one processor: a limit cannot lower the count";
  const std::string self = SelfV1CpuCgroup();
  std::string mount;
  for (const char* m : {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"}) {
    if (fs::exists(std::string(m) + "/cpu.cfs_quota_us")) mount = m;
  }
  if (self.empty() || mount.empty()) GTEST_SKIP() << "no cgroup v1 cpu hierarchy here";
  const std::string parent = mount + (self == "/" ? "" : self);
  const std::string child = parent + "/mlaserve_threads_test_" + std::to_string(getpid());
  std::error_code ec;
  if (!fs::create_directory(child, ec)) GTEST_SKIP() << "may not create " << child;
  const bool quota_set = static_cast<bool>(std::ofstream(child + "/cpu.cfs_quota_us") << 120000);
  const bool moved = static_cast<bool>(std::ofstream(child + "/cgroup.procs") << getpid());
  absl::SetFlag(&FLAGS_threads, 0);
  testing::internal::CaptureStderr();
  absl::StatusOr<std::unique_ptr<Backend>> capped = BackendFromFlags();
  const std::string capped_log = testing::internal::GetCapturedStderr();
  absl::SetFlag(&FLAGS_threads, 2);
  absl::StatusOr<std::unique_ptr<Backend>> asked = BackendFromFlags();
  std::ofstream(parent + "/cgroup.procs") << getpid();
  fs::remove(child, ec);
  ASSERT_TRUE(quota_set && moved) << "the kernel refused the quota or the move";
  ASSERT_TRUE(capped.ok()) << capped.status();
  ASSERT_TRUE(asked.ok()) << asked.status();
  EXPECT_EQ((*capped)->host_lanes(), 1);
  EXPECT_THAT(capped_log, HasSubstr(" threads=1 threads_source=cgroup_cpu_limit "));
  EXPECT_THAT(capped_log, HasSubstr(" cgroup_cpu_limit=1.2 "));
  EXPECT_THAT(capped_log, HasSubstr("cgroup_cpu_limit_file=" + child + "/cpu.cfs_quota_us"));
  EXPECT_EQ((*asked)->host_lanes(), 2);  // --threads overrides the limit
}

}  // namespace
}  // namespace mlaserve
