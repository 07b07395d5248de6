#include "models/formats/ssm_source.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "models/formats/error_text.h"

namespace kiln::formats {

bool SsmSource::isSsmCheckpoint(const std::string& path) {
  std::error_code ec;
  std::filesystem::path config = std::filesystem::path(path) / "config.json";
  if (!std::filesystem::is_directory(path, ec) || !std::filesystem::exists(config, ec)) return false;
  std::ifstream file(config);
  std::stringstream text;
  text << file.rdbuf();
  return isSsmConfigText(text.str());
}

Result<SsmSource> SsmSource::open(const std::string& path, OpenMode mode) {
  SsmSource src;
  src.path_ = path;
  auto config = parseSsmConfig((std::filesystem::path(path) / "config.json").string());
  if (!config) return config.error();
  src.config_ = config.take();
  auto ckpt = SafetensorsCheckpoint::open(path, mode);
  if (!ckpt) return ckpt.error();
  src.checkpoint_ = std::make_unique<SafetensorsCheckpoint>(ckpt.take());
  return src;
}

std::string SsmSource::mixerName(int64_t layer, std::string_view what) {
  return fmt::format("backbone.layers.{}.mixer.{}", layer, what);
}

std::string SsmSource::layerNormName(int64_t layer) { return fmt::format("backbone.layers.{}.norm.weight", layer); }

std::string SsmSource::lmHeadName() const {
  return config_.tie_word_embeddings ? "backbone.embeddings.weight" : "lm_head.weight";
}

Status SsmSource::checkWeights() const {
  const SsmConfig& c = config_;
  const int64_t H = c.hidden_size, I = c.intermediate_size, N = c.state_size, K = c.conv_kernel;
  const int64_t C = c.convChannels();
  std::map<std::string, std::vector<int64_t>> expected = {
      {"backbone.embeddings.weight", {c.vocab_size, H}},
      {"backbone.norm_f.weight", {H}},
  };
  if (!c.tie_word_embeddings) expected["lm_head.weight"] = {c.vocab_size, H};
  for (int64_t l = 0; l < c.num_layers; ++l) {
    expected[layerNormName(l)] = {H};
    const SsmLayerKind kind = c.layer_kinds.empty() ? SsmLayerKind::kMamba : c.layer_kinds[size_t(l)];
    if (kind == SsmLayerKind::kAttention) {
      const int64_t q = c.attn_heads * c.attn_head_dim, kv = c.attn_kv_heads * c.attn_head_dim;
      expected[mixerName(l, "q_proj.weight")] = {q, H};
      expected[mixerName(l, "k_proj.weight")] = {kv, H};
      expected[mixerName(l, "v_proj.weight")] = {kv, H};
      expected[mixerName(l, "o_proj.weight")] = {H, q};
      continue;
    }
    if (kind == SsmLayerKind::kMlp) {
      expected[mixerName(l, "up_proj.weight")] = {c.mlp_intermediate_size, H};
      expected[mixerName(l, "down_proj.weight")] = {H, c.mlp_intermediate_size};
      continue;
    }
    expected[mixerName(l, "in_proj.weight")] = {c.inProjFeatures(), H};
    expected[mixerName(l, "conv1d.weight")] = {C, 1, K};
    if (c.use_conv_bias) expected[mixerName(l, "conv1d.bias")] = {C};
    expected[mixerName(l, "out_proj.weight")] = {H, I};
    if (c.use_bias) {
      expected[mixerName(l, "in_proj.bias")] = {c.inProjFeatures()};
      expected[mixerName(l, "out_proj.bias")] = {H};
    }
    expected[mixerName(l, "D")] = {c.kind == SsmKind::kMamba ? I : c.num_heads};
    if (c.kind == SsmKind::kMamba) {
      expected[mixerName(l, "x_proj.weight")] = {c.time_step_rank + 2 * N, I};
      expected[mixerName(l, "dt_proj.weight")] = {I, c.time_step_rank};
      expected[mixerName(l, "dt_proj.bias")] = {I};
      expected[mixerName(l, "A_log")] = {I, N};
    } else {
      expected[mixerName(l, "A_log")] = {c.num_heads};
      expected[mixerName(l, "dt_bias")] = {c.num_heads};
      expected[mixerName(l, "norm.weight")] = {I};
    }
  }
  auto shapeText = [](const std::vector<int64_t>& s) { return shapeToString(s); };
  for (const auto& [name, shape] : expected) {
    const TensorInfo* t = findTensor(name);
    if (t == nullptr)
      return makeError("{}: tensor '{}' is missing, expected {} for this config", path_, name, shapeText(shape));
    if (t->shape != shape)
      return makeError("{}: tensor '{}' has shape {}, expected {}", path_, printable(name), shapeText(t->shape),
                       shapeText(shape));
  }
  for (const TensorInfo& t : checkpoint_->tensors()) {
    if (expected.count(t.name) || t.name == "lm_head.weight") continue;
    return makeError("{}: tensor '{}' is not read by this {} config (use_bias {}, use_conv_bias {})", path_,
                     printable(t.name), c.architecture, c.use_bias, c.use_conv_bias);
  }
  return Status::success();
}

}  // namespace kiln::formats
