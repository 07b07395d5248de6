#include "runtime/server/openai_server.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <vector>

#include <fmt/format.h>
#include <httplib.h>
#include <sys/socket.h>
#include <nlohmann/json.hpp>

#include "runtime/server/api_error.h"
#include "runtime/server/engine_loop.h"
#include "runtime/server/openai_request.h"
#include "runtime/server/openai_response.h"
#include "runtime/server/prometheus_metrics.h"
#include "runtime/tokenizer/tokenizer.h"

namespace kiln::server {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// How long a handler waits on its channel before looking again (a stream
// checks for a closed client at least this often once tokens flow).
constexpr std::chrono::milliseconds kChannelPoll{250};

ApiError shuttingDown() { return ApiError{503, "the server is shutting down", "server_error", {}, "shutting_down"}; }

// A streamed answer's state between calls of httplib's content provider.
struct Stream {
  std::shared_ptr<RequestChannel> channel;
  ResponseHeader header;
  bool include_usage = false;
  ChannelUpdate carried;  // read while waiting for the engine to accept, not yet written
  bool has_carried = false;
  bool role_sent = false;
  bool ended = false;     // [DONE] written
  // Stats for the usage chunk and the log; with tool calls read, the whole
  // answer, written when it ends.
  std::vector<CompletedChoice> choices;
  std::vector<int64_t> text_offsets;  // completions' logprobs: characters sent per choice
  Clock::time_point start;
};

}  // namespace

OpenAiServer::OpenAiServer(std::unique_ptr<Engine> engine, ServerOptions options)
    : options_(std::move(options)),
      metrics_(std::make_unique<PrometheusMetrics>()),
      context_(std::make_unique<RequestContext>()),
      http_(std::make_unique<httplib::Server>()) {
  context_->model_id = options_.model_id;
  context_->context_length = engine->contextLength();
  context_->max_messages = options_.max_messages;
  if (const ChatTemplate* chat = engine->chatTemplate()) context_->tool_call_format = toolCallFormatOf(chat->source());
  loop_ = std::make_unique<EngineLoop>(std::move(engine), options_.max_queue, *metrics_);
  // Every streamed request holds a connection thread for its whole answer.
  const int threads =
      options_.http_threads > 0 ? options_.http_threads : int(std::min<int64_t>(options_.max_queue + 16 + 8, 1024));
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  // cpp-httplib 0.11 listens with a backlog of 5 (compiled into Debian's
  // library): dozens of clients connecting at once would overflow it and
  // some would be reset. The socket is noted here so bind() can listen again
  // with the system's limit (Linux updates a listening socket's backlog).
  http_->set_socket_options([this](socket_t socket) {
    httplib::default_socket_options(socket);
    listen_socket_ = socket;
  });
  http_->set_payload_max_length(16 << 20);
  http_->set_keep_alive_timeout(5);
  installRoutes();
}

OpenAiServer::~OpenAiServer() = default;

Result<int> OpenAiServer::bind() {
  int port = options_.port;
  if (port == 0) {
    port = http_->bind_to_any_port(options_.host);
    if (port < 0) return makeError("cannot listen on {}: no free port", options_.host);
  } else if (!http_->bind_to_port(options_.host, port)) {
    return makeError("cannot listen on {}:{} (in use, or not an address of this machine)", options_.host, port);
  }
  if (listen_socket_ >= 0) ::listen(listen_socket_, SOMAXCONN);
  return port;
}

void OpenAiServer::serve() { http_->listen_after_bind(); }

void OpenAiServer::shutdown() {
  if (shut_down_.exchange(true)) return;
  draining_ = true;
  std::fprintf(stderr, "kiln serve: shutting down: finishing in-flight requests (grace %.1f s)\n",
               double(options_.shutdown_grace.count()) / 1000.0);
  loop_->drain(options_.shutdown_grace);
  // Streams write their last chunks after their channels close; give them a
  // moment so a finished answer is not cut off by closing the sockets.
  {
    std::unique_lock lock(open_mutex_);
    open_changed_.wait_for(lock, std::chrono::seconds(5), [&] { return open_responses_ == 0; });
  }
  http_->stop();
}

void OpenAiServer::responseOpened() {
  std::lock_guard lock(open_mutex_);
  ++open_responses_;
}

void OpenAiServer::responseClosed() {
  std::lock_guard lock(open_mutex_);
  --open_responses_;
  open_changed_.notify_all();
}

void OpenAiServer::respondError(httplib::Response& response, const ApiError& error) {
  response.status = error.status;
  if (error.status == 429) response.set_header("Retry-After", "1");
  response.set_content(error.toJson().dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void OpenAiServer::logRequest(const std::string& method, const std::string& path, int status,
                              const std::string& detail, Clock::time_point start) {
  if (!options_.log_requests) return;
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::lock_guard lock(log_mutex_);
  std::fprintf(stderr, "kiln serve: %s %s %d %.3fs%s%s\n", method.c_str(), path.c_str(), status,
               seconds, detail.empty() ? "" : " ", detail.c_str());
}

bool OpenAiServer::authorized(const httplib::Request& request, httplib::Response& response) {
  if (options_.api_key.empty()) return true;
  if (request.get_header_value("Authorization") == "Bearer " + options_.api_key) return true;
  metrics_->recordRejected("unauthorized");
  respondError(response, ApiError{401, "Incorrect API key provided: expected `Authorization: Bearer <key>`",
                                  "invalid_request_error", {}, "invalid_api_key"});
  return false;
}

void OpenAiServer::installRoutes() {
  http_->Get("/health", [this](const httplib::Request&, httplib::Response& response) {
    if (draining_) {
      response.status = 503;
      response.set_content(R"({"status":"shutting_down"})", "application/json");
      return;
    }
    response.set_content(R"({"status":"ok"})", "application/json");
  });

  http_->Get("/metrics", [this](const httplib::Request&, httplib::Response& response) {
    response.set_content(metrics_->render(), "text/plain; version=0.0.4; charset=utf-8");
  });

  auto modelJson = [this] {
    return json{{"id", options_.model_id},
                {"object", "model"},
                {"created", newResponseHeader(Endpoint::kCompletions, "").created},
                {"owned_by", "kiln"},
                {"max_model_len", context_->context_length}};
  };
  http_->Get("/v1/models", [this, modelJson](const httplib::Request& request, httplib::Response& response) {
    if (!authorized(request, response)) return;
    response.set_content(json{{"object", "list"}, {"data", json::array({modelJson()})}}.dump(), "application/json");
  });
  http_->Get(R"(/v1/models/(.+))", [this, modelJson](const httplib::Request& request, httplib::Response& response) {
    if (!authorized(request, response)) return;
    if (request.matches[1] != options_.model_id)
      return respondError(response, ApiError{404, fmt::format("The model `{}` does not exist", request.matches[1].str()),
                                             "invalid_request_error", "model", "model_not_found"});
    response.set_content(modelJson().dump(), "application/json");
  });

  http_->Post("/v1/completions", [this](const httplib::Request& request, httplib::Response& response) {
    handleGeneration(int(Endpoint::kCompletions), request, response);
  });
  http_->Post("/v1/chat/completions", [this](const httplib::Request& request, httplib::Response& response) {
    handleGeneration(int(Endpoint::kChatCompletions), request, response);
  });

  // vLLM's tokenizer endpoints: the prompt a request would run, and text
  // back from ids (special tokens as their text). The engine's tokenizer and
  // chat template are immutable, so a handler thread uses them directly.
  http_->Post("/tokenize", [this](const httplib::Request& request, httplib::Response& response) {
    if (!authorized(request, response)) return;
    ParsedRequest parsed = parseTokenizeRequest(request.body, *context_);
    if (parsed.error) return respondError(response, *parsed.error);
    auto tokens = loop_->engine().promptTokens(parsed.request.generation);
    if (!tokens.ok()) return respondError(response, invalidRequest(tokens.error().message));
    response.set_content(
        json{{"count", tokens->size()}, {"max_model_len", context_->context_length}, {"tokens", *tokens}}.dump(),
        "application/json");
  });
  http_->Post("/detokenize", [this](const httplib::Request& request, httplib::Response& response) {
    if (!authorized(request, response)) return;
    DetokenizeRequest parsed = parseDetokenizeRequest(request.body, *context_);
    if (parsed.error) return respondError(response, *parsed.error);
    const Tokenizer& tokenizer = loop_->engine().tokenizer();
    for (size_t i = 0; i < parsed.tokens.size(); ++i)
      if (parsed.tokens[i] >= tokenizer.vocabSize())
        return respondError(response, invalidRequest(fmt::format("tokens[{}]: {} is not a token id: expected < {}", i,
                                                                 parsed.tokens[i], tokenizer.vocabSize()),
                                                     fmt::format("tokens[{}]", i)));
    response.set_content(json{{"prompt", tokenizer.decode(parsed.tokens)}}.dump(-1, ' ', false,
                                                                                 json::error_handler_t::replace),
                         "application/json");
  });

  // Unknown paths, oversized bodies and the like get OpenAI's error shape too.
  http_->set_error_handler(httplib::Server::HandlerWithResponse(
      [this](const httplib::Request& request, httplib::Response& response) {
    if (!response.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    const std::string message =
        response.status == 404   ? fmt::format("no route {} {}", request.method, request.path)
        : response.status == 413 ? std::string("the request body is larger than 16 MiB")
                                 : fmt::format("HTTP {}", response.status);
    const int status = response.status;
    respondError(response, ApiError{status, message, "invalid_request_error", {}, {}});
    return httplib::Server::HandlerResponse::Handled;
  }));
  http_->set_exception_handler([this](const httplib::Request&, httplib::Response& response, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    respondError(response, ApiError{500, "internal error: " + what, "server_error", {}, {}});
  });
}

void OpenAiServer::handleGeneration(int endpoint_value, const httplib::Request& request, httplib::Response& response) {
  const Clock::time_point start = Clock::now();
  const auto endpoint = Endpoint(endpoint_value);
  auto refuse = [&](const ApiError& error, const char* reason) {
    if (reason) metrics_->recordRejected(reason);
    respondError(response, error);
    logRequest(request.method, request.path, error.status, error.message, start);
  };
  if (!authorized(request, response)) return logRequest(request.method, request.path, 401, "bad API key", start);
  if (draining_) return refuse(shuttingDown(), "shutting_down");
  ParsedRequest parsed = parseOpenAiRequest(endpoint, request.body, *context_);
  if (parsed.error) return refuse(*parsed.error, "invalid_request");

  std::shared_ptr<RequestChannel> channel = loop_->submit(std::move(parsed.request.generation));
  if (!channel)
    return refuse(ApiError{429, fmt::format("the server's queue is full ({} requests waiting); retry later",
                                            options_.max_queue),
                           "rate_limit_error", {}, "queue_full"},
                  "queue_full");
  // Wait for the engine to take the request (or refuse it: a prompt longer
  // than the context, ...), so the status is known before any byte is sent.
  ChannelUpdate first;
  do first = channel->waitForUpdate(kChannelPoll);
  while (!first.accepted && !first.error);
  if (first.error) return refuse(*first.error, first.error->status == 503 ? "shutting_down" : nullptr);

  ResponseHeader header = newResponseHeader(endpoint, options_.model_id);
  header.logprobs = parsed.request.generation.sampling.logprobs;
  header.token_ids = parsed.request.return_token_ids;
  if (endpoint == Endpoint::kChatCompletions && !parsed.request.generation.tools.empty() &&
      parsed.request.tool_choice == ToolChoice::kAuto)
    header.tool_calls = context_->tool_call_format;
  if (!parsed.request.stream) {
    std::vector<CompletedChoice> choices(size_t(channel->completions()));
    ChannelUpdate update = std::move(first);
    for (;;) {
      for (auto& t : update.texts) {
        CompletedChoice& c = choices[size_t(t.index)];
        c.text += t.text;
        c.token_ids.insert(c.token_ids.end(), t.token_ids.begin(), t.token_ids.end());
        c.logprobs.insert(c.logprobs.end(), std::make_move_iterator(t.logprobs.begin()),
                          std::make_move_iterator(t.logprobs.end()));
      }
      for (auto& f : update.finishes) choices[size_t(f.index)].stats = f.stats;
      if (update.done) break;
      update = channel->waitForUpdate(kChannelPoll);
    }
    for (const CompletedChoice& c : choices)
      if (c.stats.finish == FinishReason::kError)
        return refuse(ApiError{500, "generation failed: " + c.stats.error, "server_error", {}, {}}, nullptr);
    response.set_content(completeResponse(header, choices).dump(-1, ' ', false, json::error_handler_t::replace),
                         "application/json");
    const Usage usage = usageOf(choices);
    logRequest(request.method, request.path, 200,
               fmt::format("prompt {} tokens, generated {}, finish {}", usage.prompt_tokens, usage.completion_tokens,
                           apiFinishReason(choices[0].stats.finish)),
               start);
    return;
  }

  auto stream = std::make_shared<Stream>();
  stream->channel = channel;
  stream->header = header;
  stream->include_usage = parsed.request.include_usage;
  stream->carried = std::move(first);
  stream->has_carried = true;
  stream->choices.resize(size_t(channel->completions()));
  stream->text_offsets.resize(size_t(channel->completions()));
  stream->start = start;
  response.set_header("Cache-Control", "no-cache");
  responseOpened();
  response.set_chunked_content_provider(
      "text/event-stream",
      [this, stream](size_t, httplib::DataSink& sink) {
        if (stream->ended) {
          sink.done();
          return true;
        }
        ChannelUpdate update;
        if (stream->has_carried) {
          update = std::move(stream->carried);
          stream->has_carried = false;
        } else {
          update = stream->channel->waitForUpdate(kChannelPoll);
        }
        std::string events;
        if (!stream->role_sent && stream->header.endpoint == Endpoint::kChatCompletions)
          for (int i = 0; i < stream->channel->completions(); ++i) events += serverSentEvent(roleChunk(stream->header, i));
        stream->role_sent = true;
        const bool reads_tool_calls = stream->header.tool_calls != ToolCallFormat::kNone;
        for (auto& t : update.texts) {
          CompletedChoice& c = stream->choices[size_t(t.index)];
          if (reads_tool_calls) {  // the answer is read for calls once whole
            c.text += t.text;
            c.token_ids.insert(c.token_ids.end(), t.token_ids.begin(), t.token_ids.end());
            c.logprobs.insert(c.logprobs.end(), std::make_move_iterator(t.logprobs.begin()),
                              std::make_move_iterator(t.logprobs.end()));
            continue;
          }
          int64_t& offset = stream->text_offsets[size_t(t.index)];
          events += serverSentEvent(textChunk(stream->header, t.index, t, offset));
          for (const TokenLogprob& l : t.logprobs) offset += textLength(l.bytes);
        }
        for (const auto& f : update.finishes) {
          CompletedChoice& c = stream->choices[size_t(f.index)];
          c.stats = f.stats;
          bool called = false;
          if (reads_tool_calls) events += serverSentEvent(answerChunk(stream->header, f.index, c, called));
          events += serverSentEvent(finishChunk(stream->header, f.index, f.stats.finish, called));
        }
        if (update.done) {
          if (stream->include_usage) events += serverSentEvent(usageChunk(stream->header, usageOf(stream->choices)));
          events += kStreamEnd;
          stream->ended = true;
        }
        // A failed write is a client that went away: its request is cancelled
        // (in the releaser) so its sequences free their KV blocks now.
        if (!events.empty() && !sink.write(events.data(), events.size())) return false;
        if (stream->ended) sink.done();
        return true;
      },
      [this, stream, method = request.method, path = request.path](bool success) {
        if (!stream->ended) loop_->cancel(stream->channel);
        const Usage usage = usageOf(stream->choices);
        logRequest(method, path, 200,
                   stream->ended && success
                       ? fmt::format("stream, prompt {} tokens, generated {}", usage.prompt_tokens,
                                     usage.completion_tokens)
                       : std::string("stream, client went away: cancelled"),
                   stream->start);
        responseClosed();
      });
}

}  // namespace kiln::server
