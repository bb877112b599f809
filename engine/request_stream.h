// RequestStream: the output of one submitted request, handed from the engine thread to whoever
// consumes it (a gRPC reactor, the generate command, a test).
//
// The engine pushes at most one update per step: the step's new token ids, their text and
// logprobs, and, last, a terminal state. The consumer takes everything pending at once (Take),
// so tokens produced while it was busy are coalesced into one update instead of queueing.
//
// Slow consumers: the engine never waits for a consumer. The pending buffer holds exactly what
// was produced and not yet taken, so it is bounded by the request's own output (max_tokens, or
// the context limit); a consumer that falls behind receives one larger update later.
//
// Terminal states. A stream ends exactly once, with either
//   - a Completion: finish_reason kStop (eos, a stop token id, or a stop string), kLength
//     (max_tokens or the context limit), kAbort (Engine::Abort or a drain timeout) or kDeadline
//     (Request::deadline passed first; the server maps it to DEADLINE_EXCEEDED), or
//   - a non-OK status: the engine failed (or the request could not be queued) and the stream
//     ended without completing; the server maps the status to the RPC's status.
// For every finish reason, completion.completion_tokens equals the number of token ids delivered
// through the stream, and the terminal update comes after all of them (a final update may carry
// text only: text held back while a stop string might be matching, or an incomplete UTF-8
// character).
//
// Thread-safety: every method is thread-safe. Push/Finish/Fail are the engine's side; the rest
// is the consumer's.
#ifndef MLASERVE_ENGINE_REQUEST_STREAM_H_
#define MLASERVE_ENGINE_REQUEST_STREAM_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/sequence.h"

namespace mlaserve {

// Final accounting of a request (api.md: Complete).
struct Completion {
  FinishReason finish_reason = FinishReason::kNone;  // kStop, kLength, kAbort or kDeadline
  std::string matched_stop;                          // the stop string that ended it, or empty
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;           // == token ids delivered through the stream
  int32_t cached_tokens = 0;               // prompt tokens served from the prefix cache
  double queue_seconds = 0;                // submitted -> first scheduled
  double time_to_first_token_seconds = 0;  // submitted -> first token (0 if none)
  double e2e_seconds = 0;                  // submitted -> finished
};

// What a Take() hands over: everything pushed since the previous Take().
struct StreamUpdate {
  std::vector<int32_t> token_ids;  // new tokens only
  std::string text;                // new text only; valid UTF-8, never a split code point
  // One per token id when the request asked for logprobs (return_logprobs or top_logprobs > 0),
  // else empty. Raw log-softmax over the full vocabulary.
  std::vector<TokenChoice> logprobs;
  // Set in the update that ends the stream normally.
  std::optional<Completion> completion;
  // Non-OK in the update that ends the stream with an error.
  absl::Status status;

  // Whether this update ends the stream (it is the last non-empty one).
  bool ends_stream() const { return completion.has_value() || !status.ok(); }
  bool empty() const {
    return token_ids.empty() && text.empty() && !completion.has_value() && status.ok();
  }
};

class RequestStream {
 public:
  explicit RequestStream(RequestId id) : id_(std::move(id)) {}

  RequestStream(const RequestStream&) = delete;
  RequestStream& operator=(const RequestStream&) = delete;

  // The request's id (assigned by the engine when the request had none).
  const RequestId& id() const { return id_; }

  // --- Consumer side ---

  // Returns everything pending and leaves nothing pending; an empty update when there is none.
  // Never blocks on the engine. After the update with ends_stream() it always returns empty.
  StreamUpdate Take();
  // Blocks until something is pending (or `timeout` passes), then Take()s. An empty update
  // means the timeout passed, or the stream already ended and its end was taken.
  StreamUpdate WaitAndTake(absl::Duration timeout = absl::InfiniteDuration());
  // Replaces the callback invoked when output becomes pending: after every Push/Finish/Fail, on
  // the engine thread. It may call Take(); it must be cheap, must not block and must not call
  // SetReadyCallback. If something is already pending when it is set, it is invoked once right
  // away on the calling thread, so no wake-up is lost. When SetReadyCallback returns, the
  // previous callback is not running and will not run again, so setting an empty function
  // before the consumer goes away makes that safe.
  void SetReadyCallback(std::function<void()> callback);
  // Whether the terminal state was pushed (taken or not).
  bool ended() const;

  // --- Engine side ---

  // Appends new output (token ids, text, logprobs). REQUIRES: !ended().
  void Push(std::vector<int32_t> token_ids, std::string text, std::vector<TokenChoice> logprobs);
  // Appends the final output, if any, and the completion, in one update. REQUIRES: !ended().
  void Finish(std::vector<int32_t> token_ids, std::string text, std::vector<TokenChoice> logprobs,
              Completion completion);
  // Ends the stream with an error; output pending but not taken is still delivered before it.
  // REQUIRES: !ended() and !status.ok().
  void Fail(absl::Status status);

 private:
  // Appends under mu_, then runs the callback under callback_mu_ only.
  void Append(std::vector<int32_t> token_ids, std::string text, std::vector<TokenChoice> logprobs,
              std::optional<Completion> completion, absl::Status status);

  const RequestId id_;
  // Held while the callback runs, so that replacing it waits for a running invocation; never
  // acquired while holding mu_.
  absl::Mutex callback_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::function<void()> callback_ ABSL_GUARDED_BY(callback_mu_);
  mutable absl::Mutex mu_;
  StreamUpdate pending_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace mlaserve

#endif  // MLASERVE_ENGINE_REQUEST_STREAM_H_
