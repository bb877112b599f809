// HttpServer over a scripted engine, through a Boost.Beast client on loopback: SSE framing on
// the wire, keep-alive, disconnects that abort, drain, and the error statuses.
#include "server/http/http_server.h"

#include <memory>
#include <string>

#include "boost/asio/ip/tcp.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/server_test_util.h"

namespace mlaserve {
namespace {

namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace net = boost::asio;
using ::mlaserve::testing::FakeEngine;
using ::mlaserve::testing::MakeCompletion;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// One keep-alive connection.
class Client {
 public:
  explicit Client(int port) {
    stream_.connect(net::ip::tcp::endpoint(net::ip::make_address("127.0.0.1"), port));
  }
  void Send(http::verb verb, const std::string& target, const std::string& body) {
    http::request<http::string_body> request(verb, target, 11);
    request.set(http::field::host, "127.0.0.1");
    request.body() = body;
    request.prepare_payload();
    http::write(stream_, request);
  }
  http::response<http::string_body> Read() {
    http::response<http::string_body> response;
    http::read(stream_, buffer_, response);
    return response;
  }
  http::response<http::string_body> Post(const std::string& target, const std::string& body) {
    Send(http::verb::post, target, body);
    return Read();
  }
  http::response<http::string_body> Get(const std::string& target) {
    Send(http::verb::get, target, "");
    return Read();
  }
  // A request head announcing a body of `length` bytes, without the body.
  void SendHead(const std::string& target, size_t length) {
    http::request<http::empty_body> request(http::verb::post, target, 11);
    request.set(http::field::host, "127.0.0.1");
    request.content_length(length);
    http::request_serializer<http::empty_body> serializer(request);
    http::write_header(stream_, serializer);
  }
  void Close() { stream_.socket().close(); }

 private:
  net::io_context context_;
  beast::tcp_stream stream_{context_};
  beast::flat_buffer buffer_;
};

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    engine_ = std::make_shared<FakeEngine>();
    HttpServerOptions options;
    options.host = "127.0.0.1";
    options.port = 0;
    options.routes.max_prompt_bytes = 1024;
    absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    server_->routes().SetEngine(engine_, nullptr);
  }

  // Pushes "ab" as two tokens and finishes the only submitted request.
  void Complete(int index = 0) {
    ASSERT_TRUE(engine_->WaitForSubmitted(index + 1, absl::Seconds(10)));
    const std::shared_ptr<RequestStream> stream = engine_->stream(engine_->submitted()[index].id);
    stream->Push({7, 8}, "ab", {});
    stream->Finish({}, "", {}, MakeCompletion(FinishReason::kLength, 2));
  }

  std::shared_ptr<FakeEngine> engine_;
  std::unique_ptr<HttpServer> server_;
};

TEST_F(HttpServerTest, StreamsServerSentEventsThenDone) {
  Client client(server_->port());
  client.Send(http::verb::post, "/v1/completions",
              R"({"prompt": [1, 2], "max_tokens": 2, "stream": true,
                  "stream_options": {"include_usage": true}})");
  Complete();
  const auto response = client.Read();
  EXPECT_EQ(response.result_int(), 200);
  EXPECT_EQ(response[http::field::content_type], "text/event-stream");
  EXPECT_TRUE(response.chunked());
  const std::string& body = response.body();
  // data: lines, each event ended by a blank line, the last one [DONE].
  EXPECT_THAT(body, StartsWith("data: {"));
  EXPECT_THAT(body, HasSubstr(R"("text":"ab")"));
  EXPECT_THAT(body, HasSubstr(R"("finish_reason":"length")"));
  EXPECT_THAT(body, HasSubstr(R"("choices":[],)"));
  EXPECT_THAT(body, HasSubstr(R"("usage":{"completion_tokens":2,"prompt_tokens":)"));
  EXPECT_TRUE(body.ends_with("}\n\ndata: [DONE]\n\n")) << body;
  size_t events = 0;
  for (size_t at = body.find("data: "); at != std::string::npos; at = body.find("data: ", at + 1)) {
    ++events;
    EXPECT_TRUE(at == 0 || body.substr(at - 2, 2) == "\n\n");
  }
  EXPECT_EQ(events, 4u);  // text, finish, usage, [DONE]

  // The connection is kept alive for the next request.
  const auto models = client.Get("/v1/models");
  EXPECT_EQ(models.result_int(), 200);
  EXPECT_THAT(models.body(), HasSubstr(R"("id":"fake-model")"));
}

TEST_F(HttpServerTest, NonStreamedResponseIsOneObject) {
  Client client(server_->port());
  client.Send(http::verb::post, "/v1/completions", R"({"prompt": [1], "max_tokens": 2})");
  Complete();
  const auto response = client.Read();
  EXPECT_EQ(response.result_int(), 200);
  EXPECT_THAT(response.body(), HasSubstr(R"("object":"text_completion")"));
  EXPECT_THAT(response.body(), HasSubstr(R"("text":"ab")"));
}

TEST_F(HttpServerTest, ClientThatGoesAwayAbortsItsRequest) {
  for (const bool stream : {true, false}) {
    Client client(server_->port());
    client.Send(http::verb::post, "/v1/completions",
                std::string(R"({"prompt": [1], "max_tokens": 100, "stream": )") +
                    (stream ? "true}" : "false}"));
    const size_t index = stream ? 0 : 1;
    ASSERT_TRUE(engine_->WaitForSubmitted(index + 1, absl::Seconds(10)));
    client.Close();
    EXPECT_TRUE(engine_->WaitForAbort(engine_->submitted()[index].id, absl::Seconds(10)))
        << "stream " << stream;
  }
}

TEST_F(HttpServerTest, ErrorStatuses) {
  Client client(server_->port());
  auto r = client.Post("/v1/completions", R"({"prompt": [1], "top_p": 2})");
  EXPECT_EQ(r.result_int(), 400);
  EXPECT_THAT(r.body(), HasSubstr(R"("param":"top_p")"));
  r = client.Post("/v1/completions", R"({"model": "other", "prompt": [1]})");
  EXPECT_EQ(r.result_int(), 404);
  r = client.Get("/v1/nothing");
  EXPECT_EQ(r.result_int(), 404);
  r = client.Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}]})");
  EXPECT_EQ(r.result_int(), 400);
  EXPECT_THAT(r.body(), HasSubstr("chat template"));
  engine_->set_submit_status(absl::ResourceExhaustedError("queue full"));
  r = client.Post("/v1/completions", R"({"prompt": [1]})");
  EXPECT_EQ(r.result_int(), 429);
  EXPECT_THAT(r.body(), HasSubstr("rate_limit_error"));

  // Refused from the head, before the body is read.
  Client big(server_->port());
  big.SendHead("/v1/completions", 1 << 20);
  const auto too_big = big.Read();
  EXPECT_EQ(too_big.result_int(), 413);
  EXPECT_THAT(too_big.body(), HasSubstr(R"("param":"body")"));
}

TEST_F(HttpServerTest, DrainRefusesNewCompletionsAndHealth) {
  Client client(server_->port());
  EXPECT_EQ(client.Get("/health").result_int(), 200);
  client.Send(http::verb::post, "/v1/completions", R"({"prompt": [1], "stream": true})");
  ASSERT_TRUE(engine_->WaitForSubmitted(1, absl::Seconds(10)));
  server_->routes().StartDraining();
  Client other(server_->port());
  EXPECT_EQ(other.Post("/v1/completions", R"({"prompt": [1]})").result_int(), 503);
  EXPECT_EQ(other.Get("/health").result_int(), 503);
  EXPECT_EQ(other.Get("/v1/models").result_int(), 200);
  EXPECT_FALSE(server_->routes().WaitForNoGenerations(absl::Now() + absl::Milliseconds(50)));
  // The open stream still ends with its final chunk.
  Complete();
  const auto response = client.Read();
  EXPECT_TRUE(response.body().ends_with("data: [DONE]\n\n"));
  EXPECT_TRUE(server_->routes().WaitForNoGenerations(absl::Now() + absl::Seconds(10)));
}

}  // namespace
}  // namespace mlaserve
