#include "kernels/cuda/sim/executor.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kernels/check.h"
#include "kernels/cuda/sim/fiber.h"

namespace mlaserve::sim {
namespace {

constexpr size_t kStaticSharedBytes = size_t{48} << 10;  // CUDA's static shared memory limit
constexpr int kWarp = 32;

enum class State { kRunnable, kBarrier, kWarp, kDone, kFaulted };

struct Block;

struct SimThread {
  ThreadContext ctx;
  int linear = 0;
  State state = State::kRunnable;
  SourceSite site{"", 0, ""};  // where it waits
  WarpOpKind kind = WarpOpKind::kSyncWarp;
  unsigned mask = 0;
  uint64_t value = 0;
  int arg = 0;
  int width = kWarp;
  uint64_t result = 0;
  std::unique_ptr<Fiber> fiber;
  Block* block = nullptr;
};

struct Block {
  const LaunchSpec* spec = nullptr;
  std::vector<SimThread> threads;
  std::string error;
  std::vector<std::pair<const void*, size_t>> slots;  // static declaration -> offset
  size_t static_used = 0;
  std::unique_ptr<unsigned char[]> static_smem{new unsigned char[kStaticSharedBytes]};
  std::vector<unsigned char> dynamic_smem;
};

thread_local SimThread* t_thread = nullptr;

std::atomic<int> g_schedule{-1};
std::atomic<uint64_t> g_seed{1};
std::mutex g_error_mu;
std::string g_last_error;

void InitScheduleFromEnvironment() {
  if (g_schedule.load() >= 0) return;
  Schedule s = Schedule::kForward;
  uint64_t seed = 1;
  if (const char* env = std::getenv("MLASERVE_SIM_SCHEDULE")) {
    const std::string v(env);
    if (v == "reverse") s = Schedule::kReverse;
    if (v.rfind("shuffle", 0) == 0) {
      s = Schedule::kShuffle;
      if (v.size() > 8 && v[7] == ':') seed = std::strtoull(v.c_str() + 8, nullptr, 10);
    }
  }
  int expected = -1;
  if (g_schedule.compare_exchange_strong(expected, static_cast<int>(s))) g_seed = seed;
}

std::string Dim(const uint3& d) {
  return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
}

std::string Where(const SimThread& t) {
  return "kernel " + t.block->spec->kernel_name + ", block " + Dim(t.ctx.block_idx) + ", thread " +
         Dim(t.ctx.thread_idx);
}

std::string At(const SourceSite& s) {
  return std::string(s.file) + ":" + std::to_string(s.line) + " in " + s.function + "()";
}
std::string At(const SimThread& t) { return At(t.site); }

bool SameSite(const SourceSite& a, const SourceSite& b) {
  return a.line == b.line && std::strcmp(a.file, b.file) == 0;
}

std::string Hex(unsigned v) {
  char buffer[16];
  std::snprintf(buffer, sizeof buffer, "0x%08x", v);
  return buffer;
}

void Fail(Block& b, const std::string& message) {
  if (b.error.empty()) b.error = message;
}

// Fails the running thread's block; the thread must then Park(). Two steps, so that the
// message's temporaries are destroyed before the fiber stops for good (a parked fiber's stack is
// abandoned, never unwound).
void RecordFault(const std::string& message) {
  SimThread* t = t_thread;
  Fail(*t->block, Where(*t) + ": " + message);
  t->state = State::kFaulted;
}

[[noreturn]] void Park() {
  Fiber::Suspend();
  MLASERVE_CHECK_MSG(false, "simulator: a faulted thread was resumed");
  std::abort();
}

void ThreadMain(void* arg) {
  auto* t = static_cast<SimThread*>(arg);
  t->block->spec->body();
}

std::vector<int> Order(int n, uint64_t block_linear) {
  std::vector<int> order(n);
  for (int i = 0; i < n; ++i) order[i] = i;
  const auto schedule = static_cast<Schedule>(g_schedule.load());
  if (schedule == Schedule::kReverse) std::reverse(order.begin(), order.end());
  if (schedule == Schedule::kShuffle) {
    std::mt19937_64 rng(g_seed.load() * 0x9e3779b97f4a7c15ull + block_linear);
    std::shuffle(order.begin(), order.end(), rng);
  }
  return order;
}

// The lane whose value lane `lane` receives, or -1 for its own value.
int SourceLane(const SimThread& t, int lane) {
  const int seg = lane & ~(t.width - 1);
  switch (t.kind) {
    case WarpOpKind::kShfl:
      return seg + (t.arg & (t.width - 1));
    case WarpOpKind::kShflUp:
      return lane - t.arg < seg ? -1 : lane - t.arg;
    case WarpOpKind::kShflDown:
      return lane + t.arg >= seg + t.width ? -1 : lane + t.arg;
    case WarpOpKind::kShflXor: {
      const int src = lane ^ t.arg;
      return src >= seg + t.width ? -1 : src;
    }
    default:
      return -1;
  }
}

// Completes the warp collectives whose lanes have all arrived; false when none could.
bool ResolveWarpOps(Block& b) {
  bool progressed = false;
  const int n = static_cast<int>(b.threads.size());
  for (SimThread& t : b.threads) {
    if (t.state != State::kWarp) continue;
    const int warp_base = t.linear / kWarp * kWarp;
    std::vector<SimThread*> lanes;
    for (int lane = 0; lane < kWarp; ++lane) {
      if (((t.mask >> lane) & 1u) == 0) continue;
      const int j = warp_base + lane;
      if (j >= n)
        return Fail(b, Where(t) + ": the mask " + Hex(t.mask) + " at " + At(t) + " names lane " +
                           std::to_string(lane) + ", which does not exist"),
               false;
      SimThread& o = b.threads[j];
      if (o.state == State::kDone) {
        return Fail(b, Where(t) + ": the collective at " + At(t) + " waits for lane " +
                           std::to_string(lane) + " of its mask, which has exited"),
               false;
      }
      if (o.state != State::kWarp || o.kind != t.kind || o.mask != t.mask ||
          !SameSite(o.site, t.site)) {
        return Fail(b,
                    Where(t) + ": the collective at " + At(t) + " names lane " +
                        std::to_string(lane) + ", which waits at " +
                        (o.state == State::kBarrier ? "__syncthreads() " : "another collective ") +
                        At(o) + (o.state == State::kWarp ? " (or with another mask)" : "")),
               false;
      }
      lanes.push_back(&o);
    }
    uint64_t ballot = 0;
    bool any = false, all = true;
    for (SimThread* o : lanes) {
      const int lane = o->linear - warp_base;
      if (o->value != 0) ballot |= uint64_t{1} << lane;
      any = any || o->value != 0;
      all = all && o->value != 0;
    }
    for (SimThread* o : lanes) {
      const int lane = o->linear - warp_base;
      switch (t.kind) {
        case WarpOpKind::kBallot:
          o->result = ballot;
          break;
        case WarpOpKind::kAny:
          o->result = any;
          break;
        case WarpOpKind::kAll:
          o->result = all;
          break;
        case WarpOpKind::kSyncWarp:
          o->result = 0;
          break;
        default: {
          const int src = SourceLane(*o, lane);
          if (src < 0) {
            o->result = o->value;
          } else if (((t.mask >> src) & 1u) == 0) {
            return Fail(b, Where(*o) + ": the shuffle at " + At(*o) + " reads lane " +
                               std::to_string(src) + ", which is not in its mask"),
                   false;
          } else {
            o->result = b.threads[warp_base + src].value;
          }
        }
      }
    }
    for (SimThread* o : lanes) o->state = State::kRunnable;
    progressed = true;
  }
  return progressed;
}

// Releases a barrier every live thread waits at; false (and an error) when they wait apart.
bool ReleaseBarrier(Block& b) {
  const SimThread* first = nullptr;
  for (SimThread& t : b.threads) {
    if (t.state == State::kDone) continue;
    if (first == nullptr) first = &t;
    if (t.state != State::kBarrier) {
      Fail(b, Where(t) + ": waits in a warp collective at " + At(t) + " while thread " +
                  Dim(first->ctx.thread_idx) + " waits elsewhere; nothing can proceed");
      return false;
    }
    if (!SameSite(t.site, first->site)) {
      Fail(b, "kernel " + b.spec->kernel_name + ", block " + Dim(t.ctx.block_idx) +
                  ": divergent __syncthreads(): thread " + Dim(first->ctx.thread_idx) +
                  " waits at " + At(*first) + ", thread " + Dim(t.ctx.thread_idx) + " at " + At(t));
      return false;
    }
  }
  if (first == nullptr) return false;
  for (SimThread& t : b.threads) {
    if (t.state == State::kBarrier) t.state = State::kRunnable;
  }
  return true;
}

void RunBlock(Block& b, const LaunchSpec& spec, const uint3& block_idx) {
  const int n = static_cast<int>(spec.block.x * spec.block.y * spec.block.z);
  b.spec = &spec;
  b.error.clear();
  b.slots.clear();
  b.static_used = 0;
  b.dynamic_smem.assign(spec.dynamic_smem_bytes, 0xff);
  b.threads.clear();
  b.threads.resize(n);
  for (int i = 0; i < n; ++i) {
    SimThread& t = b.threads[i];
    t.linear = i;
    t.block = &b;
    t.ctx.block_idx = block_idx;
    t.ctx.block_dim = spec.block;
    t.ctx.grid_dim = spec.grid;
    t.ctx.thread_idx = {static_cast<unsigned>(i % spec.block.x),
                        static_cast<unsigned>(i / spec.block.x % spec.block.y),
                        static_cast<unsigned>(i / (spec.block.x * spec.block.y))};
    t.fiber = std::make_unique<Fiber>(&ThreadMain, &t);
  }
  const uint64_t linear_block =
      block_idx.x + uint64_t{spec.grid.x} * (block_idx.y + uint64_t{spec.grid.y} * block_idx.z);
  const std::vector<int> order = Order(n, linear_block);
  while (b.error.empty()) {
    bool ran = false;
    for (int i : order) {
      SimThread& t = b.threads[i];
      if (t.state != State::kRunnable) continue;
      t_thread = &t;
      t.fiber->Resume();
      t_thread = nullptr;
      if (t.fiber->done()) t.state = State::kDone;
      ran = true;
      if (!b.error.empty()) break;
    }
    if (ran || !b.error.empty()) continue;
    if (ResolveWarpOps(b)) continue;
    if (!b.error.empty()) break;
    if (!ReleaseBarrier(b)) break;
  }
  b.threads.clear();  // abandons the fibers of a failed block
}

// Worker OS threads that take blocks of the current launch from a shared counter.
class WorkerPool {
 public:
  static WorkerPool& Get() {
    static WorkerPool* pool = new WorkerPool(Workers());
    return *pool;
  }

  // Runs job(i) for i < n on the pool and the calling thread; returns when all are done.
  void Run(uint64_t n, const std::function<void(uint64_t)>& job) {
    std::lock_guard<std::mutex> one_launch(launch_mu_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = &job;
      n_ = n;
      next_ = 0;
      busy_ = static_cast<int>(threads_.size());
      ++generation_;
    }
    cv_.notify_all();
    Work();
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return busy_ == 0; });
    job_ = nullptr;
  }

 private:
  static int Workers() {
    if (const char* env = std::getenv("MLASERVE_SIM_WORKERS")) return std::max(1, std::atoi(env));
    return std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, 4);
  }

  explicit WorkerPool(int workers) {
    for (int i = 1; i < workers; ++i) threads_.emplace_back([this] { Loop(); });
    for (std::thread& t : threads_) t.detach();
  }

  void Work() {
    for (uint64_t i; (i = next_.fetch_add(1)) < n_;) (*job_)(i);
  }

  void Loop() {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return generation_ != seen; });
        seen = generation_;
      }
      Work();
      std::lock_guard<std::mutex> lock(mu_);
      if (--busy_ == 0) done_cv_.notify_all();
    }
  }

  std::mutex launch_mu_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::vector<std::thread> threads_;
  const std::function<void(uint64_t)>* job_ = nullptr;
  uint64_t n_ = 0;
  std::atomic<uint64_t> next_{0};
  int busy_ = 0;
  uint64_t generation_ = 0;
};

}  // namespace

void SetSchedule(Schedule schedule, uint64_t seed) {
  g_seed = seed;
  g_schedule = static_cast<int>(schedule);
}

Schedule CurrentSchedule() {
  InitScheduleFromEnvironment();
  return static_cast<Schedule>(g_schedule.load());
}

const ThreadContext& Self() {
  MLASERVE_CHECK_MSG(t_thread != nullptr, "simulator: a device built-in outside a kernel");
  return t_thread->ctx;
}

cudaError_t RunLaunch(const LaunchSpec& spec) {
  InitScheduleFromEnvironment();
  const uint64_t threads = uint64_t{spec.block.x} * spec.block.y * spec.block.z;
  if (threads == 0 || threads > 1024 || spec.block.z > 64 || spec.grid.x == 0 || spec.grid.y == 0 ||
      spec.grid.z == 0 || spec.grid.y > 65535 || spec.grid.z > 65535) {
    return cudaErrorInvalidConfiguration;
  }
  const uint64_t blocks = uint64_t{spec.grid.x} * spec.grid.y * spec.grid.z;
  std::mutex error_mu;
  std::string first_error;
  std::atomic<bool> failed{false};
  thread_local std::unique_ptr<Block> t_block;
  WorkerPool::Get().Run(blocks, [&](uint64_t i) {
    if (failed.load(std::memory_order_relaxed)) return;
    if (t_block == nullptr) t_block = std::make_unique<Block>();
    const uint3 idx = {static_cast<unsigned>(i % spec.grid.x),
                       static_cast<unsigned>(i / spec.grid.x % spec.grid.y),
                       static_cast<unsigned>(i / (uint64_t{spec.grid.x} * spec.grid.y))};
    RunBlock(*t_block, spec, idx);
    if (!t_block->error.empty()) {
      std::lock_guard<std::mutex> lock(error_mu);
      if (first_error.empty()) first_error = t_block->error;
      failed = true;
    }
  });
  if (!failed) return cudaSuccess;
  {
    std::lock_guard<std::mutex> lock(g_error_mu);
    g_last_error = first_error;
  }
  std::fprintf(stderr, "mlaserve simulator: %s\n", first_error.c_str());
  return cudaErrorLaunchFailure;
}

std::string LastKernelError() {
  std::lock_guard<std::mutex> lock(g_error_mu);
  return g_last_error;
}

void SyncThreads(SourceSite site) {
  SimThread* t = t_thread;
  MLASERVE_CHECK_MSG(t != nullptr, "simulator: __syncthreads() outside a kernel");
  t->state = State::kBarrier;
  t->site = site;
  Fiber::Suspend();
}

uint64_t WarpCollective(WarpOpKind kind, unsigned mask, uint64_t value, int arg, int width,
                        SourceSite site) {
  SimThread* t = t_thread;
  MLASERVE_CHECK_MSG(t != nullptr, "simulator: a warp collective outside a kernel");
  const int lane = t->linear % kWarp;
  if (((mask >> lane) & 1u) == 0) {
    RecordFault("the collective at " + At(site) + " is called by lane " + std::to_string(lane) +
                ", which its mask " + Hex(mask) + " does not name");
    Park();
  }
  if (width < 1 || width > kWarp || (width & (width - 1)) != 0) {
    RecordFault("shuffle width " + std::to_string(width) + " is not a power of two up to 32");
    Park();
  }
  t->state = State::kWarp;
  t->kind = kind;
  t->mask = mask;
  t->value = value;
  t->arg = arg;
  t->width = width;
  t->site = site;
  Fiber::Suspend();
  return t->result;
}

unsigned ActiveMask() {
  SimThread* t = t_thread;
  MLASERVE_CHECK_MSG(t != nullptr, "simulator: __activemask() outside a kernel");
  const int base = t->linear / kWarp * kWarp;
  unsigned mask = 0;
  for (int lane = 0; lane < kWarp; ++lane) {
    const int j = base + lane;
    if (j < static_cast<int>(t->block->threads.size()) &&
        t->block->threads[j].state != State::kDone) {
      mask |= 1u << lane;
    }
  }
  return mask;
}

void* BlockShared(const void* key, size_t bytes, size_t align) {
  SimThread* t = t_thread;
  MLASERVE_CHECK_MSG(t != nullptr, "simulator: shared memory outside a kernel");
  Block& b = *t->block;
  for (const auto& [k, offset] : b.slots) {
    if (k == key) return b.static_smem.get() + offset;
  }
  const size_t offset = (b.static_used + align - 1) / align * align;
  if (offset + bytes > kStaticSharedBytes) {
    RecordFault("static shared memory above " + std::to_string(kStaticSharedBytes) + " bytes");
    Park();
  }
  std::memset(b.static_smem.get() + offset, 0xff, bytes);
  b.static_used = offset + bytes;
  b.slots.emplace_back(key, offset);
  return b.static_smem.get() + offset;
}

void* DynamicShared() {
  SimThread* t = t_thread;
  MLASERVE_CHECK_MSG(t != nullptr, "simulator: shared memory outside a kernel");
  return t->block->dynamic_smem.data();
}

}  // namespace mlaserve::sim
