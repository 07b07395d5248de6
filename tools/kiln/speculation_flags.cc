#include "tools/kiln/speculation_flags.h"

#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

namespace kiln {

Result<SpeculationParams> speculationFrom(const CliArgs& args) {
  SpeculationParams spec;
  std::optional<std::string> method = args.get("spec");
  if (!method) {
    for (const char* flag : {"spec-k", "spec-tree"})
      if (args.has(flag)) return makeError("--{} drafts for speculative decoding: add --spec=ngram", flag);
    return spec;
  }
  if (*method == "ngram")
    spec.method = SpecMethod::kNgram;
  else if (method->starts_with("draft:") && method->size() > 6)
    spec.method = SpecMethod::kDraftModel;
  else if (method->starts_with("head:") && method->size() > 5)
    spec.method = SpecMethod::kDraftHead;
  else if (method->starts_with("layerskip:")) {
    spec.method = SpecMethod::kLayerSkip;
    const std::string k = method->substr(10);
    char* end = nullptr;
    spec.layerskip = std::strtoll(k.c_str(), &end, 10);
    if (k.empty() || *end != '\0' || spec.layerskip <= 0)
      return makeError("invalid value '{}' for --spec, expected layerskip:K with K >= 1 (the target's first K layers "
                       "draft)",
                       *method);
  } else
    return makeError("invalid value '{}' for --spec, expected ngram, draft:PATH (a draft model or artifact with "
                     "the target's vocabulary), layerskip:K (the target's first K layers) or head:PATH (a draft head "
                     "checkpoint)",
                     *method);
  if (args.has("spec-k") && args.has("spec-tree"))
    return makeError("--spec-k and --spec-tree both set: a chain of K tokens or a tree, not both");
  if (std::optional<std::string> tree = args.get("spec-tree")) {
    auto shape = spec::parseTreeShape("widths:" + *tree);
    if (!shape.ok())
      return makeError("invalid value '{}' for --spec-tree, expected widths W1,W2,... each >= 1 (e.g. 2,2,1), at "
                       "most 1024 nodes",
                       *tree);
    spec.tree = shape.take();
    return spec;
  }
  auto k = args.getInt("spec-k", 4);
  if (!k.ok()) return k.error();
  if (*k <= 0 || *k > 1023) return makeError("invalid value '{}' for --spec-k, expected 1 to 1023 draft tokens", *k);
  spec.tree = spec::TreeShape::chain(*k);
  return spec;
}

std::string draftModelFrom(const CliArgs& args) {
  std::optional<std::string> method = args.get("spec");
  return method && method->starts_with("draft:") ? method->substr(6) : std::string();
}

std::string draftHeadFrom(const CliArgs& args) {
  std::optional<std::string> method = args.get("spec");
  return method && method->starts_with("head:") ? method->substr(5) : std::string();
}

std::string specMethodName(const SpeculationParams& spec) {
  switch (spec.method) {
    case SpecMethod::kNgram: return "ngram";
    case SpecMethod::kDraftModel: return "draft";
    case SpecMethod::kLayerSkip: return "layerskip:" + std::to_string(spec.layerskip);
    case SpecMethod::kDraftHead: return "head";
    case SpecMethod::kNone: break;
  }
  return "none";
}

std::vector<std::string> speculationCompileFlags(const SpeculationParams& spec, const std::string& model) {
  std::error_code ec;
  if (!spec.enabled() || std::filesystem::exists(std::filesystem::path(model) / "manifest.json", ec)) return {};
  std::vector<std::string> flags = {"--spec-tree=" + spec.tree.text()};
  if (spec.method == SpecMethod::kLayerSkip) flags.push_back("--spec-layerskip=" + std::to_string(spec.layerskip));
  return flags;
}

}  // namespace kiln
