#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/engine_core.h"
#include "engine/tokenizer/tokenizer.h"
#include "kernels/check.h"

namespace mlaserve {
namespace {

std::function<absl::Time()> MonotonicClock() {
  const absl::Time wall_start = absl::Now();
  const auto steady_start = std::chrono::steady_clock::now();
  return [wall_start, steady_start] {
    return wall_start + absl::FromChrono(std::chrono::steady_clock::now() - steady_start);
  };
}

absl::Status CheckIds(absl::Span<const int32_t> ids, int64_t vocab, const char* field) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, "[", i, "] = ", ids[i], " is outside the vocabulary [0, ", vocab, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(std::unique_ptr<ModelRunner> runner,
                                                       std::unique_ptr<Backend> backend,
                                                       std::shared_ptr<const Tokenizer> tokenizer,
                                                       EngineOptions options) {
  if (runner == nullptr || backend == nullptr) {
    return absl::InvalidArgumentError("Engine::Create needs a model runner and its backend");
  }
  const DeepseekModel& model = runner->model();
  const ModelOptions& model_options = model.options();
  const ForwardLimits& limits = runner->limits();
  SchedulerOptions& s = options.scheduler;
  // The model's buffers were sized at load time; the scheduler must never plan beyond them.
  s.kv_cache.block_size = static_cast<int32_t>(model_options.block_size);
  s.kv_cache.num_blocks = static_cast<int32_t>(model_options.num_kv_blocks);
  s.max_num_seqs = std::min<int32_t>(s.max_num_seqs, static_cast<int32_t>(limits.max_num_seqs));
  s.max_num_batched_tokens =
      std::min<int32_t>(s.max_num_batched_tokens, static_cast<int32_t>(limits.max_num_tokens));
  s.max_model_len =
      static_cast<int32_t>(std::min<int64_t>({s.max_model_len, model_options.max_model_len,
                                              limits.max_blocks_per_seq * limits.block_size}));
  if (s.eos_token_ids.empty()) {
    for (int64_t id : model.config().eos_token_ids)
      s.eos_token_ids.push_back(static_cast<int32_t>(id));
  }
  s.clock = options.clock ? options.clock : MonotonicClock();
  if (absl::Status valid = ValidateSchedulerOptions(s); !valid.ok()) return valid;

  EngineInfo info;
  info.model_config = model.config();
  const MemoryUsage memory = runner->memory();
  info.weight_bytes = memory.weight_bytes;
  info.kv_cache_bytes = memory.kv_cache_bytes;
  info.workspace_bytes = memory.workspace_bytes;
  info.graph_bytes = memory.graph_bytes;
  info.eos_token_ids = s.eos_token_ids;
  info.graph_batch_sizes = runner->graph_buckets();
  info.deterministic = backend->batch_invariant();
  return std::unique_ptr<Engine>(
      new Engine(std::move(backend), std::move(runner), std::move(tokenizer), s,
                 std::move(options.on_step), std::move(info)));
}

Engine::Engine(std::unique_ptr<Backend> backend, std::unique_ptr<ModelRunner> runner,
               std::shared_ptr<const Tokenizer> tokenizer, const SchedulerOptions& options,
               std::function<void(const StepObservation&)> on_step, EngineInfo info)
    : backend_(std::move(backend)),
      core_(std::make_unique<EngineCore>(std::move(runner), std::move(tokenizer), options,
                                         std::move(on_step))),
      info_(std::move(info)),
      clock_(options.clock),
      max_num_waiting_seqs_(options.max_num_waiting_seqs),
      has_tokenizer_(core_->has_tokenizer()),
      seed_rng_(std::random_device()()) {
  info_.max_context_tokens = core_->scheduler().max_context_tokens();
  PublishAndDeliver();
  thread_ = std::thread([this] { Loop(); });
}

Engine::~Engine() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

absl::StatusOr<std::shared_ptr<RequestStream>> Engine::Submit(Request request) {
  const int64_t vocab = info_.model_config.vocab_size;
  const int32_t context = info_.max_context_tokens;
  const int64_t num_prompt = static_cast<int64_t>(request.prompt_token_ids.size());
  const StoppingOptions& stopping = request.stopping;
  if (num_prompt == 0) return absl::InvalidArgumentError("token_ids: the prompt is empty");
  if (absl::Status s = CheckIds(request.prompt_token_ids, vocab, "token_ids"); !s.ok()) return s;
  if (num_prompt >= context) {
    return absl::InvalidArgumentError(absl::StrCat("token_ids: the prompt has ", num_prompt,
                                                   " tokens; the context limit is ", context));
  }
  if (stopping.max_tokens.has_value() && *stopping.max_tokens < 1) {
    return absl::InvalidArgumentError("max_tokens: must be at least 1 when set");
  }
  if (stopping.min_tokens < 0 || num_prompt + stopping.min_tokens > context) {
    return absl::InvalidArgumentError(absl::StrCat("min_tokens: ", stopping.min_tokens,
                                                   " plus the prompt's ", num_prompt,
                                                   " tokens exceed the context limit ", context));
  }
  if (absl::Status s = CheckIds(stopping.stop_token_ids, vocab, "stop_token_ids"); !s.ok()) {
    return s;
  }
  if (request.top_logprobs < 0 || request.top_logprobs > kMaxTopLogprobs) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_logprobs: must be in [0, ", kMaxTopLogprobs, "]"));
  }
  for (const std::string& stop : stopping.stop) {
    if (stop.empty()) return absl::InvalidArgumentError("stop: stop strings must not be empty");
    if (!has_tokenizer_) {
      return absl::InvalidArgumentError("stop: stop strings need a tokenizer; none is loaded");
    }
  }

  absl::MutexLock lock(&mu_);
  if (failed_) return absl::UnavailableError("the engine failed and accepts no requests");
  if (draining_ || stop_) return absl::UnavailableError("the engine is draining");
  if (request.id.empty()) {
    do {
      request.id = absl::StrCat("mlaserve-", next_id_++);
    } while (live_.contains(request.id));
  } else if (auto it = live_.find(request.id); it != live_.end() && !it->second->ended()) {
    return absl::AlreadyExistsError(
        absl::StrCat("request_id: request \"", request.id, "\" is already running"));
  }
  if (static_cast<int64_t>(inbox_.size()) + stats_.num_waiting >= max_num_waiting_seqs_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the admission queue is full (", max_num_waiting_seqs_, " requests waiting)"));
  }
  if (!request.sampling.seed.has_value()) request.sampling.seed = seed_rng_();
  if (request.arrival_time == absl::InfinitePast()) request.arrival_time = clock_();
  auto stream = std::make_shared<RequestStream>(request.id);
  live_.emplace(request.id, stream);
  inbox_.emplace_back(std::move(request), stream);
  return stream;
}

bool Engine::Abort(const RequestId& id) {
  absl::MutexLock lock(&mu_);
  auto it = live_.find(id);
  if (it == live_.end() || it->second->ended()) return false;
  aborts_.push_back(id);
  return true;
}

void Engine::Drain(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mu_);
  draining_ = true;
  while (!live_.empty() && !ended_cv_.WaitWithDeadline(&mu_, deadline)) {
  }
  for (const auto& [id, stream] : live_) aborts_.push_back(id);
  while (!live_.empty()) ended_cv_.Wait(&mu_);
}

EngineStats Engine::stats() const {
  absl::MutexLock lock(&mu_);
  EngineStats stats = stats_;
  stats.num_waiting += static_cast<int32_t>(inbox_.size());
  stats.draining = draining_;
  stats.failed = failed_;
  return stats;
}

void Engine::PublishAndDeliver() {
  EngineStats stats;
  core_->FillStats(stats);
  {
    absl::MutexLock lock(&mu_);
    stats_ = stats;
  }
  std::vector<EngineCore::Ending> endings = core_->TakeEndings();
  if (endings.empty()) return;
  for (EngineCore::Ending& ending : endings) ending.Deliver();
  absl::MutexLock lock(&mu_);
  for (const EngineCore::Ending& ending : endings) {
    // The id may already belong to a newer request (see live_).
    auto it = live_.find(ending.stream->id());
    if (it != live_.end() && it->second == ending.stream) live_.erase(it);
  }
  ended_cv_.SignalAll();
}

void Engine::Loop() {
  while (true) {
    std::deque<std::pair<Request, std::shared_ptr<RequestStream>>> inbox;
    std::vector<RequestId> aborts;
    bool stop = false;
    {
      // Evaluated before locking: the condition may run on other threads, which must not read
      // the core.
      const bool busy = core_->has_work();
      absl::MutexLock lock(&mu_);
      const auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || busy || !inbox_.empty() || !aborts_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      stop = stop_;
      inbox.swap(inbox_);
      aborts.swap(aborts_);
      stats_.num_waiting += static_cast<int32_t>(inbox.size());
    }
    for (auto& [request, stream] : inbox) core_->Add(std::move(request), std::move(stream));
    if (stop) {
      core_->AbortAll();
      PublishAndDeliver();
      return;
    }
    for (const RequestId& id : aborts) core_->Abort(id);
    if (absl::Status status = core_->Step(); !status.ok()) {
      // The failed step left its batch unfinished: the core must not be touched again.
      Fail(status);
      return;
    }
    PublishAndDeliver();
  }
}

void Engine::Fail(const absl::Status& cause) {
  std::fprintf(stderr, "mlaserve engine: a step failed; failing every request: %s\n",
               cause.ToString().c_str());
  const absl::Status status =
      absl::UnavailableError(absl::StrCat("the engine failed: ", cause.ToString()));
  std::deque<std::pair<Request, std::shared_ptr<RequestStream>>> inbox;
  {
    absl::MutexLock lock(&mu_);
    failed_ = true;
    inbox.swap(inbox_);
  }
  core_->FailAll(status);
  PublishAndDeliver();
  for (auto& [request, stream] : inbox) stream->Fail(status);
  absl::MutexLock lock(&mu_);
  for (auto& [request, stream] : inbox) live_.erase(request.id);
  ended_cv_.SignalAll();
}

}  // namespace mlaserve
