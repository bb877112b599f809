// HttpServer: the OpenAI-compatible HTTP/1.1 front end of `mlaserve serve` (Boost.Beast over
// Asio): OpenAiRoutes behind keep-alive connections, completions streamed as Server-Sent
// Events in chunked transfer encoding. A few I/O threads serve every connection; each
// connection runs on its own strand, and the engine thread only posts wake-ups to it, so
// hundreds of streams cost no thread each and the engine never waits for a client.
//
// A client that goes away (the connection closes while a completion runs, streamed or not)
// has its requests aborted at once, which frees their KV blocks. A streamed response whose
// client takes no bytes for `write_timeout` is dropped the same way.
//
// Thread-safety: all methods are thread-safe.
#ifndef MLASERVE_SERVER_HTTP_HTTP_SERVER_H_
#define MLASERVE_SERVER_HTTP_HTTP_SERVER_H_

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/http/openai_routes.h"

namespace mlaserve {

struct HttpServerOptions {
  std::string host = "0.0.0.0";  // "0.0.0.0" also serves IPv6 where the host has it
  int port = 8000;               // 0: any free port (see HttpServer::port)
  int num_threads = 2;           // I/O threads
  absl::Duration idle_timeout = absl::Seconds(300);  // keep-alive connection without a request
  absl::Duration write_timeout = absl::Seconds(60);  // one write to a client; zero: never
  OpenAiRoutesOptions routes;
};

class HttpServer {
 public:
  // Binds and starts serving (503 until SetEngine). Errors: InvalidArgument for bad options,
  // Unavailable when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(HttpServerOptions options);
  // Stop(), then closes every connection; requests still running are aborted.
  ~HttpServer();

  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }
  OpenAiRoutes& routes() { return *routes_; }

  // Stops accepting connections and the I/O threads; idempotent.
  void Stop();

 private:
  struct Io;  // the Asio objects, kept out of this header
  explicit HttpServer(HttpServerOptions options);

  const HttpServerOptions options_;
  std::unique_ptr<OpenAiRoutes> routes_;
  std::unique_ptr<Io> io_;
  std::vector<std::thread> threads_;
  int port_ = 0;
};

}  // namespace mlaserve

#endif  // MLASERVE_SERVER_HTTP_HTTP_SERVER_H_
