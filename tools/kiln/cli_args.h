// A small argument reader for the kiln CLI: positionals and --flag VALUE /
// --flag=VALUE options, with errors that name the flag and what was expected.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "runtime/support/error.h"

namespace kiln {

class CliArgs {
 public:
  // `value_flags` take a value; `switch_flags` do not.
  static Result<CliArgs> parse(int argc, char** argv, int first,
                               const std::set<std::string>& value_flags,
                               const std::set<std::string>& switch_flags);

  const std::vector<std::string>& positionals() const { return positionals_; }
  bool has(const std::string& flag) const { return values_.count(flag) > 0; }
  std::optional<std::string> get(const std::string& flag) const;
  Result<int64_t> getInt(const std::string& flag, int64_t fallback) const;
  Result<double> getDouble(const std::string& flag, double fallback) const;

 private:
  std::vector<std::string> positionals_;
  std::map<std::string, std::string> values_;
};

}  // namespace kiln
