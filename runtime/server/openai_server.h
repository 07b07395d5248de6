// `kiln serve`'s HTTP server: OpenAI's /v1/completions, /v1/chat/completions
// and /v1/models, /health and Prometheus /metrics, on cpp-httplib's thread
// pool in front of one EngineLoop. Handler threads parse and validate,
// submit, and wait on their request's channel; a streamed answer is written
// chunk by chunk as the engine thread fills the channel, and a client that
// goes away has its request cancelled. docs/design/server.md has the whole
// picture.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "runtime/engine/engine.h"
#include "runtime/support/error.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace kiln::server {

class EngineLoop;
class PrometheusMetrics;
struct RequestContext;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                  // 0: any free port (bind() says which)
  std::string api_key;              // empty: no authentication
  std::string model_id;             // the id /v1/models lists and requests must name
  int64_t max_queue = 128;          // waiting requests beyond which new ones get 429
  int64_t max_messages = 1024;      // chat messages a request may carry
  int http_threads = 0;             // connection threads; 0: max sequences + max queue + 8
  std::chrono::milliseconds shutdown_grace{10000};
  bool log_requests = true;         // one line a request on stderr
};

class OpenAiServer {
 public:
  OpenAiServer(std::unique_ptr<Engine> engine, ServerOptions options);
  ~OpenAiServer();

  // Binds the listening socket; returns the port (the chosen one for port 0).
  Result<int> bind();
  // Serves until shutdown() finishes; call after bind(), from one thread.
  void serve();
  // Any thread but a signal handler: refuses new requests (503), lets the
  // in-flight ones finish within the grace period, cancels the rest, then
  // makes serve() return. Calling it again does nothing.
  void shutdown();

 private:
  void installRoutes();
  void handleGeneration(int endpoint, const httplib::Request& request, httplib::Response& response);
  bool authorized(const httplib::Request& request, httplib::Response& response);
  void respondError(httplib::Response& response, const struct ApiError& error);
  void logRequest(const std::string& method, const std::string& path, int status, const std::string& detail,
                  std::chrono::steady_clock::time_point start);
  // An answer still being written (a stream's content provider), which
  // shutdown waits for before it closes the connections.
  void responseOpened();
  void responseClosed();

  ServerOptions options_;
  std::unique_ptr<PrometheusMetrics> metrics_;
  std::unique_ptr<EngineLoop> loop_;
  std::unique_ptr<RequestContext> context_;
  std::unique_ptr<httplib::Server> http_;
  int listen_socket_ = -1;
  std::atomic<bool> draining_{false};
  std::atomic<bool> shut_down_{false};
  std::mutex open_mutex_;
  std::condition_variable open_changed_;
  int64_t open_responses_ = 0;
  std::mutex log_mutex_;
};

}  // namespace kiln::server
