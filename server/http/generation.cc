#include "server/http/generation.h"

#include <random>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "server/common/log.h"

namespace mlaserve {
namespace {

using json = nlohmann::json;

std::string NewResponseId(OpenAiEndpoint endpoint) {
  thread_local std::mt19937_64 random(std::random_device{}());
  return absl::StrFormat(
      "%s-%016x", endpoint == OpenAiEndpoint::kChatCompletions ? "chatcmpl" : "cmpl", random());
}

}  // namespace

absl::StatusOr<std::unique_ptr<Generation>> Generation::Start(OpenAiRequest request,
                                                              std::shared_ptr<ServingEngine> engine,
                                                              RequestObserver* observer,
                                                              std::function<void()> wake) {
  OpenAiResponseHeader header{.endpoint = request.endpoint,
                              .id = NewResponseId(request.endpoint),
                              .created = absl::ToUnixSeconds(absl::Now()),
                              .model = request.model,
                              .tokenizer = engine->tokenizer()};
  std::unique_ptr<Generation> generation(
      new Generation(std::move(request), std::move(engine), observer, std::move(header)));
  Generation& g = *generation;
  const absl::Time arrival = g.engine_->Now();
  for (size_t i = 0; i < g.request_.choices.size(); ++i) {
    Request choice = g.request_.choices[i];
    choice.id = absl::StrCat(g.header_.id, "-", i);
    choice.arrival_time = arrival;
    const auto num_prompt_tokens = static_cast<int32_t>(choice.prompt_token_ids.size());
    absl::StatusOr<std::shared_ptr<RequestStream>> stream = g.engine_->Submit(std::move(choice));
    if (!stream.ok()) {
      observer->OnFailed(stream.status().code());
      return stream.status();  // the destructor aborts the choices already submitted
    }
    observer->OnAdmitted(num_prompt_tokens);
    g.choices_.push_back({.stream = *stream});
  }
  // Only after every submission: a refused choice must not leave callbacks behind.
  for (ChoiceState& choice : g.choices_) choice.stream->SetReadyCallback(wake);
  return generation;
}

Generation::Generation(OpenAiRequest request, std::shared_ptr<ServingEngine> engine,
                       RequestObserver* observer, OpenAiResponseHeader header)
    : request_(std::move(request)),
      engine_(std::move(engine)),
      observer_(observer),
      header_(std::move(header)) {}

Generation::~Generation() {
  for (ChoiceState& choice : choices_) {
    // Waits for a running callback: nothing calls `wake` after this.
    choice.stream->SetReadyCallback(nullptr);
    if (choice.ended) continue;
    // The client went away (or the server stopped) before the end: free the KV blocks now.
    observer_->OnFailed(absl::StatusCode::kCancelled);
    LogEvent("request_failed", {{"request_id", choice.stream->id()},
                                {"code", std::string("cancelled")},
                                {"message", std::string("the HTTP client went away")}});
    if (!choice.stream->ended()) engine_->Abort(choice.stream->id());
  }
}

void Generation::TakeChoice(int index, std::string* events) {
  ChoiceState& c = choices_[index];
  StreamUpdate update = c.stream->Take();
  if (update.empty()) return;
  if (!update.token_ids.empty()) {
    observer_->OnTokensSent(static_cast<int32_t>(update.token_ids.size()));
  }
  c.output.text += update.text;
  c.output.logprobs.insert(c.output.logprobs.end(), update.logprobs.begin(), update.logprobs.end());
  if (events != nullptr) {
    const bool chat = request_.endpoint == OpenAiEndpoint::kChatCompletions;
    if (chat && !c.role_sent) {
      c.role_sent = true;
      json delta = {{"index", index},
                    {"delta", {{"role", "assistant"}, {"content", ""}}},
                    {"logprobs", nullptr},
                    {"finish_reason", nullptr}};
      events->append(
          SseEvent(Chunk(header_, json::array({std::move(delta)}), request_.include_usage)));
    }
    if (!c.output.text.empty() || !c.output.logprobs.empty()) {
      json choice = Choice(header_, index, c.output, c.text_offset, /*delta=*/true, nullptr);
      events->append(
          SseEvent(Chunk(header_, json::array({std::move(choice)}), request_.include_usage)));
      c.text_offset += static_cast<int64_t>(c.output.text.size());
      c.output = {};
    }
  }
  if (!update.ends_stream()) return;
  c.ended = true;
  if (!update.status.ok()) {
    observer_->OnFailed(update.status.code());
    if (error_.ok()) error_ = update.status;
    return;
  }
  c.completion = update.completion;
  observer_->OnCompleted(*update.completion);
  LogEvent("request_finished",
           {{"request_id", c.stream->id()},
            {"finish_reason", std::string(FinishReasonName(c.completion->finish_reason))},
            {"prompt_tokens", int64_t{c.completion->prompt_tokens}},
            {"completion_tokens", int64_t{c.completion->completion_tokens}},
            {"e2e_seconds", c.completion->e2e_seconds}});
  if (events != nullptr) {
    json finish = Choice(header_, index, {}, c.text_offset, /*delta=*/true,
                         OpenAiFinishReason(c.completion->finish_reason));
    events->append(
        SseEvent(Chunk(header_, json::array({std::move(finish)}), request_.include_usage)));
  }
}

void Generation::AbortLive() {
  for (ChoiceState& c : choices_) {
    if (!c.ended && !c.stream->ended()) engine_->Abort(c.stream->id());
  }
}

json Generation::UsageJson() const {
  int64_t prompt = 0, completion = 0;
  for (size_t i = 0; i < choices_.size(); ++i) {
    if (!choices_[i].completion.has_value()) continue;
    // n samples of one prompt count its tokens once.
    if (i % request_.n == 0) prompt += choices_[i].completion->prompt_tokens;
    completion += choices_[i].completion->completion_tokens;
  }
  return Usage(prompt, completion);
}

std::string Generation::TakeEvents() {
  std::string events;
  if (done_) return events;
  bool all_ended = true;
  for (size_t i = 0; i < choices_.size(); ++i) {
    if (!choices_[i].ended) TakeChoice(static_cast<int>(i), &events);
    all_ended = all_ended && choices_[i].ended;
  }
  if (!error_.ok() && !all_ended) {
    // The others end with abort; their final chunks follow when the engine has ended them.
    AbortLive();
    return events;
  }
  if (!all_ended) return events;
  done_ = true;
  if (!error_.ok()) events.append(SseEvent(ErrorBody(error_)));
  if (request_.include_usage && error_.ok()) {
    events.append(SseEvent(Chunk(header_, json::array(), true, UsageJson())));
  }
  events.append(kSseDone);
  return events;
}

std::optional<absl::StatusOr<json>> Generation::TakeResponse() {
  if (done_) return std::nullopt;
  bool all_ended = true;
  for (size_t i = 0; i < choices_.size(); ++i) {
    if (!choices_[i].ended) TakeChoice(static_cast<int>(i), nullptr);
    all_ended = all_ended && choices_[i].ended;
  }
  if (!error_.ok() && !all_ended) AbortLive();
  if (!all_ended) return std::nullopt;
  done_ = true;
  if (!error_.ok()) return absl::StatusOr<json>(error_);
  json choices = json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const ChoiceState& c = choices_[i];
    choices.push_back(Choice(header_, static_cast<int>(i), c.output, 0, /*delta=*/false,
                             OpenAiFinishReason(c.completion->finish_reason)));
  }
  return absl::StatusOr<json>(Response(header_, std::move(choices), UsageJson()));
}

}  // namespace mlaserve
