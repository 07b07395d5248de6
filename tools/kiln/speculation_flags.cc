#include "tools/kiln/speculation_flags.h"

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
  if (*method != "ngram") return makeError("invalid value '{}' for --spec, expected ngram", *method);
  spec.method = SpecMethod::kNgram;
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

std::vector<std::string> speculationCompileFlags(const SpeculationParams& spec, const std::string& model) {
  std::error_code ec;
  if (!spec.enabled() || std::filesystem::exists(std::filesystem::path(model) / "manifest.json", ec)) return {};
  return {"--spec-tree=" + spec.tree.text()};
}

}  // namespace kiln
