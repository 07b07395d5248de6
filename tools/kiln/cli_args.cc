#include "tools/kiln/cli_args.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace kiln {

const CliFlag* CliCommand::find(std::string_view flag) const {
  for (const CliFlag& f : flags)
    if (f.name == flag) return &f;
  return nullptr;
}

void CliCommand::printHelp(std::FILE* out) const {
  std::fprintf(out, "usage: %.*s\n%.*s\n", int(usage.size()), usage.data(), int(about.size()), about.data());
  auto spelled = [](const CliFlag& f) {
    std::string s("--");
    s.append(f.name);
    if (f.takesValue()) s.append(" ").append(f.value);
    return s;
  };
  // Help in one column; a flag longer than that has its help on the next line.
  constexpr size_t kMaxWidth = 24;
  size_t width = 0;
  for (const CliFlag& f : flags)
    if (spelled(f).size() <= kMaxWidth) width = std::max(width, spelled(f).size());
  // Groups in the order of their first flag, so no group can be left out.
  std::vector<std::string_view> groups;
  for (const CliFlag& f : flags)
    if (std::find(groups.begin(), groups.end(), f.group) == groups.end()) groups.push_back(f.group);
  for (std::string_view group : groups) {
    std::fprintf(out, "\n%.*s:\n", int(group.size()), group.data());
    for (const CliFlag& f : flags)
      if (f.group == group) {
        const std::string flag = spelled(f);
        if (flag.size() > width) std::fprintf(out, "  %s\n", flag.c_str());
        std::fprintf(out, "  %-*s  %.*s\n", int(width), flag.size() > width ? "" : flag.c_str(), int(f.help.size()),
                     f.help.data());
      }
  }
}

void CliCommand::printFlagList(std::FILE* out) const {
  for (const CliFlag& f : flags) {
    std::fprintf(out, "--%.*s", int(f.name.size()), f.name.data());
    if (f.takesValue()) std::fprintf(out, "=%.*s", int(f.value.size()), f.value.data());
    std::fputc('\n', out);
  }
}

Result<CliArgs> CliArgs::parse(int argc, char** argv, int first, const CliCommand& command) {
  CliArgs args;
  args.command_ = &command;
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h") arg = "--help";
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
    const CliFlag* flag = command.find(name);
    if (!flag)
      return makeError("unknown option --{} for kiln {}; `kiln {} --help` lists the options", name, command.name,
                       command.name);
    if (!flag->takesValue()) {
      if (inline_value) return makeError("--{} takes no value", name);
      args.values_.insert_or_assign(name, std::string());  // a switch: present, no value
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= argc) return makeError("--{} needs a value ({})", name, flag->value);
      value = argv[++i];
    }
    args.values_[name] = value;
  }
  return args;
}

const CliFlag& CliArgs::declared(std::string_view flag) const {
  const CliFlag* f = command_->find(flag);
  if (!f) {
    std::fprintf(stderr, "kiln: internal error: kiln %.*s reads --%.*s, which its flag table lacks\n",
                 int(command_->name.size()), command_->name.data(), int(flag.size()), flag.data());
    std::abort();
  }
  return *f;
}

bool CliArgs::has(std::string_view flag) const {
  declared(flag);
  return values_.find(flag) != values_.end();
}

std::optional<std::string> CliArgs::get(std::string_view flag) const {
  declared(flag);
  auto it = values_.find(flag);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

Result<int64_t> CliArgs::getInt(std::string_view flag, int64_t fallback) const {
  auto value = get(flag);
  if (!value) return fallback;
  errno = 0;
  char* end = nullptr;
  long long parsed = std::strtoll(value->c_str(), &end, 10);
  if (errno || end == value->c_str() || *end)
    return makeError("--{} '{}' is not an integer", flag, *value);
  return int64_t(parsed);
}

Result<double> CliArgs::getDouble(std::string_view flag, double fallback) const {
  auto value = get(flag);
  if (!value) return fallback;
  errno = 0;
  char* end = nullptr;
  double parsed = std::strtod(value->c_str(), &end);
  if (errno || end == value->c_str() || *end || !std::isfinite(parsed))
    return makeError("--{} '{}' is not a number", flag, *value);
  return parsed;
}

std::vector<const CliFlag*> CliArgs::cudaSwitchesGiven() const {
  std::vector<const CliFlag*> given;
  for (const CliFlag& f : command_->flags)
    if (f.cuda_field && values_.count(f.name) > 0) given.push_back(&f);
  return given;
}

}  // namespace kiln
