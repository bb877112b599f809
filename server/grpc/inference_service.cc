#include "server/grpc/inference_service.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "server/grpc/generate_reactor.h"
#include "server/common/request_conversion.h"
#include "server/grpc/response_conversion.h"
#include "server/grpc/status_conversion.h"

namespace mlaserve {
namespace {

absl::Status Loading() { return absl::UnavailableError("the model is still loading"); }

grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* context, const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

}  // namespace

InferenceService::InferenceService(InferenceServiceOptions options)
    : options_(std::move(options)),
      observer_(options_.observer != nullptr ? options_.observer : &default_observer_),
      started_(absl::Now()) {
  if (options_.stream_write_timeout > absl::ZeroDuration()) {
    stall_sweeper_ = std::thread([this] { SweepStalledCalls(); });
  }
}

InferenceService::~InferenceService() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (stall_sweeper_.joinable()) stall_sweeper_.join();
}

void InferenceService::SweepStalledCalls() {
  const absl::Duration period =
      std::clamp(options_.stream_write_timeout / 4, absl::Milliseconds(10), absl::Seconds(1));
  absl::MutexLock lock(&mu_);
  const auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
  while (!mu_.AwaitWithTimeout(absl::Condition(&stopping), period)) {
    // Holding mu_ keeps every registered reactor alive: OnDone unregisters under it.
    const absl::Time now = absl::Now();
    for (GenerateReactor* call : calls_) call->CancelIfStalled(now);
  }
}

void InferenceService::SetEngine(std::shared_ptr<ServingEngine> engine) {
  absl::MutexLock lock(&mu_);
  engine_ = std::move(engine);
}

std::shared_ptr<ServingEngine> InferenceService::engine() const {
  absl::MutexLock lock(&mu_);
  return engine_;
}

void InferenceService::StartDraining() {
  absl::MutexLock lock(&mu_);
  draining_ = true;
}

bool InferenceService::draining() const {
  absl::MutexLock lock(&mu_);
  return draining_;
}

bool InferenceService::WaitForNoCalls(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  const auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return calls_.empty(); };
  return mu_.AwaitWithDeadline(absl::Condition(&idle), deadline);
}

grpc::ServerWriteReactor<v1::GenerateResponse>* InferenceService::Generate(
    grpc::CallbackServerContext* context, const v1::GenerateRequest* request) {
  std::shared_ptr<ServingEngine> engine;
  absl::Status admission = options_.auth.Check(*context);
  {
    absl::MutexLock lock(&mu_);
    engine = engine_;
    if (draining_ && admission.ok()) admission = absl::UnavailableError("the server is draining");
  }
  const GenerateLimits limits{.max_prompt_bytes = options_.max_prompt_bytes,
                              .write_timeout = options_.stream_write_timeout};
  auto* reactor = new GenerateReactor(context, std::move(engine), observer_, &wakes_, limits,
                                      [this](GenerateReactor* done) {
                                        absl::MutexLock lock(&mu_);
                                        calls_.erase(done);
                                      });
  {
    // No reaction, OnDone included, runs before this handler returns.
    absl::MutexLock lock(&mu_);
    calls_.insert(reactor);
  }
  reactor->Start(*request, admission);
  return reactor;
}

grpc::ServerUnaryReactor* InferenceService::Abort(grpc::CallbackServerContext* context,
                                                  const v1::AbortRequest* request,
                                                  v1::AbortResponse* response) {
  if (absl::Status auth = options_.auth.Check(*context); !auth.ok()) return Answer(context, auth);
  const std::shared_ptr<ServingEngine> engine = this->engine();
  if (engine == nullptr) return Answer(context, Loading());
  for (const std::string& id : request->request_ids()) {
    if (engine->Abort(id)) response->add_aborted(id);
  }
  return Answer(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::Tokenize(grpc::CallbackServerContext* context,
                                                     const v1::TokenizeRequest* request,
                                                     v1::TokenizeResponse* response) {
  if (absl::Status auth = options_.auth.Check(*context); !auth.ok()) return Answer(context, auth);
  const std::shared_ptr<ServingEngine> engine = this->engine();
  if (engine == nullptr) return Answer(context, Loading());
  const Tokenizer* tokenizer = engine->tokenizer();
  if (tokenizer == nullptr) return Answer(context, NoTokenizerError("text"));
  if (absl::Status s = CheckTextSize(request->text(), options_.max_prompt_bytes, "text");
      !s.ok()) {
    return Answer(context, s);
  }
  for (int32_t id : tokenizer->Encode(request->text(), request->add_special_tokens())) {
    response->add_ids(static_cast<uint32_t>(id));
  }
  return Answer(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::Detokenize(grpc::CallbackServerContext* context,
                                                       const v1::DetokenizeRequest* request,
                                                       v1::DetokenizeResponse* response) {
  if (absl::Status auth = options_.auth.Check(*context); !auth.ok()) return Answer(context, auth);
  const std::shared_ptr<ServingEngine> engine = this->engine();
  if (engine == nullptr) return Answer(context, Loading());
  const Tokenizer* tokenizer = engine->tokenizer();
  if (tokenizer == nullptr) return Answer(context, NoTokenizerError("ids"));
  const absl::StatusOr<std::vector<int32_t>> ids =
      DetokenizeIds(*request, engine->info().model_config.vocab_size);
  if (!ids.ok()) return Answer(context, ids.status());
  response->set_text(tokenizer->Decode(*ids, request->skip_special_tokens()));
  return Answer(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::GetModelInfo(grpc::CallbackServerContext* context,
                                                         const v1::GetModelInfoRequest* request,
                                                         v1::GetModelInfoResponse* response) {
  if (absl::Status auth = options_.auth.Check(*context); !auth.ok()) return Answer(context, auth);
  const std::shared_ptr<ServingEngine> engine = this->engine();
  if (engine == nullptr) return Answer(context, Loading());
  FillModelInfo(*engine, response);
  return Answer(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* InferenceService::GetServerInfo(grpc::CallbackServerContext* context,
                                                          const v1::GetServerInfoRequest* request,
                                                          v1::GetServerInfoResponse* response) {
  if (absl::Status auth = options_.auth.Check(*context); !auth.ok()) return Answer(context, auth);
  const std::shared_ptr<ServingEngine> engine = this->engine();
  if (engine == nullptr) return Answer(context, Loading());
  FillServerInfo(*engine, started_, draining(), response);
  return Answer(context, absl::OkStatus());
}

}  // namespace mlaserve
