// The kiln CLI's subcommands.
#pragma once

#include <string>

#include "runtime/engine/engine.h"
#include "runtime/support/error.h"
#include "tools/kiln/cli_args.h"

namespace kiln {

int runCommand(int argc, char** argv);
int benchCommand(int argc, char** argv);

// Shared option handling: --device, --threads.
Result<EngineOptions> engineOptionsFrom(const CliArgs& args);

// Prints "kiln: error: MESSAGE" on stderr and returns exit status 1.
int fail(const std::string& message);

}  // namespace kiln
