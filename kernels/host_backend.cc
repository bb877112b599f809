#include "kernels/host_backend.h"

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
