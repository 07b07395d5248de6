// kiln serve MODEL [options]: the OpenAI-compatible HTTP server
// (runtime/server) in front of one engine; the options are serveCli()'s
// table (cli_flags.cc). Requests are logged on stderr, one line each.
// SIGINT/SIGTERM: stop taking requests, let the running ones finish within
// --shutdown-grace-seconds, cancel the rest, exit 0.
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <unistd.h>
#include <thread>

#include <fmt/format.h>

#include "runtime/server/openai_server.h"
#include "tools/kiln/cli_args.h"
#include "tools/kiln/commands.h"

namespace kiln {
namespace {

// The id clients name in `model`: the MODEL argument's file or folder name,
// without .gguf (smollm2, SmolLM2-135M-Instruct.Q4_1, Llama-3.1-8B-Instruct).
std::string defaultModelId(const std::string& model) {
  std::filesystem::path path(model);
  if (!path.has_filename()) path = path.parent_path();
  std::string id = path.filename().string();
  if (path.extension() == ".gguf") id = path.stem().string();
  return id.empty() ? model : id;
}

int stop_pipe[2] = {-1, -1};
void onStopSignal(int signal) {
  const unsigned char number = static_cast<unsigned char>(signal);
  (void)!write(stop_pipe[1], &number, 1);  // async-signal-safe
}

Result<int64_t> intFlag(const CliArgs& args, const char* name, int64_t fallback, int64_t lo, int64_t hi) {
  auto value = args.getInt(name, fallback);
  if (!value.ok()) return value.error();
  if (*value < lo || *value > hi) return makeError("--{} {} is invalid: expected {} to {}", name, *value, lo, hi);
  return *value;
}

}  // namespace

int serveCommand(int argc, char** argv) {
  CliArgs args;
  if (auto done = parseCommandLine(argc, argv, 2, serveCli(), args)) return *done;
  if (args.positionals().size() != 1)
    return fail("usage: kiln serve MODEL [--host H] [--port P]; `kiln serve --help` lists the options");
  auto options = engineOptionsFrom(args);
  if (!options.ok()) return fail(options.error().message);
  options->progress = !args.has("quiet");
  if (Status batching = batchingOptionsFrom(args, *options); !batching.ok()) return fail(batching.error().message);
  auto max_context = intFlag(args, "max-context", 0, 0, std::numeric_limits<int32_t>::max());
  if (!max_context.ok()) return fail(max_context.error().message);
  options->max_context = *max_context;
  if (auto path = args.get("chat-template")) {
    std::ifstream in(*path, std::ios::binary);
    if (!in) return fail(fmt::format("--chat-template {}: cannot read the file", *path));
    std::stringstream text;
    text << in.rdbuf();
    options->chat_template = text.str();
  }
  auto compile_flags = compileFlagsFrom(args);
  if (!compile_flags.ok()) return fail(compile_flags.error().message);

  server::ServerOptions server_options;
  server_options.host = args.get("host").value_or("127.0.0.1");
  auto port = intFlag(args, "port", 8000, 0, 65535);
  auto max_queue = intFlag(args, "max-queue", 128, 1, 1 << 20);
  auto grace = intFlag(args, "shutdown-grace-seconds", 10, 0, 24 * 3600);
  auto max_messages = intFlag(args, "max-messages", 1024, 1, 1 << 20);
  for (const auto* value : {&port, &max_queue, &grace, &max_messages})
    if (!value->ok()) return fail(value->error().message);
  server_options.port = int(*port);
  server_options.max_queue = *max_queue;
  server_options.shutdown_grace = std::chrono::seconds(*grace);
  server_options.max_messages = *max_messages;
  server_options.api_key = args.get("api-key").value_or("");
  server_options.model_id = args.get("model-name").value_or(defaultModelId(args.positionals()[0]));
  server_options.log_requests = !args.has("quiet");
  server_options.http_threads = int(options->max_sequences + *max_queue + 8);

  // SIGINT and SIGTERM only write their number into a pipe; one thread reads
  // it and shuts the server down outside the handler. (Masking the signals
  // and sigwait would not do: OpenBLAS starts threads before main.)
  if (pipe(stop_pipe) != 0) return fail("cannot create the signal pipe");
  struct sigaction action {};
  action.sa_handler = onStopSignal;
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a client gone mid-answer is a failed write, not a dead server
  std::atomic<server::OpenAiServer*> running{nullptr};
  std::atomic<bool> signalled{false};
  std::thread signal_thread([&] {
    unsigned char signal = 0;
    while (read(stop_pipe[0], &signal, 1) < 0 && errno == EINTR) {
    }
    if (signal == 0) return;  // woken by an exit path below
    signalled = true;
    server::OpenAiServer* server = running.load();
    if (!server) std::_Exit(128 + signal);  // still loading: nothing to finish
    server->shutdown();
  });
  auto stopSignalThread = [&] {
    const unsigned char wake = 0;
    if (write(stop_pipe[1], &wake, 1) != 1) std::_Exit(1);
    signal_thread.join();
  };

  auto engine = openEngine(args.positionals()[0], *options, *compile_flags);
  if (!engine.ok()) {
    stopSignalThread();
    return fail(engine.error().message);
  }
  const std::string backend = (*engine)->backendName();
  const int64_t context = (*engine)->contextLength();
  server::OpenAiServer server(engine.take(), server_options);
  auto bound = server.bind();
  if (!bound.ok()) {
    stopSignalThread();
    return fail(bound.error().message);
  }
  running = &server;
  std::fprintf(stderr, "kiln serve: %s (%s, context %lld) listening on http://%s:%d\n",
               server_options.model_id.c_str(), backend.c_str(), static_cast<long long>(context),
               server_options.host.c_str(), *bound);
  std::fflush(stderr);
  server.serve();  // returns once a signal's shutdown has finished, or when listening fails
  if (!signalled) {
    stopSignalThread();
    return fail("the server stopped listening unexpectedly");
  }
  signal_thread.join();
  std::fprintf(stderr, "kiln serve: stopped\n");
  return 0;
}

}  // namespace kiln
