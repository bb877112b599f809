// HostBackend's recorded graphs: a replay runs the recorded ops in order on the params they
// were recorded with, as often as it is replayed, and while op i runs the backend publishes
// the cache lines op i + 1's dispatch reads (what CpuBackend's thread pool prefetches while it
// waits): none during eager ops, during the last op of a replay or after it.
#include <algorithm>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/no_op_backend.h"

namespace mlaserve {
namespace {

// Notes each op it runs (its name and the first element of its output), and what the backend
// published for the next op while it ran.
class SpyBackend final : public NoOpBackend {
 public:
  struct Call {
    std::string op;
    float out0;
    size_t next_lines;
    bool next_lines_name_backend;  // the backend object is among them
  };

  using HostBackend::next_op_lines;
  std::string_view name() const override { return "spy"; }
  std::vector<Call> calls;

 protected:
  void RunAdd(const AddParams& p) override { Note("Add", p.out); }
  void RunSiluMul(const SiluMulParams& p) override { Note("SiluMul", p.out); }

 private:
  void Note(const char* op, const TensorView& out) {
    const absl::Span<const void* const> lines = *next_op_lines();
    calls.push_back({op, *static_cast<const float*>(out.data()), lines.size(),
                     std::find(lines.begin(), lines.end(), static_cast<const void*>(this)) !=
                         lines.end()});
  }
};

class HostReplayTest : public ::testing::Test {
 protected:
  // Records Add(out = a), SiluMul(out = b), Add(out = c) and returns the graph.
  std::unique_ptr<Graph> RecordThree() {
    backend_.BeginCapture();
    backend_.Add({.out = View(&a_)});
    backend_.SiluMul({.out = View(&b_)});
    backend_.Add({.out = View(&c_)});
    return backend_.EndCapture();
  }
  static TensorView View(float* x) { return TensorView(x, DType::kF32, {1}); }

  SpyBackend backend_;
  float a_ = 1.0f, b_ = 2.0f, c_ = 3.0f;
};

TEST_F(HostReplayTest, RecordingRunsNothing) {
  std::unique_ptr<Graph> graph = RecordThree();
  EXPECT_TRUE(backend_.calls.empty());
  EXPECT_GT(graph->memory_bytes(), 0u);
}

TEST_F(HostReplayTest, ReplaysTheRecordedOpsInOrderOnTheirParams) {
  std::unique_ptr<Graph> graph = RecordThree();
  for (int replay = 0; replay < 3; ++replay) {
    // The views point at fixed buffers: a replay sees what they hold then.
    a_ = 10.0f * static_cast<float>(replay);
    backend_.calls.clear();
    graph->Replay();
    ASSERT_EQ(backend_.calls.size(), 3u);
    EXPECT_EQ(backend_.calls[0].op, "Add");
    EXPECT_EQ(backend_.calls[0].out0, a_);
    EXPECT_EQ(backend_.calls[1].op, "SiluMul");
    EXPECT_EQ(backend_.calls[1].out0, b_);
    EXPECT_EQ(backend_.calls[2].op, "Add");
    EXPECT_EQ(backend_.calls[2].out0, c_);
  }
}

TEST_F(HostReplayTest, PublishesTheNextOpsLinesWhileAnOpRuns) {
  std::unique_ptr<Graph> graph = RecordThree();
  graph->Replay();
  ASSERT_EQ(backend_.calls.size(), 3u);
  for (int i = 0; i < 2; ++i) {
    // The next op's record, closure and calling code, and the backend's own line.
    EXPECT_GE(backend_.calls[i].next_lines, 4u) << i;
    EXPECT_TRUE(backend_.calls[i].next_lines_name_backend) << i;
  }
  EXPECT_EQ(backend_.calls[2].next_lines, 0u);  // nothing follows the last op
  EXPECT_TRUE(backend_.next_op_lines()->empty());
}

TEST_F(HostReplayTest, EagerOpsPublishNothing) {
  std::unique_ptr<Graph> graph = RecordThree();
  graph->Replay();
  backend_.calls.clear();
  backend_.Add({.out = View(&a_)});
  backend_.SiluMul({.out = View(&b_)});
  ASSERT_EQ(backend_.calls.size(), 2u);
  EXPECT_EQ(backend_.calls[0].next_lines, 0u);
  EXPECT_EQ(backend_.calls[1].next_lines, 0u);
}

TEST_F(HostReplayTest, TwoGraphsReplayIndependently) {
  std::unique_ptr<Graph> first = RecordThree();
  backend_.BeginCapture();
  backend_.SiluMul({.out = View(&c_)});
  std::unique_ptr<Graph> second = backend_.EndCapture();
  second->Replay();
  first->Replay();
  ASSERT_EQ(backend_.calls.size(), 4u);
  EXPECT_EQ(backend_.calls[0].op, "SiluMul");
  EXPECT_EQ(backend_.calls[0].next_lines, 0u);  // a graph of one op
  EXPECT_EQ(backend_.calls[1].op, "Add");
  EXPECT_GE(backend_.calls[1].next_lines, 4u);
  second.reset();
  first->Replay();  // the first graph's records outlive the second's
  EXPECT_EQ(backend_.calls.size(), 7u);
}

}  // namespace
}  // namespace mlaserve
