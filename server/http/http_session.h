// HttpSession: one HTTP/1.1 connection of HttpServer (internal to server/http). It reads a
// request, answers it through OpenAiRoutes, and relays a Generation: the SSE bytes pending
// when a write completes go out as one chunk, so a slow client gets coalesced chunks rather
// than a queue. While a Generation runs the session keeps a read open on the socket, so that a
// client closing the connection is noticed at once, even before any output; bytes it reads
// then are kept as the start of the next request.
//
// Lifetime: shared_ptr, kept alive by the pending Asio operations. Every handler runs on the
// connection's strand; the engine thread only calls Wake (through the Generation).
#ifndef MLASERVE_SERVER_HTTP_HTTP_SESSION_H_
#define MLASERVE_SERVER_HTTP_HTTP_SESSION_H_

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "boost/asio/ip/tcp.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "server/http/generation.h"
#include "server/http/openai_routes.h"

namespace mlaserve {

struct HttpSessionOptions {
  absl::Duration idle_timeout;
  absl::Duration write_timeout;  // zero: never
  uint64_t max_body_bytes = 0;
};

class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  // `routes` must outlive the session.
  HttpSession(boost::asio::ip::tcp::socket socket, OpenAiRoutes* routes,
              HttpSessionOptions options);
  ~HttpSession();

  // Starts reading requests (on the strand).
  void Run();

 private:
  using Request = boost::beast::http::request<boost::beast::http::string_body>;

  void ReadRequest();
  void OnRequest(boost::beast::error_code ec);
  void Reply(HttpReply reply);
  void OnReplied(boost::beast::error_code ec);
  // Engine thread: schedules Pump on the strand, once per batch of wake-ups.
  void Wake();
  // Takes the Generation's pending output and writes what can be written.
  void Pump();
  void WriteEvents();
  void OnEventsWritten(boost::beast::error_code ec);
  // Keeps a read open while a Generation runs (see the file comment).
  void Watch();
  void OnWatched(boost::beast::error_code ec, size_t bytes);
  // Destroys the Generation (aborting what is still live) and reports it to the routes.
  void EndGeneration();
  // The client is gone: abort, close.
  void Close();
  void ArmWriteTimeout();

  boost::beast::tcp_stream stream_;
  OpenAiRoutes* const routes_;
  const HttpSessionOptions options_;
  boost::beast::flat_buffer buffer_;
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
  unsigned http_version_ = 11;
  bool keep_alive_ = true;
  // The reply being written (unary replies and non-streamed completions).
  std::optional<boost::beast::http::response<boost::beast::http::string_body>> reply_;
  // Streaming: the SSE header, its serializer, the chunk being written and the bytes waiting.
  boost::beast::http::response<boost::beast::http::empty_body> sse_header_;
  std::optional<boost::beast::http::response_serializer<boost::beast::http::empty_body>>
      sse_serializer_;
  std::string writing_;
  std::string pending_;
  bool header_written_ = false;
  bool write_in_flight_ = false;
  bool last_chunk_written_ = false;
  bool watching_ = false;      // a Watch read is open
  bool next_request_ = false;  // the response is complete: the watch read starts the next one
  bool closed_ = false;
  std::unique_ptr<Generation> generation_;
  std::atomic<bool> wake_posted_{false};
};

}  // namespace mlaserve

#endif  // MLASERVE_SERVER_HTTP_HTTP_SESSION_H_
