// kiln: run, batch-generate, benchmark and serve compiled models.
#include <cstdio>
#include <cstring>
#include <string>

#include "tools/kiln/commands.h"

namespace kiln {

int fail(const std::string& message) {
  std::fprintf(stderr, "kiln: error: %s\n", message.c_str());
  return 1;
}

std::optional<int> parseCommandLine(int argc, char** argv, int first, const CliCommand& command, CliArgs& args) {
  auto parsed = CliArgs::parse(argc, argv, first, command);
  if (!parsed.ok()) return fail(parsed.error().message);
  args = parsed.take();
  if (args.has("help")) {
    command.printHelp(stdout);
    return 0;
  }
  if (args.has("list-flags")) {
    command.printFlagList(stdout);
    return 0;
  }
  return std::nullopt;
}

}  // namespace kiln

int main(int argc, char** argv) {
  const char* usage =
      "usage: kiln <command> [options]\n"
      "  run MODEL [PROMPT]                    generate text\n"
      "  generate MODEL --input FILE           offline batch: JSON-lines requests in, answers out\n"
      "  bench decode|prefill|ppl|serve|spec MODEL\n"
      "                                        measure decode, prefill or serving speed beside a peer,\n"
      "                                        perplexity, or speculative decoding beside plain\n"
      "  serve MODEL                           an OpenAI-compatible HTTP server\n"
      "`kiln <command> --help` lists a command's options.\n";
  if (argc < 2) {
    std::fputs(usage, stderr);
    return 1;
  }
  std::string command = argv[1];
  if (command == "--help" || command == "-h") {
    std::fputs(usage, stdout);
    for (const kiln::CliCommand* sub : {&kiln::runCli(), &kiln::generateCli(), &kiln::benchCli(), &kiln::serveCli()}) {
      std::fputc('\n', stdout);
      sub->printHelp(stdout);
    }
    return 0;
  }
  if (command == "run") return kiln::runCommand(argc, argv);
  if (command == "generate") return kiln::generateCommand(argc, argv);
  if (command == "bench") return kiln::benchCommand(argc, argv);
#if KILN_HAVE_SERVER
  if (command == "serve") return kiln::serveCommand(argc, argv);
#else
  if (command == "serve") return kiln::fail("this kiln was built without cpp-httplib (libcpp-httplib-dev): no serve");
#endif
  return kiln::fail("unknown command '" + command +
                    "'; expected run, generate, bench or serve (`kiln --help` lists them)");
}
