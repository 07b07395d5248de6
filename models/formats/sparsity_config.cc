#include "models/formats/sparsity_config.h"

#include <fmt/format.h>

#include <cctype>
#include <nlohmann/json.hpp>
#include <regex>

#include "models/formats/error_text.h"

namespace kiln::formats {
namespace {

using json = nlohmann::json;
using Format = SparsityConfig::Format;

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// compressed-tensors' is_match for one pattern, without the module classes
// kiln cannot see: "Linear" is the class of every linear layer.
Result<bool> matches(const std::string& pattern, const std::string& module, bool linear,
                     const std::string& where) {
  if (pattern == "Linear") return linear;
  if (pattern.rfind("re:", 0) != 0) return pattern == module;
  try {
    // Python's re.match: anchored at the start, not at the end.
    std::regex re(pattern.substr(3));
    return std::regex_search(module, re, std::regex_constants::match_continuous);
  } catch (const std::regex_error& e) {
    return makeError("{}: pattern '{}' is not a regular expression kiln can read ({})", where,
                     printable(pattern), e.what());
  }
}

Result<std::vector<std::string>> patterns(const json& config, const char* key,
                                          const std::string& where) {
  std::vector<std::string> out;
  if (!config.contains(key) || config[key].is_null()) return out;
  const json& list = config[key];
  if (!list.is_array())
    return makeError("{}.{}: expected a list of module patterns, got {}", where, key,
                     list.type_name());
  for (const json& item : list) {
    if (!item.is_string())
      return makeError("{}.{}: expected module pattern strings, got {}", where, key,
                       item.type_name());
    out.push_back(item.get<std::string>());
  }
  return out;
}

}  // namespace

std::string_view sparsityFormatName(Format format) {
  switch (format) {
    case Format::kDense: return "dense";
    case Format::kSparse24Bitmask: return "sparse-24-bitmask";
    case Format::kSparseBitmask: return "sparse-bitmask";
  }
  return "unknown";
}

Result<bool> SparsityConfig::covers(const std::string& module, bool linear) const {
  bool targeted = targets.empty() && linear;
  for (const std::string& target : targets) {
    auto match = matches(target, module, linear, where + ".targets");
    if (!match.ok()) return match.error();
    targeted |= *match;
  }
  if (!targeted) return false;
  for (const std::string& skip : ignore) {
    auto match = matches(skip, module, linear, where + ".ignore");
    if (!match.ok()) return match.error();
    if (*match) return false;
  }
  return true;
}

Result<std::optional<SparsityConfig>> parseSparsityConfig(std::string_view config_json,
                                                          const std::string& name) {
  json root = json::parse(config_json, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) return std::optional<SparsityConfig>();
  // The package's own spot first, then its older one, then sparseml's.
  const json* found = nullptr;
  std::string where;
  for (const char* parent : {"quantization_config", "compression_config"}) {
    if (root.contains(parent) && root[parent].is_object() &&
        root[parent].contains("sparsity_config")) {
      found = &root[parent]["sparsity_config"];
      where = fmt::format("{}: {}.sparsity_config", name, parent);
      break;
    }
  }
  if (!found && root.contains("sparsity_config")) {
    found = &root["sparsity_config"];
    where = name + ": sparsity_config";
  }
  if (!found || found->is_null() || (found->is_object() && found->empty()))
    return std::optional<SparsityConfig>();
  const json& s = *found;
  if (!s.is_object()) return makeError("{}: expected an object, got {}", where, s.type_name());

  SparsityConfig config;
  config.where = where;
  if (!s.contains("format") || !s["format"].is_string())
    return makeError("{}.format: {}, expected sparse-24-bitmask, sparse-bitmask or dense", where,
                     s.contains("format") ? s["format"].dump() : "absent");
  const std::string format = lower(s["format"].get<std::string>());
  if (format == "sparse-24-bitmask") {
    config.format = Format::kSparse24Bitmask;
  } else if (format == "sparse-bitmask") {
    config.format = Format::kSparseBitmask;
  } else if (format == "dense") {
    config.format = Format::kDense;
  } else {
    return makeError("{}.format: '{}' is not supported (kiln reads sparse-24-bitmask, "
                     "sparse-bitmask and dense)",
                     where, printable(format));
  }

  // The package's default is "unstructured", except for sparse-24-bitmask's
  // own config class, which defaults to "2:4".
  std::string structure = config.format == Format::kSparse24Bitmask ? "2:4" : "unstructured";
  if (s.contains("sparsity_structure") && !s["sparsity_structure"].is_null()) {
    if (!s["sparsity_structure"].is_string())
      return makeError("{}.sparsity_structure: expected a string, got {}", where,
                       s["sparsity_structure"].type_name());
    structure = lower(s["sparsity_structure"].get<std::string>());
  }
  const bool bitmask24 = config.format == Format::kSparse24Bitmask;
  if (structure != "2:4" && (bitmask24 || structure != "unstructured"))
    return makeError("{}.sparsity_structure: '{}' is not supported with format {} (kiln reads "
                     "{})",
                     where, printable(structure), format,
                     bitmask24 ? "2:4" : "2:4 and unstructured");
  config.structure = structure;

  auto targets = patterns(s, "targets", where);
  if (!targets.ok()) return targets.error();
  config.targets = targets.take();
  auto ignore = patterns(s, "ignore", where);
  if (!ignore.ok()) return ignore.error();
  config.ignore = ignore.take();
  // A bad pattern fails here rather than at the first weight.
  for (const auto& [list, key] : {std::pair{&config.targets, ".targets"}, {&config.ignore, ".ignore"}})
    for (const std::string& pattern : *list)
      if (auto match = matches(pattern, "", true, where + key); !match.ok()) return match.error();
  return std::optional<SparsityConfig>(std::move(config));
}

}  // namespace kiln::formats
