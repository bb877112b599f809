#include "server/http/http_server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/ip/v6_only.hpp"
#include "boost/asio/strand.hpp"
#include "server/common/log.h"
#include "server/http/http_session.h"

namespace mlaserve {
namespace {

namespace net = boost::asio;
using tcp = net::ip::tcp;

// Bodies beyond this many times --max_prompt_bytes are refused (413) before parsing: JSON
// escaping and lists of prompts make a body larger than its text.
constexpr int64_t kBodyBytesPerPromptByte = 8;

bool Ipv6Available() {
  const int fd = socket(AF_INET6, SOCK_STREAM, 0);
  if (fd < 0) return false;
  close(fd);
  return true;
}

}  // namespace

struct HttpServer::Io {
  net::io_context context;
  tcp::acceptor acceptor{context};
  HttpSessionOptions session;
  OpenAiRoutes* routes = nullptr;

  void Accept() {
    acceptor.async_accept(
        net::make_strand(context), [this](boost::system::error_code ec, tcp::socket socket) {
          if (ec) {
            // Closed by Stop; other errors (out of descriptors) pass.
            if (!acceptor.is_open()) return;
          } else {
            std::make_shared<HttpSession>(std::move(socket), routes, session)->Run();
          }
          Accept();
        });
  }
};

HttpServer::HttpServer(HttpServerOptions options)
    : options_(std::move(options)),
      routes_(std::make_unique<OpenAiRoutes>(options_.routes)),
      io_(std::make_unique<Io>()) {}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(HttpServerOptions options) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--http_port: ", options.port, " is not in [0, 65535]"));
  }
  if (options.num_threads < 1) {
    return absl::InvalidArgumentError("--http_threads: must be at least 1");
  }
  std::unique_ptr<HttpServer> server(new HttpServer(std::move(options)));
  const HttpServerOptions& o = server->options_;
  Io& io = *server->io_;
  io.routes = server->routes_.get();
  io.session = {.idle_timeout = o.idle_timeout,
                .write_timeout = o.write_timeout,
                .max_body_bytes = static_cast<uint64_t>(
                    o.routes.max_prompt_bytes * kBodyBytesPerPromptByte + (64 << 10))};
  boost::system::error_code ec;
  const bool dual_stack = o.host == "0.0.0.0" && Ipv6Available();
  net::ip::address address =
      dual_stack ? net::ip::address(net::ip::address_v6::any()) : net::ip::make_address(o.host, ec);
  if (ec) {
    tcp::resolver resolver(io.context);
    const auto results = resolver.resolve(o.host, "", ec);
    if (ec || results.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--host: cannot resolve \"", o.host, "\": ", ec.message()));
    }
    address = results.begin()->endpoint().address();
  }
  const tcp::endpoint endpoint(address, static_cast<uint16_t>(o.port));
  io.acceptor.open(endpoint.protocol(), ec);
  if (!ec && dual_stack) io.acceptor.set_option(net::ip::v6_only(false), ec);
  if (!ec) io.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) io.acceptor.bind(endpoint, ec);
  if (!ec) io.acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("--http_port: cannot listen on ", o.host, ":", o.port, ": ", ec.message()));
  }
  server->port_ = io.acceptor.local_endpoint().port();
  io.Accept();
  for (int i = 0; i < o.num_threads; ++i) {
    server->threads_.emplace_back([&io] { io.context.run(); });
  }
  LogEvent("http_listening", {{"host", o.host}, {"port", int64_t{server->port_}}});
  return server;
}

HttpServer::~HttpServer() {
  Stop();
  // Destroying the context destroys the sessions still open, which aborts their requests.
  io_.reset();
}

void HttpServer::Stop() {
  if (threads_.empty()) return;
  io_->context.stop();
  for (std::thread& thread : threads_) thread.join();
  threads_.clear();
  boost::system::error_code ignored;
  io_->acceptor.close(ignored);
}

}  // namespace mlaserve
