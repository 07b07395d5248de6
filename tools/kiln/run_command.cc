// kiln run MODEL [PROMPT] [options]; the options are in runCli()'s table
// (cli_flags.cc). Streams the answer to stdout; loading progress and the
// closing tokens/s summary go to stderr. Ctrl-C stops generation cleanly,
// with the summary.
#include <atomic>
#include <csignal>
#include <filesystem>
#include <cstdio>
#include <iostream>
#include <iterator>

#include "runtime/engine/engine.h"
#include "tools/kiln/cli_args.h"
#include "tools/kiln/commands.h"
#include "tools/kiln/compile_cache.h"
#include "tools/kiln/speculation_flags.h"

namespace kiln {
namespace {

std::atomic<bool> interrupted{false};
void onInterrupt(int) { interrupted = true; }

}  // namespace

Result<std::unique_ptr<Engine>> openEngine(const std::string& model, EngineOptions options,
                                           const std::vector<std::string>& compile_flags) {
  // Compile options mean nothing to an artifact, already compiled: an error
  // rather than a run that silently ignores them.
  std::error_code ec;
  if (!compile_flags.empty() && std::filesystem::exists(std::filesystem::path(model) / "manifest.json", ec))
    return makeError("{} is a compiled artifact: {} applies when compiling a model (pass the model instead)", model,
                     compile_flags.front().substr(0, compile_flags.front().find('=')));
  // The CUDA kernels take bf16 activations, the CPU executor f32: a model
  // (not an artifact) is compiled for the backend that will run it.
  // Its kernel variants are chosen for the GPU's target, or none for the CPU.
  std::string why, target;
  const bool cuda = options.device != "cpu" && cudaAvailable(&why, &target);
  if (options.device == "cuda" && !cuda) return makeError("--device cuda: no CUDA backend: {}", why);
  if (cuda) {
    // f32: kiln-compile's default activation type.
    std::vector<std::string> flags{"--target=" + target};
    if (options.cuda_dtype == "bf16") flags.push_back("--activation-type=bf16");
    flags.insert(flags.end(), compile_flags.begin(), compile_flags.end());
    auto artifact = artifactFor({model, flags, options.progress});
    if (!artifact.ok()) return artifact.error();
    EngineOptions gpu = options;
    gpu.device = "cuda";
    if (!options.draft_model.empty()) {
      auto draft = artifactFor({options.draft_model, flags, options.progress});
      if (!draft.ok()) return makeError("draft model: {}", draft.error().message);
      gpu.draft_model = *draft;
    }
    auto engine = Engine::open(*artifact, gpu);
    if (engine.ok() || options.device == "cuda") return engine;
    why = engine.error().message;
  }
  if (options.device == "auto" && options.progress) {
    // One line: the reason's first line, without a trailing "tried:" list.
    std::string reason = why.substr(0, why.find('\n'));
    if (reason.size() > 7 && reason.compare(reason.size() - 7, 7, "; tried") == 0) reason.resize(reason.size() - 7);
    if (reason.size() > 8 && reason.compare(reason.size() - 8, 8, "; tried:") == 0) reason.resize(reason.size() - 8);
    std::fprintf(stderr, "kiln: CUDA backend unavailable (%s); running on the CPU\n", reason.c_str());
  }
  std::vector<std::string> cpu_flags{"--target=cpu"};
  cpu_flags.insert(cpu_flags.end(), compile_flags.begin(), compile_flags.end());
  auto artifact = artifactFor({model, cpu_flags, options.progress});
  if (!artifact.ok()) return artifact.error();
  options.device = "cpu";
  // A draft model (--spec=draft:PATH) is compiled as the target is.
  if (!options.draft_model.empty()) {
    auto draft = artifactFor({options.draft_model, cpu_flags, options.progress});
    if (!draft.ok()) return makeError("draft model: {}", draft.error().message);
    options.draft_model = *draft;
  }
  return Engine::open(*artifact, options);
}

int runCommand(int argc, char** argv) {
  CliArgs args;
  if (auto done = parseCommandLine(argc, argv, 2, runCli(), args)) return *done;
  if (args.positionals().empty() || args.positionals().size() > 2)
    return fail("usage: kiln run MODEL [PROMPT] [options]; `kiln run --help` lists them");
  auto options = engineOptionsFrom(args);
  if (!options.ok()) return fail(options.error().message);
  options->progress = !args.has("quiet");
  auto max_context = args.getInt("max-context", 0);
  if (!max_context.ok()) return fail(max_context.error().message);
  if (*max_context < 0)
    return fail(fmt::format("--max-context {} is invalid: expected a positive token count", *max_context));
  options->max_context = *max_context;

  GenerationRequest request;
  if (args.positionals().size() == 2) {
    request.prompt = args.positionals()[1];
  } else {
    request.prompt.assign(std::istreambuf_iterator<char>(std::cin), {});
  }
  request.chat = args.has("chat");
  if (auto system = args.get("system"))
    request.messages = {{"system", *system}, {"user", request.prompt}};
  request.truncate_prompt = args.has("truncate");
  auto& s = request.sampling;
  auto max_tokens = args.getInt("max-tokens", 256);
  auto temperature = args.getDouble("temperature", 0.0);
  auto top_p = args.getDouble("top-p", 1.0);
  auto top_k = args.getInt("top-k", 0);
  auto min_p = args.getDouble("min-p", 0.0);
  auto seed = args.getInt("seed", 0);
  auto repetition = args.getDouble("repetition-penalty", 1.0);
  for (const Error* e : {max_tokens.ok() ? nullptr : &max_tokens.error(),
                         temperature.ok() ? nullptr : &temperature.error(),
                         top_p.ok() ? nullptr : &top_p.error(),
                         top_k.ok() ? nullptr : &top_k.error(),
                         min_p.ok() ? nullptr : &min_p.error(),
                         seed.ok() ? nullptr : &seed.error(),
                         repetition.ok() ? nullptr : &repetition.error()})
    if (e) return fail(e->message);
  s.max_tokens = int(*max_tokens);
  s.temperature = float(*temperature);
  s.top_p = float(*top_p);
  s.top_k = int(*top_k);
  s.min_p = float(*min_p);
  s.seed = uint64_t(*seed);
  s.repetition_penalty = float(*repetition);
  if (auto stop = args.get("stop")) s.stop_strings.push_back(*stop);
  s.ignore_eos = args.has("ignore-eos");
  if (Status valid = s.validate(); !valid.ok()) return fail(valid.error().message);

  auto compile_flags = compileFlagsFrom(args);
  if (!compile_flags.ok()) return fail(compile_flags.error().message);
  auto speculation = speculationFrom(args);
  if (!speculation.ok()) return fail(speculation.error().message);
  options->draft_model = draftModelFrom(args);
  options->draft_head = draftHeadFrom(args);
  for (const std::string& flag : speculationCompileFlags(*speculation, args.positionals()[0]))
    compile_flags->push_back(flag);
  auto engine = openEngine(args.positionals()[0], *options, *compile_flags);
  if (!engine.ok()) return fail(engine.error().message);
  if (Status spec = (*engine)->checkSpeculation(*speculation); !spec.ok()) return fail(spec.error().message);
  request.speculation = *speculation;

  auto id = (*engine)->submit(std::move(request), [](int64_t, int32_t, std::string_view text) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  });
  if (!id.ok()) return fail(id.error().message);
  std::signal(SIGINT, onInterrupt);
  Status status = (*engine)->runUntilIdle([&] {
    if (interrupted) (*engine)->cancel(*id);
    return false;
  });
  std::signal(SIGINT, SIG_DFL);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  if (!status.ok()) return fail(status.error().message);
  const RequestStats* stats = (*engine)->stats(*id);
  double prefill_tps = stats->prefill_seconds > 0 ? stats->prompt_tokens / stats->prefill_seconds : 0;
  double decode_tps = stats->decode_seconds > 0 && stats->generated_tokens > 1
                          ? (stats->generated_tokens - 1) / stats->decode_seconds
                          : 0;
  // Speculation: accepted of drafted tokens, and the mean accepted length,
  // accepted drafts a verify row that carried drafts (each row also adds
  // the model's own next token).
  std::string spec;
  if (speculation->enabled())
    spec = fmt::format(" | spec {} {}: {:.0f}% of {} drafts accepted, mean accepted length {:.2f}",
                       specMethodName(*speculation), speculation->tree.text(),
                       stats->spec_drafted_tokens > 0
                           ? 100.0 * double(stats->spec_accepted_tokens) / double(stats->spec_drafted_tokens)
                           : 0.0,
                       stats->spec_drafted_tokens,
                       double(stats->spec_accepted_tokens) / double(std::max<int64_t>(stats->spec_rows, 1)));
  std::fprintf(stderr,
               "kiln: %lld prompt tokens, %.1f tok/s prefill | %lld generated, %.1f tok/s "
               "decode | %s | %s%s\n",
               (long long)stats->prompt_tokens, prefill_tps, (long long)stats->generated_tokens,
               decode_tps, std::string(finishReasonName(stats->finish)).c_str(),
               (*engine)->backendName().c_str(), spec.c_str());
  if (stats->finish == FinishReason::kError) return fail(stats->error);
  return stats->finish == FinishReason::kCancelled ? 130 : 0;
}

}  // namespace kiln
