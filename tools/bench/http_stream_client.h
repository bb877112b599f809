// One keep-alive HTTP/1.1 connection of mlaserve-bench to the OpenAI API (Boost.Beast,
// blocking): POST /v1/completions with "stream": true, the SSE events timed as they arrive.
// Each event's text is one character per token on the synthetic server
// (tools/bench/synthetic_server.cc), which is how tokens are counted.
#ifndef MLASERVE_TOOLS_BENCH_HTTP_STREAM_CLIENT_H_
#define MLASERVE_TOOLS_BENCH_HTTP_STREAM_CLIENT_H_

#include <memory>
#include <string>

#include "mlaserve/v1/inference.pb.h"
#include "tools/bench/bench_result.h"

namespace mlaserve::bench {

class HttpStreamClient {
 public:
  // `target` is HOST:PORT of the HTTP API.
  explicit HttpStreamClient(std::string target);
  ~HttpStreamClient();

  // Streams the completion of `request` (token-id prompt, sampling, max_tokens, ignore_eos);
  // reconnects first when the previous request left the connection unusable.
  RequestResult Run(const v1::GenerateRequest& request);

 private:
  struct Connection;
  const std::string target_;
  std::unique_ptr<Connection> connection_;
};

}  // namespace mlaserve::bench

#endif  // MLASERVE_TOOLS_BENCH_HTTP_STREAM_CLIENT_H_
