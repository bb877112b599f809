#include "server/http/http_session.h"

#include <chrono>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "boost/asio/dispatch.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/write.hpp"
#include "server/http/openai_response.h"

namespace mlaserve {
namespace {

namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace net = boost::asio;

// A Watch read stops while this much of a next request is waiting, so a client that keeps
// sending during a completion cannot grow the buffer.
constexpr size_t kMaxWatchBytes = 64 << 10;

}  // namespace

HttpSession::HttpSession(net::ip::tcp::socket socket, OpenAiRoutes* routes,
                         HttpSessionOptions options)
    : stream_(std::move(socket)), routes_(routes), options_(options) {}

HttpSession::~HttpSession() {
  // Only when the server stops with this connection open.
  if (generation_ != nullptr) {
    generation_.reset();
    routes_->GenerationEnded();
  }
}

void HttpSession::Run() {
  net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->ReadRequest(); });
}

void HttpSession::ReadRequest() {
  if (closed_) return;
  parser_.emplace();
  parser_->body_limit(options_.max_body_bytes);
  stream_.expires_after(absl::ToChronoSeconds(options_.idle_timeout));
  http::async_read(
      stream_, buffer_, *parser_,
      [self = shared_from_this()](beast::error_code ec, size_t) { self->OnRequest(ec); });
}

void HttpSession::OnRequest(beast::error_code ec) {
  if (ec == http::error::body_limit) {
    keep_alive_ = false;
    Reply({.status = 413,
           .body = Dump(ErrorBody(absl::InvalidArgumentError(
               absl::StrCat("body: over the limit of ", options_.max_body_bytes,
                            " bytes (a multiple of --max_prompt_bytes)"))))});
    return;
  }
  if (ec) {
    Close();
    return;
  }
  Request request = parser_->release();
  http_version_ = request.version();
  keep_alive_ = request.keep_alive();
  stream_.expires_never();
  const auto view = [](boost::beast::string_view v) {
    return std::string_view(v.data(), v.size());
  };
  Routed routed = routes_->Handle(view(request.method_string()), view(request.target()),
                                  request.body(), [this] { Wake(); });
  if (routed.generation == nullptr) {
    Reply(std::move(routed.reply));
    return;
  }
  generation_ = std::move(routed.generation);
  Watch();
  if (!generation_->stream()) {
    Pump();
    return;
  }
  header_written_ = false;
  last_chunk_written_ = false;
  sse_header_ = {};
  sse_header_.result(http::status::ok);
  sse_header_.version(http_version_);
  sse_header_.set(http::field::server, "mlaserve");
  sse_header_.set(http::field::content_type, "text/event-stream");
  sse_header_.set(http::field::cache_control, "no-cache");
  sse_header_.keep_alive(keep_alive_);
  sse_header_.chunked(true);
  sse_serializer_.emplace(sse_header_);
  write_in_flight_ = true;
  ArmWriteTimeout();
  http::async_write_header(stream_, *sse_serializer_,
                           [self = shared_from_this()](beast::error_code ec, size_t) {
                             self->write_in_flight_ = false;
                             self->stream_.expires_never();
                             if (ec) {
                               self->Close();
                               return;
                             }
                             self->header_written_ = true;
                             self->Pump();
                           });
}

void HttpSession::Reply(HttpReply reply) {
  if (closed_) return;
  reply_.emplace(static_cast<http::status>(reply.status), http_version_);
  reply_->set(http::field::server, "mlaserve");
  reply_->set(http::field::content_type, reply.content_type);
  reply_->body() = std::move(reply.body);
  reply_->keep_alive(keep_alive_);
  reply_->prepare_payload();
  ArmWriteTimeout();
  http::async_write(stream_, *reply_, [self = shared_from_this()](beast::error_code ec, size_t) {
    self->OnReplied(ec);
  });
}

void HttpSession::OnReplied(beast::error_code ec) {
  stream_.expires_never();
  reply_.reset();
  if (ec || !keep_alive_) {
    Close();
    return;
  }
  if (!watching_) {
    ReadRequest();
    return;
  }
  // The open Watch read becomes the next request's: cancel it so that the read starts over
  // with the idle timeout (bytes already read stay in buffer_).
  next_request_ = true;
  beast::error_code ignored;
  stream_.socket().cancel(ignored);
}

void HttpSession::Wake() {
  if (wake_posted_.exchange(true)) return;
  // Null once the session is being destroyed (its Generation's destructor then waits for
  // this callback to return).
  std::shared_ptr<HttpSession> self = weak_from_this().lock();
  if (self == nullptr) return;
  net::post(stream_.get_executor(), [self] {
    self->wake_posted_ = false;
    self->Pump();
  });
}

void HttpSession::Pump() {
  if (generation_ == nullptr || closed_) return;
  if (generation_->stream()) {
    pending_ += generation_->TakeEvents();
    WriteEvents();
    return;
  }
  std::optional<absl::StatusOr<nlohmann::json>> response = generation_->TakeResponse();
  if (!response.has_value()) return;
  EndGeneration();
  Reply(response->ok() ? HttpReply{.body = Dump(**response)} : ErrorReply(response->status()));
}

void HttpSession::WriteEvents() {
  if (write_in_flight_ || !header_written_ || closed_) return;
  const auto on_written = [self = shared_from_this()](beast::error_code ec, size_t) {
    self->OnEventsWritten(ec);
  };
  if (!pending_.empty()) {
    writing_.swap(pending_);
    pending_.clear();
    write_in_flight_ = true;
    ArmWriteTimeout();
    net::async_write(stream_, http::make_chunk(net::buffer(writing_)), on_written);
    return;
  }
  if (generation_ != nullptr && generation_->done() && !last_chunk_written_) {
    last_chunk_written_ = true;
    write_in_flight_ = true;
    ArmWriteTimeout();
    net::async_write(stream_, http::make_chunk_last(), on_written);
  }
}

void HttpSession::OnEventsWritten(beast::error_code ec) {
  write_in_flight_ = false;
  stream_.expires_never();
  if (ec) {
    Close();
    return;
  }
  if (!last_chunk_written_) {
    WriteEvents();
    return;
  }
  // The stream is complete: [DONE] and the last chunk are out.
  EndGeneration();
  sse_serializer_.reset();
  OnReplied(ec);
}

void HttpSession::Watch() {
  if (watching_ || closed_ || buffer_.size() >= kMaxWatchBytes) return;
  watching_ = true;
  // No timeout on this read: a completion may stream for longer than any idle limit. With a
  // write pending this resets the read timer only (the write keeps its timeout).
  stream_.expires_never();
  stream_.async_read_some(buffer_.prepare(4096),
                          [self = shared_from_this()](beast::error_code ec, size_t bytes) {
                            self->OnWatched(ec, bytes);
                          });
}

void HttpSession::OnWatched(beast::error_code ec, size_t bytes) {
  watching_ = false;
  if (!ec) buffer_.commit(bytes);
  if (next_request_) {
    next_request_ = false;
    ReadRequest();
    return;
  }
  if (ec) {
    // The client closed the connection while its completion ran.
    Close();
    return;
  }
  if (generation_ != nullptr) Watch();
}

void HttpSession::EndGeneration() {
  if (generation_ == nullptr) return;
  generation_.reset();
  routes_->GenerationEnded();
}

void HttpSession::Close() {
  if (closed_) return;
  closed_ = true;
  EndGeneration();
  beast::error_code ignored;
  stream_.socket().shutdown(net::ip::tcp::socket::shutdown_both, ignored);
  stream_.socket().close(ignored);
}

void HttpSession::ArmWriteTimeout() {
  if (options_.write_timeout > absl::ZeroDuration()) {
    stream_.expires_after(absl::ToChronoMilliseconds(options_.write_timeout));
  } else {
    stream_.expires_never();
  }
}

}  // namespace mlaserve
