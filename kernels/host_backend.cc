#include "kernels/host_backend.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <utility>

#include <sys/mman.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"

namespace mlaserve {
namespace {

// memory_bytes(): this object, the op list's array, each op's closure (which holds the op's
// params) and the list of lines each op publishes, as allocated; the allocator's own
// per-block bookkeeping is not counted.
class RecordedGraph : public Graph {
 public:
  // backend_lines: addresses in the backend object every dispatch reads. next_op_lines and
  // next_step: where the backend looks for the published lines and reader
  // (HostBackend::next_op_lines, HostBackend::next_step_reader).
  RecordedGraph(std::vector<RecordedOp> ops, absl::Span<const void* const> backend_lines,
                absl::Span<const void* const>* next_op_lines, NextStepReader* next_step)
      : ops_(std::move(ops)), next_op_lines_(next_op_lines), next_step_(next_step) {
    ops_.shrink_to_fit();  // before the lines take the records' addresses
    const size_t n = ops_.size();
    // Room for every line an op can name wherever its objects lie, so that memory_bytes()
    // depends on the ops alone (GraphRunner::MeasureMemory sizes the graphs before capture).
    size_t room = 0;
    for (size_t i = 0; i < n; ++i) {
      ForEachObject(i, backend_lines, [&](const void*, size_t bytes) { room += MaxLines(bytes); });
    }
    lines_.reserve(room);
    std::vector<size_t> begin;
    begin.reserve(n + 1);
    for (size_t i = 0; i < n; ++i) {
      begin.push_back(lines_.size());
      ForEachObject(i, backend_lines, [&](const void* p, size_t bytes) { AddLines(p, bytes); });
      // Each line once (ops of one kind share their code and slot).
      std::sort(lines_.begin() + static_cast<ptrdiff_t>(begin.back()), lines_.end());
      lines_.erase(std::unique(lines_.begin() + static_cast<ptrdiff_t>(begin.back()), lines_.end()),
                   lines_.end());
    }
    begin.push_back(lines_.size());
    for (size_t i = 0; i < n; ++i) {
      ops_[i].next_lines =
          absl::MakeConstSpan(lines_.data() + begin[i], lines_.data() + begin[i + 1]);
    }
    memory_bytes_ = sizeof(RecordedGraph) + ops_.capacity() * sizeof(RecordedOp) +
                    lines_.capacity() * sizeof(const void*);
    for (const RecordedOp& op : ops_) memory_bytes_ += op.closure_bytes;
  }

  void Replay(const NextStepReader& next_step) override {
    // Locals, not members: after an op that streamed the weights this object is not cached.
    absl::Span<const void* const>* const next_op_lines = next_op_lines_;
    NextStepReader* const reader = next_step_;
    for (const RecordedOp *op = ops_.data(), *end = op + ops_.size(); op != end; ++op) {
      *next_op_lines = op->next_lines;
      if (op + 1 == end) *reader = next_step;
      op->run(op->closure.get());
    }
    *next_op_lines = {};
    *reader = {};
  }
  uint64_t memory_bytes() const override { return memory_bytes_; }

 private:
  static constexpr size_t kLine = 64;
  // A dispatch function's code (RunClosure<...>: about 220 bytes with gcc 12 at -O2, 400 with
  // -O3 or with more inlined into it): its first lines call the op, its last ones return from
  // it.
  static constexpr size_t kCodeBytes = 4 * kLine;
  static constexpr size_t kMaxLinesPerObject = 8;

  // Calls fn(address, bytes) for each object read from op i's end to op i + 1's start (the
  // last op's next is the first, in the next replay); an address may be nullptr.
  template <class Fn>
  void ForEachObject(size_t i, absl::Span<const void* const> backend_lines, Fn fn) const {
    // Op i's return path: the rest of its calling code and the profile's slot.
    fn(reinterpret_cast<const void*>(ops_[i].run), kCodeBytes);
    fn(ops_[i].profile_slot, 1);
    // The next op's dispatch: its record, its closure, its calling code (prefetched as data,
    // an instruction fetch then finds it in L2 rather than in memory), its profile slot, and
    // the backend object's lines.
    const RecordedOp& next = ops_[(i + 1) % ops_.size()];
    fn(&next, sizeof(RecordedOp));
    fn(next.closure.get(), next.closure_bytes);
    fn(reinterpret_cast<const void*>(next.run), kCodeBytes);
    fn(next.profile_slot, 1);
    for (const void* p : backend_lines) fn(p, 1);
  }

  // The most lines AddLines(p, bytes) adds, wherever p lies.
  static size_t MaxLines(size_t bytes) {
    return bytes == 0 ? 1 : std::min(kMaxLinesPerObject, (bytes + kLine - 2) / kLine + 1);
  }

  // Every line of [p, p + bytes), up to kMaxLinesPerObject of them; none for nullptr.
  void AddLines(const void* p, size_t bytes) {
    if (p == nullptr) return;
    const uintptr_t first = reinterpret_cast<uintptr_t>(p) / kLine;
    const uintptr_t last = (reinterpret_cast<uintptr_t>(p) + bytes - 1) / kLine;
    for (uintptr_t line = first; line <= last && line - first < kMaxLinesPerObject; ++line) {
      lines_.push_back(reinterpret_cast<const void*>(line * kLine));
    }
  }

  std::vector<RecordedOp> ops_;
  std::vector<const void*> lines_;  // every op's lines, op after op
  absl::Span<const void* const>* next_op_lines_;
  NextStepReader* next_step_;
  uint64_t memory_bytes_ = 0;
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
  recording_ = std::make_unique<std::vector<RecordedOp>>();
}

std::unique_ptr<Graph> HostBackend::EndCapture() {
  MLASERVE_CHECK(recording_ != nullptr);
  const void* const backend_lines[] = {this, &profile_, &next_op_lines_};
  auto graph = std::make_unique<RecordedGraph>(std::move(*recording_), backend_lines,
                                               &next_op_lines_, &next_step_reader_);
  recording_.reset();
  return graph;
}

}  // namespace mlaserve
