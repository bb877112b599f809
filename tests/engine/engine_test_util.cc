#include "tests/engine/engine_test_util.h"

#include <fstream>
#include <random>
#include <utility>

#include "absl/time/clock.h"
#include "engine/model_loader.h"
#include "engine/model_runner.h"
#include "engine/status_macros.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "nlohmann/json.hpp"
#include "tests/engine/model_test_util.h"
#include "tests/engine/safetensors_writer_util.h"

namespace mlaserve::testing {
namespace {

class ControlledBackend final : public CpuBackend {
 public:
  explicit ControlledBackend(std::shared_ptr<BackendControl> control)
      : CpuBackend(1), control_(std::move(control)) {}
  absl::Status Synchronize() override {
    absl::SleepFor(absl::Microseconds(control_->step_delay_us.load()));
    if (control_->fail.load()) return absl::InternalError("injected device failure");
    return CpuBackend::Synchronize();
  }

 private:
  std::shared_ptr<BackendControl> control_;
};

// GPT-2's byte-level alphabet: the character standing for byte `b` in tokenizer.json.
std::string ByteLevelChar(int b) {
  const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
  int code = b;
  if (!printable) {
    int n = 0;
    for (int x = 0; x < b; ++x) {
      if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174)) ++n;
    }
    code = 256 + n;
  }
  std::string out;
  if (code < 0x80) {
    out += static_cast<char>(code);
  } else {
    out += static_cast<char>(0xC0 | (code >> 6));
    out += static_cast<char>(0x80 | (code & 0x3F));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> MakeTestEngine(TestEngineOptions options) {
  std::unique_ptr<Backend> backend =
      options.backend != nullptr ? std::move(options.backend)
                                 : MakeCpuBackend(1, options.deterministic);
  ModelOptions model_options;
  model_options.max_num_tokens = options.max_num_batched_tokens;
  model_options.max_num_seqs = options.max_num_seqs;
  model_options.max_model_len = options.max_model_len;
  model_options.block_size = options.block_size;
  model_options.num_kv_blocks = options.num_kv_blocks;
  model_options.context_chunk_tokens = 64;
  ASSIGN_OR_RETURN(auto model,
                   LoadDeepseekModel(ModelDir(options.variant), backend.get(), model_options));
  ASSIGN_OR_RETURN(auto runner,
                   ModelRunner::Create(std::move(model), backend.get(), options.graph_batch_sizes));
  EngineOptions engine_options;
  engine_options.scheduler.max_num_seqs = options.max_num_seqs;
  engine_options.scheduler.max_num_batched_tokens = options.max_num_batched_tokens;
  engine_options.scheduler.max_model_len = options.max_model_len;
  engine_options.scheduler.max_num_waiting_seqs = options.max_num_waiting_seqs;
  engine_options.scheduler.kv_cache.enable_prefix_caching = options.enable_prefix_caching;
  engine_options.scheduler.eos_token_ids = options.eos_token_ids;
  engine_options.clock = options.clock;
  engine_options.on_step = options.on_step;
  return Engine::Create(std::move(runner), std::move(backend), options.tokenizer,
                        std::move(engine_options));
}

std::unique_ptr<Engine> NewTestEngine(TestEngineOptions options) {
  auto engine = MakeTestEngine(std::move(options));
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? std::move(*engine) : nullptr;
}

StreamResult Collect(RequestStream& stream) {
  StreamResult result;
  while (true) {
    StreamUpdate update = stream.WaitAndTake();
    if (update.empty()) {
      if (stream.ended()) {
        ADD_FAILURE() << "the end of stream " << stream.id() << " was taken before Collect";
        return result;
      }
      continue;
    }
    ++result.num_updates;
    result.token_ids.insert(result.token_ids.end(), update.token_ids.begin(),
                            update.token_ids.end());
    result.text += update.text;
    for (TokenChoice& c : update.logprobs) result.logprobs.push_back(std::move(c));
    if (update.ends_stream()) {
      if (update.completion.has_value()) result.completion = *update.completion;
      result.status = update.status;
      return result;
    }
  }
}

Request GreedyRequest(std::vector<int32_t> prompt, int32_t max_tokens) {
  Request request;
  request.prompt_token_ids = std::move(prompt);
  request.sampling.temperature = 0.0f;
  request.stopping.max_tokens = max_tokens;
  request.stopping.ignore_eos = true;
  request.return_logprobs = true;
  request.top_logprobs = 3;
  return request;
}

std::vector<int32_t> RandomPrompt(uint64_t seed, int n) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> out(static_cast<size_t>(n));
  for (int32_t& id : out) id = static_cast<int32_t>(rng() % 250);
  return out;
}

std::shared_ptr<const Tokenizer> TinyTokenizer() {
  nlohmann::json vocab = nlohmann::json::object();
  for (int id = 0; id < 254; ++id) vocab[ByteLevelChar((id + 32) % 256)] = id;
  const auto added = [](int id, const char* content) {
    return nlohmann::json{{"id", id},        {"content", content}, {"single_word", false},
                          {"lstrip", false}, {"rstrip", false},    {"normalized", false},
                          {"special", true}};
  };
  const nlohmann::json byte_level = {{"type", "ByteLevel"},
                                     {"add_prefix_space", false},
                                     {"trim_offsets", true},
                                     {"use_regex", true}};
  const nlohmann::json json = {{"version", "1.0"},
                               {"truncation", nullptr},
                               {"padding", nullptr},
                               {"added_tokens", {added(254, "<bos>"), added(255, "<eos>")}},
                               {"normalizer", nullptr},
                               {"pre_tokenizer", byte_level},
                               {"post_processor", nullptr},
                               {"decoder", byte_level},
                               {"model",
                                {{"type", "BPE"},
                                 {"dropout", nullptr},
                                 {"unk_token", nullptr},
                                 {"continuing_subword_prefix", nullptr},
                                 {"end_of_word_suffix", nullptr},
                                 {"fuse_unk", false},
                                 {"byte_fallback", false},
                                 {"ignore_merges", false},
                                 {"vocab", vocab},
                                 {"merges", nlohmann::json::array()}}}};
  // A directory of its own: test processes run side by side (ctest -j), and one truncating a
  // shared file while another read it failed the other's load.
  const TempDir dir;
  const std::string path = dir.File("tokenizer.json");
  std::ofstream(path) << json.dump();
  auto tokenizer = Tokenizer::Load(path);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? std::shared_ptr<const Tokenizer>(std::move(*tokenizer)) : nullptr;
}

std::unique_ptr<Backend> MakeControlledBackend(std::shared_ptr<BackendControl> control) {
  return std::make_unique<ControlledBackend>(std::move(control));
}

}  // namespace mlaserve::testing
