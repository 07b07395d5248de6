// kiln bench serve --http: the workload through an in-process `kiln serve`
// on loopback. Each request is one thread with its own cpp-httplib client
// posting a streamed /v1/completions (prompt token ids, greedy, EOS
// ignored, return_token_ids so every event says how many tokens it
// carries); its trace is stamped as the events arrive. The server's
// /metrics, scraped before and after a run, give its preemptions, steps
// and prefix-cache counts; the KV pool's peak is not seen from outside.
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <httplib.h>

#include "runtime/server/openai_server.h"
#include "tools/kiln/serve_run.h"

namespace kiln {
namespace {

using nlohmann::json;

constexpr const char* kModelId = "kiln-bench";

// The counters of a /metrics text a run reports, by name.
struct ServerCounters {
  int64_t preemptions = 0, steps = 0, prefix_hit = 0, prefix_queried = 0, kv_blocks_total = 0;
};

ServerCounters scrapeCounters(int port) {
  ServerCounters c;
  httplib::Client client("127.0.0.1", port);
  auto response = client.Get("/metrics");
  if (!response || response->status != 200) return c;
  std::istringstream lines(response->body);
  for (std::string line; std::getline(lines, line);) {
    const size_t space = line.find(' ');
    if (line.empty() || line[0] == '#' || space == std::string::npos) continue;
    const std::string name = line.substr(0, space);
    const int64_t value = int64_t(std::strtod(line.c_str() + space + 1, nullptr));
    if (name == "kiln_preemptions_total") c.preemptions = value;
    else if (name == "kiln_engine_steps_total") c.steps = value;
    else if (name == "kiln_prefix_cache_hit_tokens_total") c.prefix_hit = value;
    else if (name == "kiln_prefix_cache_queried_tokens_total") c.prefix_queried = value;
    else if (name == "kiln_kv_blocks_total") c.kv_blocks_total = value;
  }
  return c;
}

class HttpRun : public ServeRun {
 public:
  HttpRun(int port, size_t capacity, bool progress, const std::string& name)
      : ServeRun(capacity, progress, name), port_(port), clients_(capacity), before_(scrapeCounters(port)) {}

  ~HttpRun() override {
    for (std::thread& t : clients_)
      if (t.joinable()) t.join();
  }

  Status submit(size_t index, std::vector<int32_t> prompt, int64_t output_len, double due, bool keep_tokens) override {
    Trace& t = traces_[index];
    t.due = due;
    t.output_len = output_len;
    const json body = {{"model", kModelId},
                       {"prompt", std::move(prompt)},
                       {"max_tokens", output_len},
                       {"temperature", 0},
                       {"ignore_eos", true},
                       {"stream", true},
                       {"stream_options", {{"include_usage", true}}},
                       {"return_token_ids", true}};
    clients_[index] =
        std::thread([this, index, text = body.dump(), keep_tokens] { request(index, text, keep_tokens); });
    in_flight_.push_back(index);
    submitted_.push_back(index);
    return Status::success();
  }

  Result<std::vector<size_t>> step() override {
    std::vector<size_t> finished;
    {
      std::unique_lock lock(mutex_);
      ended_.wait_for(lock, std::chrono::milliseconds(2), [&] { return !ended_queue_.empty(); });
      finished.swap(ended_queue_);
    }
    for (size_t index : finished) {
      clients_[index].join();
      std::erase(in_flight_, index);
      if (!traces_[index].error.empty() && first_error_.empty())
        first_error_ = fmt::format("request {}: {}", index, traces_[index].error);
    }
    done_ += int64_t(finished.size());
    output_tokens_ = streamed_tokens_.load();
    progress_.update(done_, output_tokens_);
    return finished;
  }

  RunFigures figures(const std::string& name) override {
    RunFigures f;
    f.name = name;
    f.transport = "http";
    traceFigures(f);
    const ServerCounters after = scrapeCounters(port_);
    f.preemptions = after.preemptions - before_.preemptions;
    f.steps = after.steps - before_.steps;
    f.prefix_hit_tokens = after.prefix_hit - before_.prefix_hit;
    f.prefix_queried_tokens = after.prefix_queried - before_.prefix_queried;
    f.kv_blocks_total = after.kv_blocks_total;
    if (!first_error_.empty()) std::fprintf(stderr, "kiln bench serve --http: %s\n", first_error_.c_str());
    return f;
  }

 private:
  // One streamed completion, on its own thread; its trace is this thread's
  // until it is queued as ended.
  void request(size_t index, const std::string& body, bool keep_tokens) {
    Trace& t = traces_[index];
    std::string buffer, error_body;
    bool usage_seen = false;
    auto onEvent = [&](std::string_view data) {
      if (data == "[DONE]") return;
      const json event = json::parse(data, nullptr, /*allow_exceptions=*/false);
      if (!event.is_object()) return;
      if (event.contains("usage") && event["usage"].is_object()) {
        const json& usage = event["usage"];
        t.prompt_tokens = usage.value("prompt_tokens", int64_t(0));
        if (usage.contains("prompt_tokens_details"))
          t.cached_prompt_tokens = usage["prompt_tokens_details"].value("cached_tokens", int64_t(0));
        usage_seen = true;
      }
      if (!event.contains("choices")) return;
      for (const json& choice : event["choices"]) {
        if (!choice.contains("token_ids") || choice["token_ids"].empty()) continue;
        const double at = now();
        if (t.generated == 0) t.first_token = at;
        t.last_token = at;
        t.generated += int64_t(choice["token_ids"].size());
        streamed_tokens_ += int64_t(choice["token_ids"].size());
        if (keep_tokens)
          for (const json& id : choice["token_ids"]) t.tokens.push_back(id.get<int32_t>());
      }
    };
    httplib::Client client("127.0.0.1", port_);
    client.set_read_timeout(24 * 3600, 0);
    client.set_write_timeout(3600, 0);
    httplib::Request request;
    request.method = "POST";
    request.path = "/v1/completions";
    request.body = body;
    request.set_header("Content-Type", "application/json");
    request.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
      buffer.append(data, size);
      for (size_t end; (end = buffer.find("\n\n")) != std::string::npos; buffer.erase(0, end + 2)) {
        std::string_view event(buffer.data(), end);
        if (event.starts_with("data: ")) onEvent(event.substr(6));
        else error_body.append(event);
      }
      return true;
    };
    auto result = client.send(request);
    if (!result) {
      t.error = "HTTP: " + httplib::to_string(result.error());
    } else if (result->status != 200) {
      t.error = fmt::format("HTTP {}: {}{}", result->status, error_body, buffer);
    } else if (!usage_seen) {
      t.error = "the stream ended without its usage";
    } else {
      t.completed = t.generated == t.output_len;
      if (!t.completed) t.error = fmt::format("{} tokens of {}", t.generated, t.output_len);
    }
    std::lock_guard lock(mutex_);
    ended_queue_.push_back(index);
    ended_.notify_one();
  }

  const int port_;
  std::vector<std::thread> clients_;
  const ServerCounters before_;
  std::atomic<int64_t> streamed_tokens_{0};
  std::mutex mutex_;
  std::condition_variable ended_;
  std::vector<size_t> ended_queue_;
  std::string first_error_;
};

class HttpTarget : public ServeTarget {
 public:
  HttpTarget(std::unique_ptr<server::OpenAiServer> server, int port)
      : server_(std::move(server)), port_(port), thread_([this] { server_->serve(); }) {}
  ~HttpTarget() override {
    server_->shutdown();
    thread_.join();
  }
  std::unique_ptr<ServeRun> newRun(size_t capacity, bool progress, const std::string& name) override {
    return std::make_unique<HttpRun>(port_, capacity, progress, name);
  }
  std::string transport() const override { return "http"; }

 private:
  std::unique_ptr<server::OpenAiServer> server_;
  int port_;
  std::thread thread_;
};

}  // namespace

Result<std::unique_ptr<ServeTarget>> startHttpTarget(std::unique_ptr<Engine> engine, int64_t max_requests) {
  server::ServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  options.model_id = kModelId;
  options.max_queue = max_requests + 16;
  options.http_threads = int(std::min<int64_t>(max_requests + 16, 1 << 15));
  options.log_requests = false;
  options.shutdown_grace = std::chrono::milliseconds(0);
  auto server = std::make_unique<server::OpenAiServer>(std::move(engine), options);
  auto port = server->bind();
  if (!port.ok()) return port.error();
  return std::unique_ptr<ServeTarget>(new HttpTarget(std::move(server), *port));
}

}  // namespace kiln
