// What mlaserve-bench records of one streamed request, whichever protocol carried it.
#ifndef MLASERVE_TOOLS_BENCH_BENCH_RESULT_H_
#define MLASERVE_TOOLS_BENCH_BENCH_RESULT_H_

#include <chrono>
#include <vector>

#include "grpcpp/grpcpp.h"

namespace mlaserve::bench {

using Clock = std::chrono::steady_clock;

inline double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

struct RequestResult {
  grpc::StatusCode code = grpc::StatusCode::OK;  // HTTP statuses are mapped onto these
  int output_tokens = 0;
  int chunks = 0;  // messages (gRPC) or SSE events (HTTP) that carried tokens
  double ttft_s = 0;
  double e2e_s = 0;
  std::vector<double> itl_s;  // one entry per token after the first chunk
  int first_chunk_tokens = 0;
  Clock::time_point first_token, last_token;  // arrival of the first and the last chunk
};

// Records a message carrying `n` tokens that arrived at `now`; `previous` is the arrival of
// the one before (or the request's start).
inline void RecordChunk(int n, Clock::time_point start, Clock::time_point now,
                        Clock::time_point& previous, RequestResult& result) {
  if (n == 0) return;
  if (result.output_tokens == 0) {
    result.ttft_s = Seconds(now - start);
    result.first_token = now;
    result.first_chunk_tokens = n;
  } else {
    result.itl_s.insert(result.itl_s.end(), n, Seconds(now - previous) / n);
  }
  result.output_tokens += n;
  ++result.chunks;
  previous = now;
  result.last_token = now;
}

}  // namespace mlaserve::bench

#endif  // MLASERVE_TOOLS_BENCH_BENCH_RESULT_H_
