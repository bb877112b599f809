// Backend::RunHostTasks: every task runs exactly once on a lane below host_lanes(); the CPU
// backend spreads the tasks over its team (a task that waits for another one to start only
// finishes if a second thread takes it); the default runs them in order on the caller.
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/ref/ref_backend.h"

namespace mlaserve {
namespace {

void ExpectEveryTaskOnce(Backend& backend, int64_t count) {
  std::vector<std::atomic<int>> runs(static_cast<size_t>(count));
  std::atomic<int> bad_lanes{0};
  backend.RunHostTasks(count, [&](int64_t task, int lane) {
    runs[static_cast<size_t>(task)].fetch_add(1);
    if (lane < 0 || lane >= backend.host_lanes()) bad_lanes.fetch_add(1);
  });
  for (int64_t task = 0; task < count; ++task) {
    EXPECT_EQ(runs[static_cast<size_t>(task)].load(), 1) << "task " << task << " of " << count;
  }
  EXPECT_EQ(bad_lanes.load(), 0);
}

TEST(HostTasksTest, CpuBackendRunsEveryTaskOnce) {
  std::unique_ptr<Backend> cpu = MakeCpuBackend(3);
  EXPECT_EQ(cpu->host_lanes(), 3);
  for (int64_t count : {0, 1, 2, 3, 16, 1000}) ExpectEveryTaskOnce(*cpu, count);
}

TEST(HostTasksTest, CpuBackendRunsTasksAtTheSameTime) {
  std::unique_ptr<Backend> cpu = MakeCpuBackend(2);
  std::atomic<bool> second_started{false};
  std::atomic<bool> first_saw_second{false};
  cpu->RunHostTasks(2, [&](int64_t task, int) {
    if (task == 1) {
      second_started = true;
      return;
    }
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!second_started && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::yield();
    }
    first_saw_second = second_started.load();
  });
  EXPECT_TRUE(first_saw_second) << "task 1 did not start while task 0 was running";
}

TEST(HostTasksTest, DefaultRunsTasksInOrderOnTheCaller) {
  std::unique_ptr<Backend> ref = MakeRefBackend();
  EXPECT_EQ(ref->host_lanes(), 1);
  const std::thread::id caller = std::this_thread::get_id();
  std::vector<int64_t> order;
  bool other_thread = false;
  ref->RunHostTasks(5, [&](int64_t task, int lane) {
    order.push_back(task);
    other_thread |= lane != 0 || std::this_thread::get_id() != caller;
  });
  EXPECT_EQ(order, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_FALSE(other_thread);
}

}  // namespace
}  // namespace mlaserve
