#include "server/grpc/generate_reactor.h"

#include <chrono>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/sequence.h"
#include "server/common/log.h"
#include "server/common/request_conversion.h"
#include "server/grpc/response_conversion.h"
#include "server/grpc/status_conversion.h"

namespace mlaserve {
namespace {

void LogFailure(const std::string& id, const absl::Status& status) {
  LogEvent("request_failed", {{"request_id", id},
                              {"code", StatusCodeLabel(status.code())},
                              {"message", std::string(status.message())}});
}

}  // namespace

GenerateReactor::GenerateReactor(grpc::CallbackServerContext* context,
                                 std::shared_ptr<ServingEngine> engine, RequestObserver* observer,
                                 WakeQueue* wakes, GenerateLimits limits,
                                 std::function<void(GenerateReactor*)> on_done)
    : context_(context),
      engine_(std::move(engine)),
      observer_(observer),
      wakes_(wakes),
      limits_(limits),
      on_done_(std::move(on_done)) {}

void GenerateReactor::Start(const v1::GenerateRequest& proto, const absl::Status& admission) {
  absl::StatusOr<std::shared_ptr<RequestStream>> stream = Submit(proto, admission);
  if (!stream.ok()) {
    observer_->OnFailed(stream.status().code());
    LogFailure(proto.request_id(), stream.status());
    absl::MutexLock lock(&mu_);
    FinishLocked(stream.status());
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    stream_ = *stream;
  }
  // No reaction can run before the handler that calls Start returns, so `this` outlives the
  // callback until OnDone replaces it and forgets its queued wake-up.
  (*stream)->SetReadyCallback([this] { wakes_->Wake(this); });
}

absl::StatusOr<std::shared_ptr<RequestStream>> GenerateReactor::Submit(
    const v1::GenerateRequest& proto, const absl::Status& admission) {
  if (!admission.ok()) return admission;
  if (engine_ == nullptr) return absl::UnavailableError("the model is still loading");
  const absl::Time arrival = engine_->Now();
  const EngineInfo& info = engine_->info();
  const ModelLimits model_limits{.vocab_size = info.model_config.vocab_size,
                                 .max_context_tokens = info.max_context_tokens,
                                 .max_prompt_bytes = limits_.max_prompt_bytes};
  absl::StatusOr<Request> request = ToEngineRequest(proto, model_limits, engine_->tokenizer());
  if (!request.ok()) return request.status();
  request->arrival_time = arrival;
  const auto grpc_deadline = context_->deadline();
  if (grpc_deadline != std::chrono::system_clock::time_point::max()) {
    // The engine keeps its own clock; carry over the time left, not the absolute time.
    request->deadline =
        engine_->Now() + absl::FromChrono(grpc_deadline - std::chrono::system_clock::now());
  }
  const auto num_prompt_tokens = static_cast<int32_t>(request->prompt_token_ids.size());
  absl::StatusOr<std::shared_ptr<RequestStream>> stream = engine_->Submit(*std::move(request));
  if (stream.ok()) observer_->OnAdmitted(num_prompt_tokens);
  return stream;
}

void GenerateReactor::OnWake() {
  absl::MutexLock lock(&mu_);
  PumpLocked();
}

void GenerateReactor::PumpLocked() {
  if (finished_ || write_in_flight_) return;
  if (pending_complete_.has_value()) {
    v1::GenerateResponse complete = *std::move(pending_complete_);
    pending_complete_.reset();
    WriteLocked(std::move(complete));
    return;
  }
  if (!stream_ended_) {
    if (std::optional<v1::GenerateResponse> next = TakeLocked()) {
      WriteLocked(*std::move(next));
      return;
    }
  }
  if (final_status_.has_value()) FinishLocked(*final_status_);
}

std::optional<v1::GenerateResponse> GenerateReactor::TakeLocked() {
  StreamUpdate update = stream_->Take();
  if (update.empty()) return std::nullopt;
  std::optional<v1::GenerateResponse> chunk;
  if (v1::GenerateResponse message; FillChunk(update, message.mutable_chunk())) {
    chunk = std::move(message);
    if (!update.token_ids.empty()) {
      observer_->OnTokensSent(static_cast<int32_t>(update.token_ids.size()));
    }
  }
  if (!update.ends_stream()) return chunk;
  stream_ended_ = true;
  if (!update.status.ok()) {
    final_status_ = update.status;
    observer_->OnFailed(update.status.code());
    LogFailure(stream_->id(), update.status);
    return chunk;
  }
  const Completion& completion = *update.completion;
  if (completion.finish_reason == FinishReason::kDeadline) {
    final_status_ = absl::DeadlineExceededError(
        absl::StrCat("deadline: the call's deadline passed after ", completion.completion_tokens,
                     " generated tokens"));
    observer_->OnFailed(absl::StatusCode::kDeadlineExceeded);
    LogFailure(stream_->id(), *final_status_);
    return chunk;
  }
  final_status_ = absl::OkStatus();
  observer_->OnCompleted(completion);
  LogEvent("request_finished",
           {{"request_id", stream_->id()},
            {"finish_reason", std::string(FinishReasonName(completion.finish_reason))},
            {"prompt_tokens", int64_t{completion.prompt_tokens}},
            {"completion_tokens", int64_t{completion.completion_tokens}},
            {"cached_tokens", int64_t{completion.cached_tokens}},
            {"ttft_seconds", completion.time_to_first_token_seconds},
            {"e2e_seconds", completion.e2e_seconds}});
  v1::GenerateResponse complete;
  FillComplete(completion, complete.mutable_complete());
  if (!chunk.has_value()) return complete;
  pending_complete_ = std::move(complete);
  return chunk;
}

void GenerateReactor::WriteLocked(v1::GenerateResponse response) {
  if (!sent_first_ || response.has_complete()) response.set_request_id(stream_->id());
  sent_first_ = true;
  response_ = std::move(response);
  write_in_flight_ = true;
  write_started_ = absl::Now();
  StartWrite(&response_);
}

void GenerateReactor::FinishLocked(const absl::Status& status) {
  finished_ = true;
  Finish(ToGrpcStatus(status));
}

std::optional<RequestId> GenerateReactor::AbandonLocked() {
  if (client_gone_) return std::nullopt;
  client_gone_ = true;
  std::optional<RequestId> abort;
  if (stream_ != nullptr && !stream_ended_) {
    // An id whose stream the engine has ended is free for reuse: aborting it could hit a
    // newer request with the same id.
    if (!stream_->ended()) abort = stream_->id();
    const bool expired = context_->deadline() <= std::chrono::system_clock::now();
    const absl::Status status =
        expired ? absl::DeadlineExceededError("deadline: the call's deadline passed")
                : absl::CancelledError("the client cancelled the call");
    observer_->OnFailed(status.code());
    LogFailure(stream_->id(), status);
  }
  if (!finished_ && !write_in_flight_) {
    FinishLocked(absl::CancelledError("the client cancelled the call"));
  }
  return abort;
}

void GenerateReactor::CancelIfStalled(absl::Time now) {
  {
    absl::MutexLock lock(&mu_);
    if (!write_in_flight_ || client_gone_ || stall_cancelled_ ||
        now - write_started_ < limits_.write_timeout) {
      return;
    }
    stall_cancelled_ = true;
    LogEvent("stalled_reader", {{"request_id", stream_ != nullptr ? stream_->id() : ""},
                                {"waited_seconds", absl::ToDoubleSeconds(now - write_started_)}});
  }
  // OnCancel follows on a gRPC thread and aborts the request.
  context_->TryCancel();
}

void GenerateReactor::OnWriteDone(bool ok) {
  std::optional<RequestId> abort;
  {
    absl::MutexLock lock(&mu_);
    write_in_flight_ = false;
    if (ok && !client_gone_) {
      PumpLocked();
      return;
    }
    // A failed write means the client is gone; after a cancel, only the Finish is left.
    abort = AbandonLocked();
    if (!finished_) FinishLocked(absl::CancelledError("the client cancelled the call"));
  }
  // Outside the lock: an engine may end the stream from Abort, which wakes this reactor.
  if (abort.has_value()) engine_->Abort(*abort);
}

void GenerateReactor::OnCancel() {
  std::optional<RequestId> abort;
  {
    absl::MutexLock lock(&mu_);
    abort = AbandonLocked();
  }
  if (abort.has_value()) engine_->Abort(*abort);
}

void GenerateReactor::OnDone() {
  std::shared_ptr<RequestStream> stream;
  {
    absl::MutexLock lock(&mu_);
    stream = stream_;
  }
  // Waits for a running callback and keeps the engine from calling into a deleted reactor;
  // then no wake-up is queued or running for it.
  if (stream != nullptr) stream->SetReadyCallback(nullptr);
  wakes_->Forget(this);
  on_done_(this);
  delete this;
}

}  // namespace mlaserve
