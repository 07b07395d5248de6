#include "tools/kiln/cli_args.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace kiln {

Result<CliArgs> CliArgs::parse(int argc, char** argv, int first,
                               const std::set<std::string>& value_flags,
                               const std::set<std::string>& switch_flags) {
  CliArgs args;
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.size() < 3 || arg.rfind("--", 0) != 0) {
      args.positionals_.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2), value;
    bool inline_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    if (switch_flags.count(name)) {
      if (inline_value) return makeError("--{} takes no value", name);
      args.values_[name] = "1";
    } else if (value_flags.count(name)) {
      if (!inline_value) {
        if (i + 1 >= argc) return makeError("--{} needs a value", name);
        value = argv[++i];
      }
      args.values_[name] = value;
    } else {
      std::string known;
      for (const auto& f : value_flags) known += " --" + f;
      for (const auto& f : switch_flags) known += " --" + f;
      return makeError("unknown option --{}; accepted:{}", name, known);
    }
  }
  return args;
}

std::optional<std::string> CliArgs::get(const std::string& flag) const {
  auto it = values_.find(flag);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

Result<int64_t> CliArgs::getInt(const std::string& flag, int64_t fallback) const {
  auto value = get(flag);
  if (!value) return fallback;
  errno = 0;
  char* end = nullptr;
  long long parsed = std::strtoll(value->c_str(), &end, 10);
  if (errno || end == value->c_str() || *end)
    return makeError("--{} '{}' is not an integer", flag, *value);
  return int64_t(parsed);
}

Result<double> CliArgs::getDouble(const std::string& flag, double fallback) const {
  auto value = get(flag);
  if (!value) return fallback;
  errno = 0;
  char* end = nullptr;
  double parsed = std::strtod(value->c_str(), &end);
  if (errno || end == value->c_str() || *end || !std::isfinite(parsed))
    return makeError("--{} '{}' is not a number", flag, *value);
  return parsed;
}

}  // namespace kiln
