// ServingEngine: what the gRPC front end needs from an engine. The server depends on this
// interface rather than on Engine so that tests can drive every path (stalls, failures,
// exact update timing) with a scripted engine; EngineServingEngine adapts the real one.
//
// Thread-safety: every method may be called from any thread (gRPC threads, the watchdog)
// except Drain, which must not be called from a RequestStream callback.
#ifndef MLASERVE_SERVER_COMMON_SERVING_ENGINE_H_
#define MLASERVE_SERVER_COMMON_SERVING_ENGINE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/engine.h"
#include "engine/request.h"
#include "engine/request_stream.h"
#include "engine/tokenizer/tokenizer.h"

namespace mlaserve {

// What GetServerInfo and GetModelInfo report beyond the engine's own stats and info.
struct ServingDescription {
  std::string backend_name;                // "cpu" or "cuda"
  std::string activation_dtype = "float32";  // Backend::activation_dtype, as --dtype names it
  std::string kv_cache_dtype = "float32";    // the cached latents' dtype (--kv_cache_dtype)
  std::string model_name;                  // as clients see it
  std::vector<int32_t> graph_batch_sizes;  // decode buckets captured as graphs
};

class ServingEngine {
 public:
  virtual ~ServingEngine() = default;

  // Engine::Submit: the request is already validated; the engine only refuses what depends on
  // its state (AlreadyExists, ResourceExhausted, Unavailable).
  virtual absl::StatusOr<std::shared_ptr<RequestStream>> Submit(Request request) = 0;
  // Engine::Abort: whether the id was live.
  virtual bool Abort(const RequestId& id) = 0;
  // Engine::Drain: stop admitting, wait up to `timeout`, abort the rest; returns when every
  // stream has ended.
  virtual void Drain(absl::Duration timeout) = 0;
  virtual EngineStats stats() const = 0;
  virtual const EngineInfo& info() const = 0;
  // The clock Request::deadline and EngineStats::last_step_time are measured with.
  virtual absl::Time Now() const = 0;
  // Null when the model directory has no tokenizer: text prompts, Tokenize and Detokenize are
  // then refused.
  virtual const Tokenizer* tokenizer() const = 0;
  virtual const ServingDescription& description() const = 0;
};

// Serves `engine`. `tokenizer` is the one the engine was created with (or null).
std::unique_ptr<ServingEngine> MakeServingEngine(std::unique_ptr<Engine> engine,
                                                 std::shared_ptr<const Tokenizer> tokenizer,
                                                 ServingDescription description);

}  // namespace mlaserve

#endif  // MLASERVE_SERVER_COMMON_SERVING_ENGINE_H_
