// kiln generate MODEL --input FILE [--output FILE]: offline batch generation.
// Every line of the input that reads as a request (request_json.h) is
// submitted at once, so the engine batches them; the answers are written in
// input order, each as soon as it and every line before it are done. Lines
// that fail are written as errors in their place and named on stderr; the
// rest still run. The format and exit statuses are in generateCli()'s help
// (cli_flags.cc).
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/engine/engine.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tools/kiln/commands.h"
#include "tools/kiln/speculation_flags.h"
#include "tools/kiln/request_json.h"
#include "tools/kiln/request_progress.h"

namespace kiln {
namespace {

std::atomic<bool> interrupted{false};
void onInterrupt(int) { interrupted = true; }

// Exit statuses (also in generateCli()'s help).
constexpr int kSomeLinesFailed = 2;
constexpr int kInterrupted = 130;

// One non-blank input line and what became of it.
struct Line {
  int64_t number = 0;        // 1-based line of the input file
  nlohmann::json id;         // echoed
  std::string error;         // "line N: ..." when it could not run
  int64_t first_id = -1;     // the engine's id of completion 0
  int n = 1;                 // completions
  std::vector<std::string> texts;  // [n]
  int logprobs = -1;               // alternatives asked for; -1: none
  std::vector<std::vector<sampling::TokenLogprobs>> token_logprobs;  // [n][generated]
};

// The input's non-blank lines, with their 1-based numbers.
std::vector<std::pair<int64_t, std::string>> readLines(std::istream& in) {
  std::vector<std::pair<int64_t, std::string>> lines;
  std::string text;
  for (int64_t number = 1; std::getline(in, text); ++number) {
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.find_first_not_of(" \t") == std::string::npos) continue;
    lines.emplace_back(number, std::move(text));
  }
  return lines;
}

bool lineDone(const Engine& engine, const Line& line) {
  if (line.first_id < 0) return true;
  for (int j = 0; j < line.n; ++j) {
    const RequestStats* stats = engine.stats(line.first_id + j);
    if (stats && stats->finish == FinishReason::kRunning) return false;
  }
  return true;
}

// Per generated token {"token": its text, "logprob", "top_logprobs":
// [{"token", "logprob"}]}, as the server's chat form (-inf as -9999.0).
nlohmann::ordered_json logprobsJson(const Tokenizer& tokenizer, const std::vector<sampling::TokenLogprobs>& tokens) {
  auto finite = [](float x) { return std::isfinite(x) ? double(x) : -9999.0; };
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const sampling::TokenLogprobs& t : tokens) {
    nlohmann::ordered_json top = nlohmann::ordered_json::array();
    for (const auto& [id, logprob] : t.top)
      top.push_back({{"token", tokenizer.tokenBytes(id)}, {"logprob", finite(logprob)}});
    list.push_back({{"token", tokenizer.tokenBytes(t.token)}, {"logprob", finite(t.logprob)}, {"top_logprobs", top}});
  }
  return list;
}

// The answer line of input line `index`; `failed` says whether any part of it failed.
nlohmann::ordered_json answerOf(const Engine& engine, const Line& line, int64_t index, bool& failed) {
  nlohmann::ordered_json out = {{"index", index}};
  if (!line.id.is_null()) out["id"] = line.id;
  if (!line.error.empty()) {
    failed = true;
    out["error"] = line.error;
    return out;
  }
  nlohmann::ordered_json choices = nlohmann::ordered_json::array();
  int64_t prompt_tokens = 0;
  for (int j = 0; j < line.n; ++j) {
    nlohmann::ordered_json choice = {{"index", j}, {"text", line.texts[size_t(j)]}};
    if (line.logprobs >= 0) choice["logprobs"] = logprobsJson(engine.tokenizer(), line.token_logprobs[size_t(j)]);
    const RequestStats* stats = engine.stats(line.first_id + j);
    if (!stats) {
      failed = true;
      choice["finish_reason"] = "error";
      choice["error"] = fmt::format("the engine has no completion {} of this request", j);
    } else {
      prompt_tokens = stats->prompt_tokens;
      choice["finish_reason"] = finishReasonName(stats->finish);
      choice["completion_tokens"] = stats->generated_tokens;
      if (stats->finish == FinishReason::kError) {
        failed = true;
        choice["error"] = stats->error;
      }
    }
    choices.push_back(std::move(choice));
  }
  out["prompt_tokens"] = prompt_tokens;
  out["choices"] = std::move(choices);
  return out;
}

}  // namespace

int generateCommand(int argc, char** argv) {
  CliArgs args;
  if (auto done = parseCommandLine(argc, argv, 2, generateCli(), args)) return *done;
  if (args.positionals().size() != 1)
    return fail("usage: kiln generate MODEL --input FILE [--output FILE]; `kiln generate --help` lists the options");
  auto input_path = args.get("input");
  if (!input_path) return fail("kiln generate: --input FILE names the requests (JSON lines; - for stdin)");
  auto options = engineOptionsFrom(args);
  if (!options.ok()) return fail(options.error().message);
  options->progress = !args.has("quiet");
  if (Status batching = batchingOptionsFrom(args, *options); !batching.ok()) return fail(batching.error().message);
  auto max_context = args.getInt("max-context", 0);
  if (!max_context.ok()) return fail(max_context.error().message);
  if (*max_context < 0)
    return fail(fmt::format("--max-context {} is invalid: expected a positive token count", *max_context));
  options->max_context = *max_context;
  auto compile_flags = compileFlagsFrom(args);
  if (!compile_flags.ok()) return fail(compile_flags.error().message);
  auto speculation = speculationFrom(args);
  if (!speculation.ok()) return fail(speculation.error().message);
  options->draft_model = draftModelFrom(args);
  options->draft_head = draftHeadFrom(args);
  for (const std::string& flag : speculationCompileFlags(*speculation, args.positionals()[0]))
    compile_flags->push_back(flag);

  // The input and the output first: a wrong path must not cost a model load.
  std::vector<std::pair<int64_t, std::string>> texts;
  if (*input_path == "-") {
    texts = readLines(std::cin);
  } else {
    std::ifstream in(*input_path);
    if (!in) return fail(fmt::format("{}: cannot read the requests", *input_path));
    texts = readLines(in);
  }
  const std::string output_path = args.get("output").value_or("-");
  std::ofstream output_file;
  if (output_path != "-") {
    output_file.open(output_path, std::ios::trunc);
    if (!output_file) return fail(fmt::format("{}: cannot write the answers", output_path));
  }
  std::ostream& out = output_path == "-" ? std::cout : output_file;

  auto engine_or = openEngine(args.positionals()[0], *options, *compile_flags);
  if (!engine_or.ok()) return fail(engine_or.error().message);
  Engine& engine = **engine_or;
  if (Status spec = engine.checkSpeculation(*speculation); !spec.ok()) return fail(spec.error().message);

  // Every line that reads as a request is submitted now; the engine batches them.
  std::vector<Line> lines(texts.size());
  int64_t output_tokens = 0, submitted = 0;
  auto lineFailed = [](Line& line, const std::string& message) {
    line.error = fmt::format("line {}: {}", line.number, message);
    std::fprintf(stderr, "kiln: error: %s\n", line.error.c_str());
  };
  for (size_t i = 0; i < texts.size(); ++i) {
    Line& line = lines[i];
    line.number = texts[i].first;
    auto parsed = requestFromJsonText(texts[i].second);
    if (!parsed.ok()) {
      lineFailed(line, parsed.error().message);
      continue;
    }
    line.id = parsed->id;
    // A line's own "speculation" wins over --spec.
    if (!parsed->request.speculation.enabled()) parsed->request.speculation = *speculation;
    line.n = parsed->request.sampling.n;
    line.texts.resize(size_t(line.n));
    line.logprobs = parsed->request.sampling.logprobs;
    line.token_logprobs.resize(size_t(line.n));
    // Completion j of this line has the id first_id + j (set before any step runs).
    auto id = engine.submit(std::move(parsed->request),
                            [&line, &output_tokens](int64_t request_id, int32_t token, std::string_view text) {
                              line.texts[size_t(request_id - line.first_id)].append(text);
                              if (token >= 0) ++output_tokens;
                            },
                            [&line](int64_t request_id, const sampling::TokenLogprobs& logprobs) {
                              line.token_logprobs[size_t(request_id - line.first_id)].push_back(logprobs);
                            });
    if (!id.ok()) {
      lineFailed(line, id.error().message);
      continue;
    }
    line.first_id = *id;
    ++submitted;
  }
  std::fprintf(stderr, "kiln generate: %lld requests of %zu lines submitted (%s)\n", (long long)submitted,
               lines.size(), engine.backendName().c_str());

  // Steps until every line is answered, writing each in order as it completes.
  RequestProgress progress(options->progress, int64_t(lines.size()), "kiln generate: ");
  size_t written = 0;
  int64_t failed_lines = 0;
  auto writeReady = [&] {
    for (; written < lines.size() && lineDone(engine, lines[written]); ++written) {
      bool failed = false;
      out << answerOf(engine, lines[written], int64_t(written), failed)
                 .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
          << '\n';
      failed_lines += failed;
    }
    out.flush();
  };
  std::signal(SIGINT, onInterrupt);
  bool cancelled = false;
  Status status;
  while (true) {
    writeReady();
    progress.update(int64_t(written), output_tokens);
    if (engine.idle()) break;
    if (interrupted && !cancelled) {
      for (const Line& line : lines)
        for (int j = 0; line.first_id >= 0 && j < line.n; ++j) engine.cancel(line.first_id + j);
      cancelled = true;
    }
    status = engine.step();
    if (!status.ok()) break;
  }
  std::signal(SIGINT, SIG_DFL);
  if (!status.ok()) {
    // The engine itself failed: what is unanswered is answered with its error.
    for (Line& line : lines)
      if (!lineDone(engine, line)) {
        line.error = fmt::format("line {}: {}", line.number, status.error().message);
        line.first_id = -1;
      }
    writeReady();
    progress.finish(int64_t(written), output_tokens);
    return fail(status.error().message);
  }
  progress.finish(int64_t(written), output_tokens);
  if (!out) return fail(fmt::format("{}: writing the answers failed", output_path));
  if (cancelled) return kInterrupted;
  if (failed_lines > 0) {
    std::fprintf(stderr, "kiln generate: %lld of %zu lines failed\n", (long long)failed_lines, lines.size());
    return kSomeLinesFailed;
  }
  return 0;
}

}  // namespace kiln
