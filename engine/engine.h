// Engine: owns the engine thread, the only thread that touches the scheduler, the model runner
// and the backend. Other threads talk to it through Submit/Abort/Drain/stats; requests wait in
// a thread-safe inbox that the engine thread drains at the start of every step, and results
// come back through each request's RequestStream.
//
// One step: take new requests and aborts from the inbox -> Scheduler::Schedule -> run the model
// on the batch -> sample one token per sequence that completed its pending tokens -> apply
// token-level stop conditions (Scheduler::Postprocess) -> detokenize incrementally and match
// stop strings -> push each stream's new output.
//
// Determinism. Sampling is keyed by (seed, output position) (engine/sampler.h) and every
// request has a seed (its own, or one drawn at Submit), and each sequence samples from its own
// logits row, so a request's tokens depend only on its logits. Whether those logits depend on
// the rest of the batch is up to the backend's kernels (Backend::batch_invariant, reported as
// EngineInfo::deterministic).
//
// Thread-safety: public methods are thread-safe, except that Drain and the destructor must not
// be called from a RequestStream callback (they wait for the engine thread).
#ifndef MLASERVE_ENGINE_ENGINE_H_
#define MLASERVE_ENGINE_ENGINE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "engine/config.h"
#include "engine/engine_stats.h"
#include "engine/model_runner.h"
#include "engine/request.h"
#include "engine/request_stream.h"
#include "engine/scheduler.h"
#include "kernels/backend.h"

namespace mlaserve {

class Tokenizer;
class EngineCore;

struct EngineOptions {
  // Create() makes these consistent with the runner: kv_cache.block_size and num_blocks are the
  // model's KV cache (block 0 reserved), max_num_seqs, max_num_batched_tokens and max_model_len
  // are capped by what the runner's buffers were sized for, and empty eos_token_ids are taken
  // from the model config. `scheduler.clock` is ignored: the scheduler uses `clock` below.
  SchedulerOptions scheduler;
  // Monotonic time of every event (queued, scheduled, first token, finished) and the time
  // Request::deadline is compared against. Unset: absl::Now() at construction advanced by
  // std::chrono::steady_clock, so it never goes backwards.
  std::function<absl::Time()> clock;
  // Called on the engine thread after every step that ran the model (unset: nothing is called).
  // It delays the next step, so it must be cheap; it must not call into the engine.
  std::function<void(const StepObservation&)> on_step;
};

class Engine {
 public:
  // `backend` is the one `runner` was created on; the engine keeps it alive while the runner
  // exists. `tokenizer` may be null: then streams carry token ids only (empty text) and
  // requests with stop strings are refused. Starts the engine thread.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(std::unique_ptr<ModelRunner> runner,
                                                        std::unique_ptr<Backend> backend,
                                                        std::shared_ptr<const Tokenizer> tokenizer,
                                                        EngineOptions options);

  // Aborts whatever is still live (streams end with kAbort) and joins the engine thread.
  ~Engine();

  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request and returns its stream. Assigns an id when request.id is empty; sets
  // arrival_time to Now() unless the caller stamped it (with Now(), when the request arrived).
  // Errors name the api.md field at fault:
  //   InvalidArgument: empty `token_ids`, an id outside [0, vocab), a prompt of
  //     max_context_tokens or more, `max_tokens` < 1, prompt + `min_tokens` over the context,
  //     a `stop_token_ids` entry outside the vocab, `top_logprobs` over 20, `stop` strings
  //     without a tokenizer or with an empty one;
  //   AlreadyExists: a live request has this id;
  //   ResourceExhausted: max_num_waiting_seqs requests already wait;
  //   Unavailable: draining, stopped, or failed.
  absl::StatusOr<std::shared_ptr<RequestStream>> Submit(Request request);

  // Ends a live request: its stream ends with a kAbort completion (unless the request finished
  // on its own in the step running meanwhile) and its KV blocks are freed by the engine thread
  // before it runs another step. Returns whether the id was live; unknown and finished ids
  // return false.
  bool Abort(const RequestId& id);

  // Stops admitting (Submit -> Unavailable), lets live requests run until they end or `timeout`
  // passes, then aborts the rest. Returns once every stream has ended.
  void Drain(absl::Duration timeout);

  EngineStats stats() const;
  const EngineInfo& info() const { return info_; }
  // The engine's clock (EngineOptions::clock): deadlines are compared against it.
  absl::Time Now() const { return clock_(); }

 private:
  Engine(std::unique_ptr<Backend> backend, std::unique_ptr<ModelRunner> runner,
         std::shared_ptr<const Tokenizer> tokenizer, const SchedulerOptions& options,
         std::function<void(const StepObservation&)> on_step, EngineInfo info);

  // The engine thread: waits for work, feeds the inbox and aborts to the core, steps.
  void Loop();
  // Publishes the core's counters, then ends the streams the core finished with and forgets
  // their ids; engine thread. In this order, a consumer that sees its stream end also sees the
  // request's KV blocks free in stats().
  void PublishAndDeliver();
  // Ends every live request with UNAVAILABLE after a model error and refuses new ones.
  void Fail(const absl::Status& cause);

  const std::unique_ptr<Backend> backend_;  // declared first: outlives the core's runner
  const std::unique_ptr<EngineCore> core_;  // engine thread only (after construction)
  EngineInfo info_;                         // immutable after construction
  const std::function<absl::Time()> clock_;
  const int32_t max_num_waiting_seqs_;
  const bool has_tokenizer_;

  mutable absl::Mutex mu_;
  absl::CondVar ended_cv_;  // signalled whenever a live request ends
  std::deque<std::pair<Request, std::shared_ptr<RequestStream>>> inbox_ ABSL_GUARDED_BY(mu_);
  std::vector<RequestId> aborts_ ABSL_GUARDED_BY(mu_);
  // Every request submitted whose stream has not ended, inbox included. An entry may briefly
  // outlive its stream's end (the engine thread removes it right after); Submit treats such an
  // id as free.
  absl::flat_hash_map<RequestId, std::shared_ptr<RequestStream>> live_ ABSL_GUARDED_BY(mu_);
  // The core's counters as of the latest step; num_waiting also counts requests moved from
  // the inbox since then, so that the queue limit is never undercounted.
  EngineStats stats_ ABSL_GUARDED_BY(mu_);
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool failed_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::mt19937_64 seed_rng_ ABSL_GUARDED_BY(mu_);  // seeds of requests that bring none
  std::thread thread_;
};

}  // namespace mlaserve

#endif  // MLASERVE_ENGINE_ENGINE_H_
