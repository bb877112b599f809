// Generation: one OpenAI completion request in flight. It submits the engine request of every
// choice and turns their RequestStreams into the answer: Server-Sent Events for a streamed
// request (a chat role delta first, content deltas, a finish chunk per choice, the usage chunk
// with include_usage, then [DONE]), or one response object when every choice has ended.
//
// Every way a Generation ends frees the KV blocks of its requests: ended streams are already
// released by the engine, and destroying a Generation whose streams are live (the client went
// away, the server stopped) aborts them in the engine at once.
//
// Thread-safety: `wake` runs on the engine thread (RequestStream ready callbacks) and must only
// schedule a call of TakeEvents/TakeResponse elsewhere; every other method must be called from
// one thread at a time (the HTTP connection's strand).
#ifndef MLASERVE_SERVER_HTTP_GENERATION_H_
#define MLASERVE_SERVER_HTTP_GENERATION_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/request_stream.h"
#include "nlohmann/json.hpp"
#include "server/common/serving_engine.h"
#include "server/http/openai_request.h"
#include "server/http/openai_response.h"
#include "server/metrics/request_observer.h"

namespace mlaserve {

class Generation {
 public:
  // Submits every choice of `request` (the engine's ResourceExhausted or Unavailable is
  // returned, and choices already submitted are aborted). `observer` must outlive the
  // Generation. `wake` is called whenever output is pending, possibly concurrently with itself.
  static absl::StatusOr<std::unique_ptr<Generation>> Start(OpenAiRequest request,
                                                           std::shared_ptr<ServingEngine> engine,
                                                           RequestObserver* observer,
                                                           std::function<void()> wake);
  // Stops the wake-ups; aborts the requests whose streams are still live.
  ~Generation();

  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  bool stream() const { return request_.stream; }
  // Whether every choice has ended (and, streaming, [DONE] was handed out).
  bool done() const { return done_; }

  // Streaming: the SSE text of everything pending (possibly empty); the last non-empty text
  // ends with "data: [DONE]\n\n".
  std::string TakeEvents();
  // Not streaming: takes what is pending; once done(), the response object or the error that
  // ended a choice. Before done(), an empty optional.
  std::optional<absl::StatusOr<nlohmann::json>> TakeResponse();

 private:
  struct ChoiceState {
    std::shared_ptr<RequestStream> stream;
    ChoiceOutput output;      // the whole output (not streaming) or the pending delta
    int64_t text_offset = 0;  // text already streamed
    bool role_sent = false;   // chat: the assistant role delta went out
    bool ended = false;       // the terminal update was taken
    std::optional<Completion> completion;
  };

  Generation(OpenAiRequest request, std::shared_ptr<ServingEngine> engine,
             RequestObserver* observer, OpenAiResponseHeader header);
  // Takes choice `index`'s pending update into its state; appends SSE events when streaming.
  void TakeChoice(int index, std::string* events);
  // Ends every live choice (an engine error ended one of them).
  void AbortLive();
  nlohmann::json UsageJson() const;

  const OpenAiRequest request_;
  const std::shared_ptr<ServingEngine> engine_;
  RequestObserver* const observer_;
  const OpenAiResponseHeader header_;
  std::vector<ChoiceState> choices_;
  absl::Status error_;  // the first engine error
  bool done_ = false;
};

}  // namespace mlaserve

#endif  // MLASERVE_SERVER_HTTP_GENERATION_H_
