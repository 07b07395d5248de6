// A state-space model's Hugging Face checkpoint directory: its SsmConfig and
// its safetensors tensor table, with the tensor names of each weight
// (transformers' MambaForCausalLM / Mamba2ForCausalLM: backbone.*, lm_head).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "models/formats/safetensors_file.h"
#include "models/formats/ssm_config.h"
#include "runtime/support/error.h"

namespace kiln::formats {

class SsmSource {
 public:
  // `path` is a directory with config.json (model_type mamba or mamba2) and
  // model.safetensors or its index.
  static Result<SsmSource> open(const std::string& path, OpenMode mode);
  // Whether `path` is a checkpoint directory whose config.json names an SSM.
  static bool isSsmCheckpoint(const std::string& path);

  const std::string& path() const { return path_; }
  const SsmConfig& config() const { return config_; }
  const SafetensorsCheckpoint& checkpoint() const { return *checkpoint_; }
  const TensorInfo* findTensor(std::string_view name) const { return checkpoint_->findTensor(name); }

  // "backbone.layers.{layer}.mixer.{what}", "backbone.layers.{layer}.norm.weight", ...
  static std::string mixerName(int64_t layer, std::string_view what);
  static std::string layerNormName(int64_t layer);
  // The output head's tensor: lm_head.weight, or the embedding when tied.
  std::string lmHeadName() const;

  // Every tensor the config reads exists with its expected shape, and no
  // per-layer tensor is left unread (an in_proj with Mamba-2's extra MLP
  // columns, a mixer bias the config says is absent, ...).
  Status checkWeights() const;

 private:
  SsmSource() = default;
  std::string path_;
  SsmConfig config_;
  std::unique_ptr<SafetensorsCheckpoint> checkpoint_;
};

}  // namespace kiln::formats
