#include "kernels/host_backend.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace mlaserve {
namespace {

class RecordedGraph : public Graph {
 public:
  explicit RecordedGraph(std::vector<std::function<void()>> ops) : ops_(std::move(ops)) {}
  void Replay() override {
    for (auto& op : ops_) op();
  }

 private:
  std::vector<std::function<void()>> ops_;
};

void FreeAligned(void* p) { std::free(p); }

}  // namespace

std::unique_ptr<OpProfile> OpProfile::FromEnvironment() {
  const char* v = std::getenv("MLASERVE_PROFILE");
  if (v == nullptr || v[0] != '1') return nullptr;
  return std::make_unique<OpProfile>();
}

int64_t OpProfile::NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void OpProfile::Add(const char* op, int64_t nanos) {
  for (Entry& e : entries_) {
    if (std::strcmp(e.op, op) == 0) {
      ++e.calls;
      e.nanos += nanos;
      return;
    }
  }
  entries_.push_back({op, 1, nanos});
}

OpProfile::~OpProfile() {
  std::sort(entries_.begin(), entries_.end(),
            [](const Entry& a, const Entry& b) { return a.nanos > b.nanos; });
  int64_t total = 0;
  for (const Entry& e : entries_) total += e.nanos;
  std::fprintf(stderr, "op profile (wall time per op):\n");
  for (const Entry& e : entries_) {
    std::fprintf(stderr, "  %-18s %8lld calls %10.3f ms %5.1f%%\n", e.op,
                 static_cast<long long>(e.calls), e.nanos / 1e6,
                 total > 0 ? 100.0 * e.nanos / total : 0.0);
  }
}

bool PoisonEnabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("MLASERVE_POISON");
    return v != nullptr && v[0] == '1';
  }();
  return enabled;
}

void MaybePoison(void* data, size_t bytes) {
  if (PoisonEnabled()) std::memset(data, 0xff, bytes);
}

absl::StatusOr<DeviceBuffer> HostBackend::Allocate(size_t bytes) {
  constexpr size_t kAlign = 64;
  const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, rounded == 0 ? kAlign : rounded);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("host allocation of ", bytes, " bytes failed"));
  }
  MaybePoison(p, rounded);
  return DeviceBuffer(p, bytes, &FreeAligned);
}

void HostBackend::CopyFromHost(const void* src, size_t bytes, const TensorView& dst) {
  MLASERVE_CHECK(dst.is_contiguous() && static_cast<int64_t>(bytes) <= dst.nbytes());
  std::memcpy(dst.data(), src, bytes);
}

void HostBackend::CopyToHost(const TensorView& src, void* dst, size_t bytes) {
  MLASERVE_CHECK(src.is_contiguous() && static_cast<int64_t>(bytes) <= src.nbytes());
  std::memcpy(dst, src.data(), bytes);
}

void HostBackend::BeginCapture() {
  MLASERVE_CHECK(recording_ == nullptr);
  recording_ = std::make_unique<std::vector<std::function<void()>>>();
}

std::unique_ptr<Graph> HostBackend::EndCapture() {
  MLASERVE_CHECK(recording_ != nullptr);
  auto graph = std::make_unique<RecordedGraph>(std::move(*recording_));
  recording_.reset();
  return graph;
}

}  // namespace mlaserve
