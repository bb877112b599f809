// HostBackend's recorded graphs: a replay runs the recorded ops in order on the params they
// were recorded with, as often as it is replayed, and while op i runs the backend publishes
// the cache lines read from op i's end to op i + 1's start (what CpuBackend's thread pool
// prefetches while it waits), each line once; during the last op those up to the next
// replay's first op; none during eager ops or after a replay.
#include <algorithm>
#include <cstdint>
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
    bool next_lines_name_backend;  // the backend object's line is among them
    bool next_lines_are_distinct_lines;  // line addresses, each once
    NextStepReader next_step;
  };

  using HostBackend::next_op_lines;
  using HostBackend::next_step_reader;
  std::string_view name() const override { return "spy"; }
  std::vector<Call> calls;

 protected:
  void RunAdd(const AddParams& p) override { Note("Add", p.out); }
  void RunSiluMul(const SiluMulParams& p) override { Note("SiluMul", p.out); }

 private:
  void Note(const char* op, const TensorView& out) {
    const absl::Span<const void* const> lines = *next_op_lines();
    std::vector<uintptr_t> addresses;
    for (const void* line : lines) addresses.push_back(reinterpret_cast<uintptr_t>(line));
    std::sort(addresses.begin(), addresses.end());
    const bool distinct_lines =
        std::adjacent_find(addresses.begin(), addresses.end()) == addresses.end() &&
        std::all_of(addresses.begin(), addresses.end(), [](uintptr_t a) { return a % 64 == 0; });
    const auto own_line = reinterpret_cast<uintptr_t>(this) / 64 * 64;
    calls.push_back({op, *static_cast<const float*>(out.data()), lines.size(),
                     std::binary_search(addresses.begin(), addresses.end(), own_line),
                     distinct_lines, *next_step_reader()});
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
    graph->Replay({});
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
  graph->Replay({});
  ASSERT_EQ(backend_.calls.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    // The op's own code, the next op's (for the last op: the first op's) record, closure and
    // calling code, and the backend's own line.
    EXPECT_GE(backend_.calls[i].next_lines, 4u) << i;
    EXPECT_TRUE(backend_.calls[i].next_lines_name_backend) << i;
    EXPECT_TRUE(backend_.calls[i].next_lines_are_distinct_lines) << i;
  }
  EXPECT_TRUE(backend_.next_op_lines()->empty());  // nothing after the replay
  // The next replay publishes the same lines.
  const std::vector<SpyBackend::Call> first = backend_.calls;
  backend_.calls.clear();
  graph->Replay({});
  ASSERT_EQ(backend_.calls.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(backend_.calls[i].next_lines, first[i].next_lines) << i;
}

TEST_F(HostReplayTest, PublishesTheNextStepsReaderDuringTheLastOpOnly) {
  std::unique_ptr<Graph> graph = RecordThree();
  int context = 0;
  const NextStepReader reader{.read = [](const void*) {}, .context = &context};
  for (int replay = 0; replay < 2; ++replay) {
    backend_.calls.clear();
    graph->Replay(reader);
    ASSERT_EQ(backend_.calls.size(), 3u);
    EXPECT_EQ(backend_.calls[0].next_step.read, nullptr);
    EXPECT_EQ(backend_.calls[1].next_step.read, nullptr);
    EXPECT_EQ(backend_.calls[2].next_step.read, reader.read);
    EXPECT_EQ(backend_.calls[2].next_step.context, &context);
    EXPECT_EQ(backend_.next_step_reader()->read, nullptr);  // nothing after the replay
  }
  backend_.calls.clear();
  graph->Replay({});
  ASSERT_EQ(backend_.calls.size(), 3u);
  EXPECT_EQ(backend_.calls[2].next_step.read, nullptr);
}

TEST_F(HostReplayTest, EagerOpsPublishNothing) {
  std::unique_ptr<Graph> graph = RecordThree();
  graph->Replay({});
  backend_.calls.clear();
  backend_.Add({.out = View(&a_)});
  backend_.SiluMul({.out = View(&b_)});
  ASSERT_EQ(backend_.calls.size(), 2u);
  EXPECT_EQ(backend_.calls[0].next_lines, 0u);
  EXPECT_EQ(backend_.calls[1].next_lines, 0u);
  EXPECT_EQ(backend_.calls[1].next_step.read, nullptr);
}

TEST_F(HostReplayTest, TwoGraphsReplayIndependently) {
  std::unique_ptr<Graph> first = RecordThree();
  backend_.BeginCapture();
  backend_.SiluMul({.out = View(&c_)});
  std::unique_ptr<Graph> second = backend_.EndCapture();
  second->Replay({});
  first->Replay({});
  ASSERT_EQ(backend_.calls.size(), 4u);
  EXPECT_EQ(backend_.calls[0].op, "SiluMul");
  // A graph of one op: its next op is itself, in the next replay.
  EXPECT_GE(backend_.calls[0].next_lines, 4u);
  EXPECT_TRUE(backend_.calls[0].next_lines_name_backend);
  EXPECT_EQ(backend_.calls[1].op, "Add");
  EXPECT_GE(backend_.calls[1].next_lines, 4u);
  second.reset();
  first->Replay({});  // the first graph's records outlive the second's
  EXPECT_EQ(backend_.calls.size(), 7u);
}

}  // namespace
}  // namespace mlaserve
