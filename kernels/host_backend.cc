#include "kernels/host_backend.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include <sys/mman.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"

namespace mlaserve {
namespace {

// memory_bytes(): this object, the op list's array and each op's closure (which holds the
// op's params), as allocated; the allocator's own per-block bookkeeping is not counted.
class RecordedGraph : public Graph {
 public:
  RecordedGraph(std::vector<std::function<void()>> ops, uint64_t closure_bytes)
      : ops_(std::move(ops)),
        memory_bytes_(sizeof(RecordedGraph) + ops_.capacity() * sizeof(std::function<void()>) +
                      closure_bytes) {}
  void Replay() override {
    for (auto& op : ops_) op();
  }
  uint64_t memory_bytes() const override { return memory_bytes_; }

 private:
  std::vector<std::function<void()>> ops_;
  uint64_t memory_bytes_;
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

HostBackend::HostBackend(DType activation_dtype) : activation_dtype_(activation_dtype) {
  MLASERVE_CHECK(activation_dtype == DType::kF32 || activation_dtype == DType::kBF16);
}

absl::StatusOr<DeviceBuffer> HostBackend::Allocate(size_t bytes) {
  constexpr size_t kHugePage = size_t{2} << 20;
  const size_t align = bytes >= kHugePage ? kHugePage : 64;
  const size_t rounded = (bytes + align - 1) / align * align;
  void* p = std::aligned_alloc(align, rounded == 0 ? align : rounded);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("host allocation of ", bytes, " bytes failed"));
  }
  if (align == kHugePage) {
    // Huge pages: a prefill walks gigabytes of weights with rows 4 KiB apart, which 4 KiB pages
    // turn into a TLB miss per row. Populated now: the first long prompt would otherwise pay
    // the page faults of every fresh workspace (costly under a hypervisor), and memory counted
    // at start-up is then really there. Both are requests; a kernel that refuses either (THP
    // off, or no MADV_POPULATE_WRITE before Linux 5.14) leaves the buffer as it was.
    madvise(p, rounded, MADV_HUGEPAGE);
    PlaceLargeBuffer(p, rounded);
    madvise(p, rounded, MADV_POPULATE_WRITE);
  }
  MaybePoison(p, rounded);
  return DeviceBuffer(p, bytes, &FreeAligned);
}

uint64_t HostBackend::memory_capacity() const {
  return static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) *
         static_cast<uint64_t>(sysconf(_SC_PAGE_SIZE));
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
  recorded_closure_bytes_ = 0;
}

std::unique_ptr<Graph> HostBackend::EndCapture() {
  MLASERVE_CHECK(recording_ != nullptr);
  recording_->shrink_to_fit();
  auto graph = std::make_unique<RecordedGraph>(std::move(*recording_), recorded_closure_bytes_);
  recording_.reset();
  return graph;
}

}  // namespace mlaserve
