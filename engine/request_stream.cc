#include "engine/request_stream.h"

#include <utility>

#include "kernels/check.h"

namespace mlaserve {

StreamUpdate RequestStream::Take() {
  absl::MutexLock lock(&mu_);
  return std::exchange(pending_, StreamUpdate());
}

StreamUpdate RequestStream::WaitAndTake(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  const auto ready = [this]()
                         ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !pending_.empty() || ended_; };
  mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  return std::exchange(pending_, StreamUpdate());
}

void RequestStream::SetReadyCallback(std::function<void()> callback) {
  absl::MutexLock callback_lock(&callback_mu_);
  callback_ = std::move(callback);
  bool pending = false;
  {
    absl::MutexLock lock(&mu_);
    pending = !pending_.empty();
  }
  if (pending && callback_) callback_();
}

bool RequestStream::ended() const {
  absl::MutexLock lock(&mu_);
  return ended_;
}

void RequestStream::Push(std::vector<int32_t> token_ids, std::string text,
                         std::vector<TokenChoice> logprobs) {
  Append(std::move(token_ids), std::move(text), std::move(logprobs), std::nullopt,
         absl::OkStatus());
}

void RequestStream::Finish(std::vector<int32_t> token_ids, std::string text,
                           std::vector<TokenChoice> logprobs, Completion completion) {
  Append(std::move(token_ids), std::move(text), std::move(logprobs), std::move(completion),
         absl::OkStatus());
}

void RequestStream::Fail(absl::Status status) {
  MLASERVE_CHECK(!status.ok());
  Append({}, {}, {}, std::nullopt, std::move(status));
}

void RequestStream::Append(std::vector<int32_t> token_ids, std::string text,
                           std::vector<TokenChoice> logprobs, std::optional<Completion> completion,
                           absl::Status status) {
  absl::MutexLock callback_lock(&callback_mu_);
  {
    absl::MutexLock lock(&mu_);
    MLASERVE_CHECK_MSG(!ended_, "output pushed to an ended stream");
    pending_.token_ids.insert(pending_.token_ids.end(), token_ids.begin(), token_ids.end());
    pending_.text += text;
    for (TokenChoice& choice : logprobs) pending_.logprobs.push_back(std::move(choice));
    pending_.completion = std::move(completion);
    pending_.status = std::move(status);
    ended_ = pending_.ends_stream();
  }
  if (callback_) callback_();
}

}  // namespace mlaserve
