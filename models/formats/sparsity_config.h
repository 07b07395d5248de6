// config.json's compressed-tensors "sparsity_config": how a pruned
// checkpoint (llm-compressor, RedHatAI's "2of4" models) stores its weights
// and which of them the pruning promised a structure for. The
// compressed-tensors package writes it as quantization_config.sparsity_config
// (with quant_method "compressed-tensors"); older releases used
// compression_config.sparsity_config, and sparseml a top-level key.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/support/error.h"

namespace kiln::formats {

struct SparsityConfig {
  enum class Format {
    kDense,            // "dense": weights stored as ordinary tensors, zeros included
    kSparse24Bitmask,  // "sparse-24-bitmask": <m>.compressed [out, in/2], .bitmask, .shape
    kSparseBitmask,    // "sparse-bitmask": <m>.compressed [nnz], .bitmask, .shape, .row_offsets
  };
  Format format = Format::kDense;
  // "2:4" or "unstructured" (only sparse-bitmask and dense may say the
  // latter: their weights load dense and nothing is claimed).
  std::string structure = "2:4";
  // Module patterns as the package matches them: "Linear" (every linear
  // layer), an exact module name, or "re:<regex>" matched from the name's
  // start. Empty targets: every linear.
  std::vector<std::string> targets;
  std::vector<std::string> ignore;
  // Where it was read, for errors: "<config.json>: quantization_config.sparsity_config".
  std::string where;

  bool is24() const { return structure == "2:4"; }
  // True when `module` (a weight's name without ".weight"), a linear layer
  // when `linear`, matches a target and no ignore entry. Fails on a "re:"
  // pattern std::regex cannot parse.
  Result<bool> covers(const std::string& module, bool linear) const;
};

std::string_view sparsityFormatName(SparsityConfig::Format format);

// Reads the sparsity_config from config.json text; nullopt when there is
// none (or it is empty, as the package writes for a quantized-only model).
// Errors name `name`, the field and what kiln accepts: format
// sparse-24-bitmask (structure 2:4), sparse-bitmask or dense (structure 2:4
// or unstructured).
Result<std::optional<SparsityConfig>> parseSparsityConfig(std::string_view config_json,
                                                          const std::string& name);

}  // namespace kiln::formats
