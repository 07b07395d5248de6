// kiln: run, benchmark and (later) serve compiled models.
#include <cstdio>
#include <cstring>
#include <string>

#include "tools/kiln/commands.h"

namespace kiln {

int fail(const std::string& message) {
  std::fprintf(stderr, "kiln: error: %s\n", message.c_str());
  return 1;
}

}  // namespace kiln

int main(int argc, char** argv) {
  const char* usage =
      "usage: kiln <command> ...\n"
      "  run MODEL [PROMPT]   generate text (MODEL: a .gguf, an HF checkpoint directory,\n"
      "                       a compiled artifact, or a cached name such as smollm2)\n"
      "  bench decode MODEL   measure prefill and decode speed\n";
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::fputs(usage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 1 : 0;
  }
  std::string command = argv[1];
  if (command == "run") return kiln::runCommand(argc, argv);
  if (command == "bench") return kiln::benchCommand(argc, argv);
  return kiln::fail("unknown command '" + command + "'; expected run or bench");
}
