// The kiln CLI's subcommands.
#pragma once

#include <optional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/engine/engine.h"
#include "runtime/support/error.h"
#include "tools/kiln/cli_args.h"

namespace kiln {

int runCommand(int argc, char** argv);
int generateCommand(int argc, char** argv);
int benchCommand(int argc, char** argv);
int serveCommand(int argc, char** argv);

// The subcommands' flag tables (cli_flags.cc).
const CliCommand& runCli();
const CliCommand& generateCli();
const CliCommand& benchCli();
const CliCommand& serveCli();

// Parses a subcommand's arguments from argv[first]; when they ask for
// --help or --list-flags, prints it to stdout. Returns the exit status when
// the command is done (help, list, or an error already printed).
std::optional<int> parseCommandLine(int argc, char** argv, int first, const CliCommand& command, CliArgs& args);

// The engine flags both subcommands share (--device, --dtype, --threads,
// --gpu-memory-fraction, --model-source) and the CUDA A/B switches, which
// are an error with --device cpu.
Result<EngineOptions> engineOptionsFrom(const CliArgs& args);

// The batching flags generate and bench serve take (--max-sequences,
// --max-batch-tokens, --kv-cache-tokens), into `options` where given.
Status batchingOptionsFrom(const CliArgs& args, EngineOptions& options);
// The first batching flag given, for the commands that size their engine themselves.
std::optional<std::string> batchingFlagGiven(const CliArgs& args);

// The kiln-compile flags a model (not an artifact) is compiled with
// (--quant-weights, --quant-group-size, --quant-kv), validated as
// kiln-compile validates them.
Result<std::vector<std::string>> compileFlagsFrom(const CliArgs& args);

// Opens `model` (an artifact directory, or a model compiled through the
// compile cache with `compile_flags`, for the GPU's target when the CUDA
// backend runs it) on the backend `options` asks for.
Result<std::unique_ptr<Engine>> openEngine(const std::string& model, EngineOptions options,
                                           const std::vector<std::string>& compile_flags);

// kiln bench ppl MODEL --text FILE (perplexity.cc), after the bench
// arguments are parsed.
int perplexityCommand(const CliArgs& args);

// kiln bench serve MODEL (serve_bench.cc), after the bench arguments are parsed.
int serveBenchCommand(const CliArgs& args);
// kiln bench spec (spec_bench.cc): plain and speculative decoding of the
// shipped prompts, per batch size.
int specBenchCommand(const CliArgs& args);

// kiln bench decode ARTIFACT --verify (verify_bench.cc): one verify step
// over a full tree of the artifact's --spec-tree a sequence beside one
// plain decode step, `batch` sequences after `prompt`, medians in ms.
struct VerifyTiming {
  std::string tree;  // "widths:4,4"
  int64_t nodes = 0, batch = 0, context = 0;
  double plain_ms = 0;
  double verify_ms = 0;         // the accepted path walked over the device argmax (ids back)
  double verify_logits_ms = 0;  // every node's logits copied back too (as the engine asks)
};
Result<VerifyTiming> benchVerifySteps(Engine& engine, const std::vector<int32_t>& prompt, int64_t batch, int runs);
void printVerifyTiming(const VerifyTiming& timing);
nlohmann::json verifyTimingJson(const VerifyTiming& timing);

// Runs a peer script (share/kiln/scripts/NAME beside the binary) with
// `input` written as JSON to a temporary file passed after `input_flag`,
// then `args`; returns the JSON object it prints on stdout, which must hold
// `required`. `needs` says what the peer needs when it fails (bench_command.cc).
Result<nlohmann::json> runPeerScript(const char* name, const char* input_flag, const nlohmann::json& input,
                                     const std::string& args, const char* required, const char* needs);

// Prints "kiln: error: MESSAGE" on stderr and returns exit status 1.
int fail(const std::string& message);

}  // namespace kiln
