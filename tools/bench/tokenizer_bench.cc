// Single-thread encode throughput of the tokenizer on a corpus (one JSON string per line, as
// tools/tokenizer/gen_corpus.js writes). Reports the first pass over the corpus (cold caches)
// and the mean of the following passes, in corpus bytes and tokens per CPU second of this
// thread; tools/tokenizer/bench.js measures the Hugging Face library the same way.
//
//   mlaserve-tokenizer-bench --tokenizer=.cache/tokenizer/models/deepseek_v3
//       --corpus=.cache/tokenizer/corpus.jsonl [--seconds=10]

#include <time.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, tokenizer, "", "tokenizer.json or a directory holding one");
ABSL_FLAG(std::string, corpus, "", "corpus file: one JSON string per line");
ABSL_FLAG(double, seconds, 10.0, "minimum CPU seconds of timed passes after the first");

namespace {

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Pass {
  double seconds;
  size_t tokens;
};

Pass EncodeAll(const mlaserve::Tokenizer& tokenizer, const std::vector<std::string>& lines) {
  const double start = ThreadCpuSeconds();
  size_t tokens = 0;
  for (const std::string& line : lines) tokens += tokenizer.Encode(line, false).size();
  return {ThreadCpuSeconds() - start, tokens};
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  auto tokenizer = mlaserve::Tokenizer::Load(absl::GetFlag(FLAGS_tokenizer));
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "%s\n", std::string(tokenizer.status().message()).c_str());
    return 1;
  }
  std::ifstream in(absl::GetFlag(FLAGS_corpus));
  if (!in) {
    std::fprintf(stderr, "cannot open --corpus=%s\n", absl::GetFlag(FLAGS_corpus).c_str());
    return 1;
  }
  std::vector<std::string> lines;
  size_t bytes = 0;
  for (std::string line; std::getline(in, line);) {
    const auto text = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!text.is_string()) {
      std::fprintf(stderr, "corpus line %zu is not a JSON string\n", lines.size() + 1);
      return 1;
    }
    lines.push_back(text.get<std::string>());
    bytes += lines.back().size();
  }

  const Pass first = EncodeAll(**tokenizer, lines);
  double seconds = 0;
  size_t tokens = 0;
  int passes = 0;
  while (seconds < absl::GetFlag(FLAGS_seconds)) {
    const Pass pass = EncodeAll(**tokenizer, lines);
    seconds += pass.seconds;
    tokens += pass.tokens;
    ++passes;
  }
  std::printf("corpus: %zu lines, %zu bytes, %zu tokens\n", lines.size(), bytes, first.tokens);
  std::printf("first pass: %.3f s CPU, %.2f MB/s, %.0f tokens/s\n", first.seconds,
              static_cast<double>(bytes) / first.seconds / 1e6,
              static_cast<double>(first.tokens) / first.seconds);
  std::printf("steady (%d passes): %.3f s CPU per pass, %.2f MB/s, %.0f tokens/s\n", passes,
              seconds / passes, static_cast<double>(bytes) * passes / seconds / 1e6,
              static_cast<double>(tokens) / seconds);
  return 0;
}
