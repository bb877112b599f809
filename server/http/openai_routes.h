// OpenAiRoutes: what the HTTP front end answers, independent of the HTTP library. A request's
// method, path and body become either a complete reply (models, health, tokenize, errors) or
// a started Generation (completions and chat) that the connection then relays.
//
//   GET  /health                 200 while grpc.health.v1 says SERVING, else 503
//   GET  /v1/models[/{id}]       the served model
//   POST /v1/completions         text_completion (SSE with "stream": true)
//   POST /v1/chat/completions    chat.completion (SSE with "stream": true)
//   POST /tokenize               {"prompt", "add_special_tokens"} → {"tokens", "count",
//   "max_model_len"} POST /detokenize             {"tokens"} → {"prompt"}
//
// Until SetEngine every route but /health answers 503; after StartDraining new completions
// answer 503 while the other routes keep answering.
//
// Thread-safety: all methods are thread-safe.
#ifndef MLASERVE_SERVER_HTTP_OPENAI_ROUTES_H_
#define MLASERVE_SERVER_HTTP_OPENAI_ROUTES_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/tokenizer/chat_template.h"
#include "server/common/serving_engine.h"
#include "server/http/generation.h"
#include "server/metrics/request_observer.h"

namespace mlaserve {

struct OpenAiRoutesOptions {
  int64_t max_prompt_bytes = int64_t{1} << 20;  // text prompts and rendered chats
  RequestObserver* observer = nullptr;          // may be null; must outlive the routes
  // Why the server is not serving (the health watchdog's reason), empty when it is; null:
  // always serving once the engine is set.
  std::function<std::string()> not_serving_reason;
};

struct HttpReply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
};

// The outcome of one request: `generation` set, or else `reply`.
struct Routed {
  HttpReply reply = {};
  std::unique_ptr<Generation> generation = nullptr;
};

class OpenAiRoutes {
 public:
  explicit OpenAiRoutes(OpenAiRoutesOptions options);

  // The model is loaded; `chat_template` is null when the model has none (chat answers 400).
  void SetEngine(std::shared_ptr<ServingEngine> engine,
                 std::shared_ptr<const ChatTemplate> chat_template);
  // New completions answer 503 from now on, and so does /health.
  void StartDraining();

  // Answers one request. `wake` is the started Generation's wake-up (see Generation::Start).
  // Each Generation handed out must be reported with GenerationEnded when it is destroyed.
  Routed Handle(std::string_view method, std::string_view target, std::string_view body,
                std::function<void()> wake);
  void GenerationEnded();
  // Waits until no Generation is open, or `deadline`; returns whether none is.
  bool WaitForNoGenerations(absl::Time deadline);

 private:
  HttpReply Health() const;
  HttpReply Models(std::string_view id) const;
  HttpReply Tokenize(std::string_view body) const;
  HttpReply Detokenize(std::string_view body) const;
  // The engine set by SetEngine, or nullptr while the model loads.
  std::shared_ptr<ServingEngine> CurrentEngine() const;
  Routed Complete(OpenAiEndpoint endpoint, std::string_view body, std::function<void()> wake);

  const OpenAiRoutesOptions options_;
  RequestObserver default_observer_;
  RequestObserver* const observer_;
  const int64_t created_;  // Unix seconds the server started: the model's "created"

  mutable absl::Mutex mu_;
  std::shared_ptr<ServingEngine> engine_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const ChatTemplate> chat_template_ ABSL_GUARDED_BY(mu_);
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  int64_t num_generations_ ABSL_GUARDED_BY(mu_) = 0;
};

// An error reply: OpenAI's error object with the status's HTTP status.
HttpReply ErrorReply(const absl::Status& status);

}  // namespace mlaserve

#endif  // MLASERVE_SERVER_HTTP_OPENAI_ROUTES_H_
