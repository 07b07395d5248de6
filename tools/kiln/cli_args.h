// The kiln CLI's flags and their reader. Each subcommand has one table of
// CliFlag (cli_flags.cc); the parser accepts exactly the table's flags and
// --help is printed from it, so a flag is spelled in one place.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/cuda/cuda_tuning.h"
#include "runtime/support/error.h"

namespace kiln {

struct CliFlag {
  std::string_view name;   // without the leading "--"
  std::string_view value;  // the value's placeholder ("N", "cpu|cuda|auto"); empty: a switch
  std::string_view group;  // the --help section it is listed under
  std::string_view help;   // one line
  // A CUDA A/B switch: giving the flag sets this CudaTuning field to
  // `cuda_value` (EngineOptions::cuda); such a flag is an error on the CPU.
  bool cuda::CudaTuning::*cuda_field = nullptr;
  bool cuda_value = false;

  bool takesValue() const { return !value.empty(); }
};

// A subcommand: what --help prints above the flags, and its flag table.
struct CliCommand {
  std::string_view name;   // "run", "bench"
  std::string_view usage;  // "kiln run MODEL [PROMPT] [options]"
  std::string_view about;  // a few lines, printed under the usage
  std::vector<CliFlag> flags;

  const CliFlag* find(std::string_view flag) const;
  // The usage, the about text and every flag by group, for --help.
  void printHelp(std::FILE* out) const;
  // Every flag one a line, "--name" or "--name=PLACEHOLDER" (--list-flags).
  void printFlagList(std::FILE* out) const;
};

// The arguments of one subcommand: positionals and --flag VALUE /
// --flag=VALUE options, with errors that name the flag and what was
// expected. "-h" is --help.
class CliArgs {
 public:
  static Result<CliArgs> parse(int argc, char** argv, int first, const CliCommand& command);

  const std::vector<std::string>& positionals() const { return positionals_; }
  // Reading a flag the table lacks is a bug in kiln, not in the command
  // line: it aborts, so a flag read but not documented cannot ship.
  bool has(std::string_view flag) const;
  std::optional<std::string> get(std::string_view flag) const;
  Result<int64_t> getInt(std::string_view flag, int64_t fallback) const;
  Result<double> getDouble(std::string_view flag, double fallback) const;
  // The given flags that are CUDA A/B switches, in table order.
  std::vector<const CliFlag*> cudaSwitchesGiven() const;

 private:
  const CliFlag& declared(std::string_view flag) const;

  const CliCommand* command_ = nullptr;
  std::vector<std::string> positionals_;
  std::map<std::string, std::string, std::less<>> values_;
};

}  // namespace kiln
