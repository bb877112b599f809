// mlaserve-bench: load generator for a running `mlaserve serve`. Sends random token-id prompts
// of a fixed length, either closed-loop at a fixed concurrency or as Poisson arrivals at a
// request rate, and reports throughput and TTFT / inter-token / end-to-end latency
// percentiles as a table on stdout and, with --json_output, as JSON. A progress bar goes to
// stderr when it is a terminal.
//
//   mlaserve-bench --target=127.0.0.1:50051 --num_prompts=200 --concurrency=16
//       --prompt_tokens=128 --output_tokens=128 [--request_rate=4] [--json_output=out.json]
//   mlaserve-bench --rpc=get_server_info --num_prompts=20000 --concurrency=1   (unary round trips)
//   mlaserve-bench --protocol=grpc,http --http_target=127.0.0.1:8000 ...   (the same load over
//       gRPC, then as OpenAI SSE streams over HTTP, against mlaserve-synthetic-server)
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <semaphore>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "mlaserve/v1/inference.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "tools/bench/bench_result.h"
#include "tools/bench/http_stream_client.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "address of the mlaserve gRPC port");
ABSL_FLAG(int, num_prompts, 200, "requests to send");
ABSL_FLAG(int, concurrency, 16,
          "requests in flight at once; with --request_rate a cap on them (0 = no cap)");
ABSL_FLAG(double, request_rate, 0, "Poisson arrivals per second; 0 = closed loop");
ABSL_FLAG(int, prompt_tokens, 128, "prompt length in tokens (random ids)");
ABSL_FLAG(int, output_tokens, 128, "tokens generated per request (eos ignored)");
ABSL_FLAG(double, temperature, 0, "sampling temperature; 0 = greedy");
ABSL_FLAG(double, top_p, 1, "nucleus sampling cut, in (0, 1]; 1 = none");
ABSL_FLAG(uint64_t, seed, 1, "seed of the prompts and arrival times");
ABSL_FLAG(std::string, rpc, "generate",
          "generate (streams, the table above) | get_server_info (unary round-trip latency; "
          "--num_prompts calls from --concurrency threads)");
ABSL_FLAG(std::string, protocol, "grpc",
          "generate over grpc, http (POST /v1/completions with SSE at --http_target; tokens "
          "are counted as text characters, one per token on mlaserve-synthetic-server), or "
          "grpc,http: both in turn with the same requests, and the HTTP/gRPC throughput ratio");
ABSL_FLAG(std::string, http_target, "127.0.0.1:8000", "HOST:PORT of the OpenAI HTTP API");
ABSL_FLAG(std::string, json_output, "", "also write the results as JSON here ('-' = stdout)");

namespace {

namespace v1 = mlaserve::v1;
using mlaserve::bench::Clock;
using mlaserve::bench::RequestResult;
using mlaserve::bench::Seconds;
// Streams one request; each thread of the load has its own (a connection of its own).
using Runner = std::function<RequestResult(const v1::GenerateRequest&)>;

RequestResult RunOne(v1::Inference::Stub& stub, const v1::GenerateRequest& request) {
  RequestResult result;
  grpc::ClientContext context;
  const auto start = Clock::now();
  auto reader = stub.Generate(&context, request);
  v1::GenerateResponse response;
  auto previous = start;
  while (reader->Read(&response)) {
    mlaserve::bench::RecordChunk(response.chunk().token_ids_size(), start, Clock::now(),
                                 previous, result);
  }
  result.code = reader->Finish().error_code();
  result.e2e_s = Seconds(Clock::now() - start);
  return result;
}

struct Stats {
  double mean = 0, p50 = 0, p90 = 0, p99 = 0;
};

Stats Summarize(std::vector<double> values) {
  Stats s;
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  const auto at = [&](double q) {
    return values[std::min(values.size() - 1, static_cast<size_t>(q * values.size()))];
  };
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / values.size();
  s.p50 = at(0.50);
  s.p90 = at(0.90);
  s.p99 = at(0.99);
  return s;
}

// Collects results and draws the progress bar.
class Progress {
 public:
  Progress(int total, bool draw) : total_(total), draw_(draw) {}

  void Add(RequestResult result) {
    absl::MutexLock lock(&mu_);
    output_tokens_ += result.output_tokens;
    if (result.code != grpc::StatusCode::OK) ++failed_;
    results_.push_back(std::move(result));
    Draw();
  }
  std::vector<RequestResult> Results() {
    absl::MutexLock lock(&mu_);
    if (draw_) std::fprintf(stderr, "\n");
    return results_;
  }

 private:
  void Draw() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!draw_) return;
    constexpr int kWidth = 40;
    const int done = static_cast<int>(results_.size());
    const int filled = done * kWidth / std::max(total_, 1);
    const double elapsed = Seconds(Clock::now() - start_);
    std::fprintf(stderr, "\r[%s%s] %d/%d  failed %d  %.0f tok/s", std::string(filled, '#').c_str(),
                 std::string(kWidth - filled, '.').c_str(), done, total_, failed_,
                 elapsed > 0 ? output_tokens_ / elapsed : 0.0);
  }

  const int total_;
  const bool draw_;
  const Clock::time_point start_ = Clock::now();
  absl::Mutex mu_;
  std::vector<RequestResult> results_ ABSL_GUARDED_BY(mu_);
  int64_t output_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  int failed_ ABSL_GUARDED_BY(mu_) = 0;
};

std::vector<v1::GenerateRequest> MakeRequests(uint32_t vocab_size, std::mt19937_64& rng) {
  const int n = absl::GetFlag(FLAGS_num_prompts);
  std::uniform_int_distribution<uint32_t> token(0, vocab_size - 1);
  std::vector<v1::GenerateRequest> requests(static_cast<size_t>(n));
  for (v1::GenerateRequest& r : requests) {
    for (int i = 0; i < absl::GetFlag(FLAGS_prompt_tokens); ++i) {
      r.mutable_token_ids()->add_ids(token(rng));
    }
    r.mutable_sampling()->set_temperature(static_cast<float>(absl::GetFlag(FLAGS_temperature)));
    if (absl::GetFlag(FLAGS_top_p) != 1) {
      r.mutable_sampling()->set_top_p(static_cast<float>(absl::GetFlag(FLAGS_top_p)));
    }
    r.mutable_stopping()->set_max_tokens(static_cast<uint32_t>(absl::GetFlag(FLAGS_output_tokens)));
    r.mutable_stopping()->set_ignore_eos(true);
  }
  return requests;
}

// Sends every request; returns the wall time the run took.
double Run(const std::function<Runner()>& new_runner,
           const std::vector<v1::GenerateRequest>& requests, std::mt19937_64& rng,
           Progress& progress) {
  const int concurrency = absl::GetFlag(FLAGS_concurrency);
  const double rate = absl::GetFlag(FLAGS_request_rate);
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  if (rate <= 0) {
    std::atomic<size_t> next{0};
    for (int t = 0; t < std::max(concurrency, 1); ++t) {
      threads.emplace_back([&] {
        const Runner run = new_runner();
        for (size_t i = next++; i < requests.size(); i = next++) progress.Add(run(requests[i]));
      });
    }
  } else {
    std::counting_semaphore<> slots(concurrency > 0 ? concurrency : 1 << 30);
    std::exponential_distribution<double> gap(rate);
    auto arrival = Clock::now();
    for (const v1::GenerateRequest& request : requests) {
      std::this_thread::sleep_until(arrival);
      slots.acquire();
      threads.emplace_back([&new_runner, &request, &progress, &slots] {
        progress.Add(new_runner()(request));
        slots.release();
      });
      arrival +=
          std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap(rng)));
    }
  }
  for (std::thread& t : threads) t.join();
  return Seconds(Clock::now() - start);
}

nlohmann::ordered_json StatsJson(const Stats& s) {
  return {{"mean_ms", s.mean * 1e3},
          {"p50_ms", s.p50 * 1e3},
          {"p90_ms", s.p90 * 1e3},
          {"p99_ms", s.p99 * 1e3}};
}

void WriteJson(const nlohmann::ordered_json& json, const std::string& path) {
  if (path == "-") {
    std::cout << json.dump(2) << "\n";
  } else {
    std::ofstream(path) << json.dump(2) << "\n";
  }
}

// Unary GetServerInfo round trips, closed loop; prints and returns their latency.
int RunUnary(v1::Inference::Stub& stub) {
  const int calls = absl::GetFlag(FLAGS_num_prompts);
  const int threads_n = std::max(absl::GetFlag(FLAGS_concurrency), 1);
  std::atomic<int> next{0};
  std::atomic<int> failed{0};
  absl::Mutex mu;
  std::vector<double> latencies;
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < threads_n; ++t) {
    threads.emplace_back([&] {
      std::vector<double> mine;
      for (int i = next++; i < calls; i = next++) {
        grpc::ClientContext context;
        v1::GetServerInfoResponse response;
        const auto begin = Clock::now();
        const grpc::Status status = stub.GetServerInfo(&context, {}, &response);
        mine.push_back(Seconds(Clock::now() - begin));
        if (!status.ok()) ++failed;
      }
      absl::MutexLock lock(&mu);
      latencies.insert(latencies.end(), mine.begin(), mine.end());
    });
  }
  for (std::thread& t : threads) t.join();
  const double duration_s = Seconds(Clock::now() - start);
  const Stats s = Summarize(latencies);
  std::printf("%-28s %12d\n%-28s %12d\n%-28s %12.2f\n%-28s %12.1f\n", "GetServerInfo calls", calls,
              "failed calls", failed.load(), "duration (s)", duration_s, "calls/s",
              calls / duration_s);
  std::printf("\n%-10s %10s %10s %10s %10s\n%-10s %10.1f %10.1f %10.1f %10.1f\n", "latency",
              "mean us", "p50 us", "p90 us", "p99 us", "round trip", s.mean * 1e6, s.p50 * 1e6,
              s.p90 * 1e6, s.p99 * 1e6);
  const std::string path = absl::GetFlag(FLAGS_json_output);
  if (!path.empty()) {
    const nlohmann::ordered_json json = {{"target", absl::GetFlag(FLAGS_target)},
                                         {"rpc", "get_server_info"},
                                         {"calls", calls},
                                         {"concurrency", threads_n},
                                         {"failed", failed.load()},
                                         {"duration_s", duration_s},
                                         {"calls_per_s", calls / duration_s},
                                         {"round_trip", StatsJson(s)}};
    WriteJson(json, path);
  }
  return failed.load() == 0 ? 0 : 1;
}


// Prints the table of one protocol's run and returns it as JSON.
nlohmann::ordered_json Report(const std::string& protocol,
                              const std::vector<RequestResult>& results, double duration_s) {
  std::vector<double> ttft, itl, e2e;
  std::map<std::string, int> failures;
  int64_t output_tokens = 0;
  int64_t chunks = 0;
  int completed = 0;
  // Aggregate decode rate as llama.cpp's parallel benchmark counts it: the tokens after each
  // stream's first, over the span from the earliest first token to the latest last one.
  int64_t decode_tokens = 0;
  Clock::time_point decode_begin = Clock::time_point::max(), decode_end = Clock::time_point::min();
  for (const RequestResult& r : results) {
    if (r.code != grpc::StatusCode::OK) {
      ++failures[std::to_string(static_cast<int>(r.code))];
      continue;
    }
    ++completed;
    output_tokens += r.output_tokens;
    if (r.output_tokens > 0) {
      decode_tokens += r.output_tokens - r.first_chunk_tokens;
      decode_begin = std::min(decode_begin, r.first_token);
      decode_end = std::max(decode_end, r.last_token);
    }
    chunks += r.chunks;
    ttft.push_back(r.ttft_s);
    e2e.push_back(r.e2e_s);
    itl.insert(itl.end(), r.itl_s.begin(), r.itl_s.end());
  }
  const int64_t input_tokens = int64_t{completed} * absl::GetFlag(FLAGS_prompt_tokens);
  const double decode_span_s = decode_end > decode_begin ? Seconds(decode_end - decode_begin) : 0;
  const double decode_tokens_per_s = decode_span_s > 0 ? decode_tokens / decode_span_s : 0;
  // The same once every stream decodes: tokens that arrived after the latest first token, over
  // the span from it to the latest last one (the steady batched rate; llama.cpp's parallel
  // benchmark prefills all its prompts in one batch, so its two figures coincide). A chunk of n
  // tokens counts at its arrival (itl_s spreads its gap over its n entries).
  Clock::time_point all_begin = Clock::time_point::min();
  for (const RequestResult& r : results) {
    if (r.code == grpc::StatusCode::OK && r.output_tokens > 0) {
      all_begin = std::max(all_begin, r.first_token);
    }
  }
  int64_t all_tokens = 0;
  for (const RequestResult& r : results) {
    if (r.code != grpc::StatusCode::OK || r.output_tokens == 0) continue;
    double t = Seconds(r.first_token - all_begin);
    for (double gap : r.itl_s) {
      t += gap;
      all_tokens += t > 0 ? 1 : 0;
    }
  }
  const double all_span_s = decode_end > all_begin ? Seconds(decode_end - all_begin) : 0;
  const double all_streams_tokens_per_s = all_span_s > 0 ? all_tokens / all_span_s : 0;
  const Stats t = Summarize(ttft), i = Summarize(itl), e = Summarize(e2e);
  std::printf("%s\n", protocol.c_str());
  std::printf("%-28s %12d\n%-28s %12d\n%-28s %12.2f\n", "completed requests", completed,
              "failed requests", static_cast<int>(results.size()) - completed, "duration (s)",
              duration_s);
  std::printf("%-28s %12.2f\n%-28s %12.1f\n%-28s %12.1f\n", "requests/s", completed / duration_s,
              "input tokens/s", input_tokens / duration_s, "output tokens/s",
              output_tokens / duration_s);
  std::printf("%-28s %12.1f\n", "decode tokens/s (aggregate)", decode_tokens_per_s);
  std::printf("%-28s %12.1f\n", "decode tok/s (all streams)", all_streams_tokens_per_s);
  std::printf("%-28s %12.1f\n%-28s %12.2f\n", "output chunks/s", chunks / duration_s,
              "tokens per chunk", chunks > 0 ? static_cast<double>(output_tokens) / chunks : 0.0);
  std::printf("\n%-10s %10s %10s %10s %10s\n", "latency", "mean ms", "p50 ms", "p90 ms", "p99 ms");
  for (const auto& [name, s] : {std::pair{"TTFT", t}, {"ITL", i}, {"E2E", e}}) {
    std::printf("%-10s %10.2f %10.2f %10.2f %10.2f\n", name, s.mean * 1e3, s.p50 * 1e3, s.p90 * 1e3,
                s.p99 * 1e3);
  }
  return {{"protocol", protocol},
                                 {"target", protocol == "http" ? absl::GetFlag(FLAGS_http_target)
                                                               : absl::GetFlag(FLAGS_target)},
                                 {"num_prompts", absl::GetFlag(FLAGS_num_prompts)},
                                 {"concurrency", absl::GetFlag(FLAGS_concurrency)},
                                 {"request_rate", absl::GetFlag(FLAGS_request_rate)},
                                 {"prompt_tokens", absl::GetFlag(FLAGS_prompt_tokens)},
                                 {"output_tokens", absl::GetFlag(FLAGS_output_tokens)},
                                 {"completed", completed},
                                 {"failed_by_grpc_code", failures},
                                 {"duration_s", duration_s},
                                 {"requests_per_s", completed / duration_s},
                                 {"input_tokens_per_s", input_tokens / duration_s},
                                 {"output_tokens_per_s", output_tokens / duration_s},
                                 {"output_chunks_per_s", chunks / duration_s},
                                 {"decode_tokens_per_s", decode_tokens_per_s},
                                 {"decode_tokens_per_s_all_streams", all_streams_tokens_per_s},
                                 {"ttft", StatsJson(t)},
                                 {"itl", StatsJson(i)},
                                 {"e2e", StatsJson(e)}};
}

int Main() {
  const std::string flag_error =
      absl::GetFlag(FLAGS_num_prompts) <= 0     ? "--num_prompts must be positive"
      : absl::GetFlag(FLAGS_prompt_tokens) <= 0 ? "--prompt_tokens must be positive"
      : absl::GetFlag(FLAGS_output_tokens) <= 0 ? "--output_tokens must be positive"
      : absl::GetFlag(FLAGS_concurrency) < 0    ? "--concurrency must not be negative"
      : absl::GetFlag(FLAGS_request_rate) < 0   ? "--request_rate must not be negative"
      : absl::GetFlag(FLAGS_rpc) != "generate" && absl::GetFlag(FLAGS_rpc) != "get_server_info"
          ? "--rpc must be generate or get_server_info"
          : "";
  if (!flag_error.empty()) {
    std::fprintf(stderr, "mlaserve-bench: %s\n", flag_error.c_str());
    return 2;
  }
  auto channel =
      grpc::CreateChannel(absl::GetFlag(FLAGS_target), grpc::InsecureChannelCredentials());
  auto stub = v1::Inference::NewStub(channel);
  if (absl::GetFlag(FLAGS_rpc) == "get_server_info") return RunUnary(*stub);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::GetModelInfoResponse model;
  if (grpc::Status s = stub->GetModelInfo(&context, {}, &model); !s.ok()) {
    std::fprintf(stderr, "mlaserve-bench: GetModelInfo on %s failed: %s\n",
                 absl::GetFlag(FLAGS_target).c_str(), s.error_message().c_str());
    return 1;
  }
  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));
  const std::vector<v1::GenerateRequest> requests = MakeRequests(model.vocab_size(), rng);
  nlohmann::ordered_json runs = nlohmann::ordered_json::array();
  for (const std::string protocol : {"grpc", "http"}) {
    if (absl::GetFlag(FLAGS_protocol).find(protocol) == std::string::npos) continue;
    const std::function<Runner()> new_runner = [&]() -> Runner {
      if (protocol == "grpc") {
        return [&stub](const v1::GenerateRequest& r) { return RunOne(*stub, r); };
      }
      auto client =
          std::make_shared<mlaserve::bench::HttpStreamClient>(absl::GetFlag(FLAGS_http_target));
      return [client](const v1::GenerateRequest& r) { return client->Run(r); };
    };
    Progress progress(static_cast<int>(requests.size()), isatty(STDERR_FILENO) != 0);
    const double duration_s = Run(new_runner, requests, rng, progress);
    if (!runs.empty()) std::printf("\n");
    runs.push_back(Report(protocol, progress.Results(), duration_s));
  }
  if (runs.size() == 2) {
    std::printf("\n%-28s %12.3f\n", "http/grpc output tokens/s",
                runs[1]["output_tokens_per_s"].get<double>() /
                    runs[0]["output_tokens_per_s"].get<double>());
  }
  const std::string path = absl::GetFlag(FLAGS_json_output);
  if (!path.empty()) WriteJson(runs.size() == 1 ? runs[0] : runs, path);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("load generator for mlaserve: mlaserve-bench --target=HOST:PORT");
  absl::ParseCommandLine(argc, argv);
  return Main();
}
