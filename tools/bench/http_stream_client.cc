#include "tools/bench/http_stream_client.h"

#include <optional>
#include <string>
#include <utility>

#include "boost/asio/connect.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "nlohmann/json.hpp"

namespace mlaserve::bench {
namespace {

namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

grpc::StatusCode CodeOf(unsigned status) {
  switch (status) {
    case 200:
      return grpc::StatusCode::OK;
    case 400:
      return grpc::StatusCode::INVALID_ARGUMENT;
    case 429:
      return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case 503:
      return grpc::StatusCode::UNAVAILABLE;
    default:
      return grpc::StatusCode::INTERNAL;
  }
}

std::string Body(const v1::GenerateRequest& request) {
  nlohmann::json body = {{"prompt", request.token_ids().ids()},
                         {"max_tokens", request.stopping().max_tokens()},
                         {"ignore_eos", request.stopping().ignore_eos()},
                         {"temperature", request.sampling().temperature()},
                         {"stream", true}};
  if (request.sampling().has_top_p()) body["top_p"] = request.sampling().top_p();
  return body.dump();
}

}  // namespace

struct HttpStreamClient::Connection {
  net::io_context context;
  beast::tcp_stream stream{context};
  beast::flat_buffer buffer;
};

HttpStreamClient::HttpStreamClient(std::string target) : target_(std::move(target)) {}
HttpStreamClient::~HttpStreamClient() = default;

RequestResult HttpStreamClient::Run(const v1::GenerateRequest& request) {
  RequestResult result;
  const auto start = Clock::now();
  auto previous = start;
  const size_t colon = target_.rfind(':');
  const std::string host = target_.substr(0, colon), port = target_.substr(colon + 1);
  beast::error_code ec;
  if (connection_ == nullptr) {
    connection_ = std::make_unique<Connection>();
    tcp::resolver resolver(connection_->context);
    connection_->stream.connect(resolver.resolve(host, port, ec), ec);
    if (ec) {
      connection_.reset();
      result.code = grpc::StatusCode::UNAVAILABLE;
      return result;
    }
    connection_->stream.socket().set_option(tcp::no_delay(true));
  }
  Connection& c = *connection_;
  http::request<http::string_body> post(http::verb::post, "/v1/completions", 11);
  post.set(http::field::host, host);
  post.set(http::field::content_type, "application/json");
  post.body() = Body(request);
  post.prepare_payload();
  http::write(c.stream, post, ec);
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(std::numeric_limits<uint64_t>::max());
  if (!ec) http::read_header(c.stream, c.buffer, parser, ec);
  std::string events;
  bool done = false;
  char chunk[16 << 10];
  while (!ec && !parser.is_done()) {
    parser.get().body().data = chunk;
    parser.get().body().size = sizeof(chunk);
    http::read_some(c.stream, c.buffer, parser, ec);
    if (ec == http::error::need_buffer) ec = {};
    events.append(chunk, sizeof(chunk) - parser.get().body().size);
    const auto now = Clock::now();
    for (size_t end = events.find("\n\n"); end != std::string::npos; end = events.find("\n\n")) {
      const std::string data = events.substr(6, end - 6);  // after "data: "
      events.erase(0, end + 2);
      if (data == "[DONE]") {
        done = true;
        continue;
      }
      const nlohmann::json event = nlohmann::json::parse(data, nullptr, false);
      if (event.is_discarded() || !event.contains("choices") || event["choices"].empty()) continue;
      const int n = static_cast<int>(event["choices"][0].value("text", std::string()).size());
      RecordChunk(n, start, now, previous, result);
    }
  }
  result.e2e_s = Seconds(Clock::now() - start);
  if (ec) {
    connection_.reset();
    result.code = grpc::StatusCode::UNAVAILABLE;
  } else {
    result.code = CodeOf(parser.get().result_int());
    if (result.code == grpc::StatusCode::OK && !done) result.code = grpc::StatusCode::INTERNAL;
    if (!parser.keep_alive()) connection_.reset();
  }
  return result;
}

}  // namespace mlaserve::bench
