#include "server/http/openai_routes.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "mlaserve/v1/inference.pb.h"
#include "nlohmann/json.hpp"
#include "server/common/request_conversion.h"
#include "server/http/openai_response.h"

namespace mlaserve {
namespace {

using json = nlohmann::json;

HttpReply JsonReply(const json& body) { return {.status = 200, .body = Dump(body)}; }

absl::Status Loading() { return absl::UnavailableError("the model is still loading"); }

// The body as a JSON object, or the error naming it.
absl::StatusOr<json> ParseObject(std::string_view body) {
  json parsed = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return absl::InvalidArgumentError("body: must be a JSON object");
  }
  return parsed;
}

}  // namespace

HttpReply ErrorReply(const absl::Status& status) {
  return {.status = HttpStatus(status), .body = Dump(ErrorBody(status))};
}

OpenAiRoutes::OpenAiRoutes(OpenAiRoutesOptions options)
    : options_(std::move(options)),
      observer_(options_.observer != nullptr ? options_.observer : &default_observer_),
      created_(absl::ToUnixSeconds(absl::Now())) {}

void OpenAiRoutes::SetEngine(std::shared_ptr<ServingEngine> engine,
                             std::shared_ptr<const ChatTemplate> chat_template) {
  absl::MutexLock lock(&mu_);
  engine_ = std::move(engine);
  chat_template_ = std::move(chat_template);
}

void OpenAiRoutes::StartDraining() {
  absl::MutexLock lock(&mu_);
  draining_ = true;
}

void OpenAiRoutes::GenerationEnded() {
  absl::MutexLock lock(&mu_);
  --num_generations_;
}

bool OpenAiRoutes::WaitForNoGenerations(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  const auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return num_generations_ == 0; };
  return mu_.AwaitWithDeadline(absl::Condition(&idle), deadline);
}

Routed OpenAiRoutes::Handle(std::string_view method, std::string_view target, std::string_view body,
                            std::function<void()> wake) {
  const std::string_view path = target.substr(0, target.find('?'));
  const bool get = method == "GET", post = method == "POST";
  if (path == "/health" && get) return {.reply = Health()};
  if (path == "/v1/models" && get) return {.reply = Models("")};
  if (path.substr(0, std::string_view("/v1/models/").size()) == "/v1/models/" && get) {
    return {.reply = Models(path.substr(std::string_view("/v1/models/").size()))};
  }
  if (path == "/tokenize" && post) return {.reply = Tokenize(body)};
  if (path == "/detokenize" && post) return {.reply = Detokenize(body)};
  if (path == "/v1/completions" && post) {
    return Complete(OpenAiEndpoint::kCompletions, body, std::move(wake));
  }
  if (path == "/v1/chat/completions" && post) {
    return Complete(OpenAiEndpoint::kChatCompletions, body, std::move(wake));
  }
  return {.reply = ErrorReply(absl::NotFoundError(
              absl::StrCat("no route ", std::string(method), " ", std::string(path),
                           " (POST /v1/completions, POST /v1/chat/completions, GET /v1/models, "
                           "GET /health, POST /tokenize, POST /detokenize)")))};
}

HttpReply OpenAiRoutes::Health() const {
  std::string reason;
  {
    absl::MutexLock lock(&mu_);
    if (engine_ == nullptr) reason = "loading";
    if (draining_) reason = "draining";
  }
  if (reason.empty() && options_.not_serving_reason) reason = options_.not_serving_reason();
  if (reason.empty()) return JsonReply({{"status", "ok"}});
  return ErrorReply(absl::UnavailableError(absl::StrCat("not serving: ", reason)));
}

std::shared_ptr<ServingEngine> OpenAiRoutes::CurrentEngine() const {
  absl::MutexLock lock(&mu_);
  return engine_;
}

HttpReply OpenAiRoutes::Models(std::string_view id) const {
  const std::shared_ptr<ServingEngine> engine = CurrentEngine();
  if (engine == nullptr) return ErrorReply(Loading());
  const std::string& name = engine->description().model_name;
  const json model = {{"id", name},
                      {"object", "model"},
                      {"created", created_},
                      {"owned_by", "mlaserve"},
                      {"max_model_len", engine->info().max_context_tokens}};
  if (id.empty()) return JsonReply({{"object", "list"}, {"data", json::array({model})}});
  if (id == name) return JsonReply(model);
  return ErrorReply(
      absl::NotFoundError(absl::StrCat("model: the model `", std::string(id), "` does not exist")));
}

HttpReply OpenAiRoutes::Tokenize(std::string_view body) const {
  const std::shared_ptr<ServingEngine> engine = CurrentEngine();
  if (engine == nullptr) return ErrorReply(Loading());
  absl::StatusOr<json> request = ParseObject(body);
  if (!request.ok()) return ErrorReply(request.status());
  const json& prompt = (*request)["prompt"];
  const json& add_special = (*request)["add_special_tokens"];
  if (!prompt.is_string())
    return ErrorReply(absl::InvalidArgumentError("prompt: must be a string"));
  if (!add_special.is_null() && !add_special.is_boolean()) {
    return ErrorReply(absl::InvalidArgumentError("add_special_tokens: must be a boolean"));
  }
  const Tokenizer* tokenizer = engine->tokenizer();
  if (tokenizer == nullptr) return ErrorReply(NoTokenizerError("prompt"));
  const std::string text = prompt.get<std::string>();
  if (absl::Status s = CheckTextSize(text, options_.max_prompt_bytes, "prompt"); !s.ok()) {
    return ErrorReply(s);
  }
  const std::vector<int32_t> ids =
      tokenizer->Encode(text, add_special.is_null() || add_special.get<bool>());
  return JsonReply({{"tokens", ids},
                    {"count", ids.size()},
                    {"max_model_len", engine->info().max_context_tokens}});
}

HttpReply OpenAiRoutes::Detokenize(std::string_view body) const {
  const std::shared_ptr<ServingEngine> engine = CurrentEngine();
  if (engine == nullptr) return ErrorReply(Loading());
  absl::StatusOr<json> request = ParseObject(body);
  if (!request.ok()) return ErrorReply(request.status());
  const json& tokens = (*request)["tokens"];
  const absl::Status not_ids = absl::InvalidArgumentError("tokens: must be a list of token ids");
  if (!tokens.is_array()) return ErrorReply(not_ids);
  v1::DetokenizeRequest proto;
  for (const json& id : tokens) {
    if (!id.is_number_unsigned() || id.get<uint64_t>() > UINT32_MAX) return ErrorReply(not_ids);
    proto.add_ids(static_cast<uint32_t>(id.get<uint64_t>()));
  }
  const Tokenizer* tokenizer = engine->tokenizer();
  if (tokenizer == nullptr) return ErrorReply(NoTokenizerError("tokens"));
  absl::StatusOr<std::vector<int32_t>> ids =
      DetokenizeIds(proto, engine->info().model_config.vocab_size);
  if (!ids.ok()) {
    // The validator names the proto field "ids".
    return ErrorReply(
        absl::InvalidArgumentError(absl::StrCat("tokens", ids.status().message().substr(3))));
  }
  return JsonReply({{"prompt", tokenizer->Decode(*ids, /*skip_special_tokens=*/false)}});
}

Routed OpenAiRoutes::Complete(OpenAiEndpoint endpoint, std::string_view body,
                              std::function<void()> wake) {
  std::shared_ptr<ServingEngine> engine;
  std::shared_ptr<const ChatTemplate> chat_template;
  {
    absl::MutexLock lock(&mu_);
    if (draining_) {
      return {.reply = ErrorReply(absl::UnavailableError("the server is draining"))};
    }
    engine = engine_;
    chat_template = chat_template_;
  }
  if (engine == nullptr) return {.reply = ErrorReply(Loading())};
  const EngineInfo& info = engine->info();
  const OpenAiModel model{.name = engine->description().model_name,
                          .limits = {.vocab_size = info.model_config.vocab_size,
                                     .max_context_tokens = info.max_context_tokens,
                                     .max_prompt_bytes = options_.max_prompt_bytes},
                          .tokenizer = engine->tokenizer(),
                          .chat_template = chat_template.get()};
  absl::StatusOr<OpenAiRequest> request = ParseOpenAiRequest(endpoint, body, model);
  if (!request.ok()) {
    // An unknown model or a model without a chat template is the request's fault as well.
    observer_->OnFailed(absl::StatusCode::kInvalidArgument);
    return {.reply = ErrorReply(request.status())};
  }
  absl::StatusOr<std::unique_ptr<Generation>> generation =
      Generation::Start(*std::move(request), std::move(engine), observer_, std::move(wake));
  if (!generation.ok()) return {.reply = ErrorReply(generation.status())};
  absl::MutexLock lock(&mu_);
  ++num_generations_;
  return {.generation = *std::move(generation)};
}

}  // namespace mlaserve
