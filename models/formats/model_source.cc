#include "models/formats/model_source.h"
#include "models/formats/ssm_config.h"

#include <fmt/format.h>

#include <filesystem>
#include <set>
#include <fstream>
#include <sstream>

namespace kiln::formats {
namespace {

constexpr WeightRole kPerLayerRoles[] = {
    WeightRole::kAttnNorm, WeightRole::kQ,     WeightRole::kK,     WeightRole::kV,
    WeightRole::kO,        WeightRole::kQBias, WeightRole::kKBias, WeightRole::kVBias,
    WeightRole::kOBias,    WeightRole::kQNorm, WeightRole::kKNorm, WeightRole::kQkv,
    WeightRole::kFfnNorm,  WeightRole::kGate,  WeightRole::kUp,    WeightRole::kGateUp,
    WeightRole::kDown,     WeightRole::kAttnPostNorm, WeightRole::kFfnPostNorm,
    WeightRole::kRouter,   WeightRole::kExpertGate,   WeightRole::kExpertUp,    WeightRole::kExpertDown};

bool isExpertRole(WeightRole role) {
  return role == WeightRole::kExpertGate || role == WeightRole::kExpertUp || role == WeightRole::kExpertDown;
}

// GGUF and HF tensor names per role, without the layer prefix (and, for
// HF, without the decoder's "model." or the lm_head's own name).
struct RoleNames {
  std::string_view gguf;
  std::string_view hf;
};

RoleNames roleNames(WeightRole role) {
  switch (role) {
    case WeightRole::kTokenEmbedding: return {"token_embd.weight", "embed_tokens.weight"};
    case WeightRole::kAttnNorm: return {"attn_norm.weight", "input_layernorm.weight"};
    case WeightRole::kQ: return {"attn_q.weight", "self_attn.q_proj.weight"};
    case WeightRole::kK: return {"attn_k.weight", "self_attn.k_proj.weight"};
    case WeightRole::kV: return {"attn_v.weight", "self_attn.v_proj.weight"};
    case WeightRole::kO: return {"attn_output.weight", "self_attn.o_proj.weight"};
    case WeightRole::kQBias: return {"attn_q.bias", "self_attn.q_proj.bias"};
    case WeightRole::kKBias: return {"attn_k.bias", "self_attn.k_proj.bias"};
    case WeightRole::kVBias: return {"attn_v.bias", "self_attn.v_proj.bias"};
    case WeightRole::kOBias: return {"attn_output.bias", "self_attn.o_proj.bias"};
    case WeightRole::kQNorm: return {"attn_q_norm.weight", "self_attn.q_norm.weight"};
    case WeightRole::kKNorm: return {"attn_k_norm.weight", "self_attn.k_norm.weight"};
    case WeightRole::kQkv: return {"attn_qkv.weight", "self_attn.qkv_proj.weight"};
    // llama.cpp's phi3 keeps the fused gate/up under ffn_up's name.
    case WeightRole::kGateUp: return {"ffn_up.weight", "mlp.gate_up_proj.weight"};
    case WeightRole::kFfnNorm: return {"ffn_norm.weight", "post_attention_layernorm.weight"};
    case WeightRole::kGate: return {"ffn_gate.weight", "mlp.gate_proj.weight"};
    case WeightRole::kUp: return {"ffn_up.weight", "mlp.up_proj.weight"};
    case WeightRole::kDown: return {"ffn_down.weight", "mlp.down_proj.weight"};
    case WeightRole::kAttnPostNorm: return {"post_attention_norm.weight", "post_attention_layernorm.weight"};
    case WeightRole::kFfnPostNorm: return {"post_ffw_norm.weight", "post_feedforward_layernorm.weight"};
    // HF names for Qwen3-MoE; Mixtral's are block_sparse_moe's (formatName).
    case WeightRole::kRouter: return {"ffn_gate_inp.weight", "mlp.gate.weight"};
    case WeightRole::kExpertGate: return {"ffn_gate_exps.weight", "mlp.experts.{}.gate_proj.weight"};
    case WeightRole::kExpertUp: return {"ffn_up_exps.weight", "mlp.experts.{}.up_proj.weight"};
    case WeightRole::kExpertDown: return {"ffn_down_exps.weight", "mlp.experts.{}.down_proj.weight"};
    case WeightRole::kFinalNorm: return {"output_norm.weight", "norm.weight"};
    case WeightRole::kLmHead: return {"output.weight", "lm_head.weight"};
  }
  return {};
}

}  // namespace

std::string_view weightRoleName(WeightRole role) {
  switch (role) {
    case WeightRole::kTokenEmbedding: return "token_embedding";
    case WeightRole::kAttnNorm: return "attn_norm";
    case WeightRole::kQ: return "attn_q";
    case WeightRole::kK: return "attn_k";
    case WeightRole::kV: return "attn_v";
    case WeightRole::kO: return "attn_output";
    case WeightRole::kQBias: return "attn_q_bias";
    case WeightRole::kKBias: return "attn_k_bias";
    case WeightRole::kVBias: return "attn_v_bias";
    case WeightRole::kOBias: return "attn_output_bias";
    case WeightRole::kQNorm: return "attn_q_norm";
    case WeightRole::kKNorm: return "attn_k_norm";
    case WeightRole::kQkv: return "attn_qkv";
    case WeightRole::kGateUp: return "ffn_gate_up";
    case WeightRole::kFfnNorm: return "ffn_norm";
    case WeightRole::kGate: return "ffn_gate";
    case WeightRole::kUp: return "ffn_up";
    case WeightRole::kDown: return "ffn_down";
    case WeightRole::kAttnPostNorm: return "attn_post_norm";
    case WeightRole::kFfnPostNorm: return "ffn_post_norm";
    case WeightRole::kRouter: return "ffn_router";
    case WeightRole::kExpertGate: return "ffn_expert_gate";
    case WeightRole::kExpertUp: return "ffn_expert_up";
    case WeightRole::kExpertDown: return "ffn_expert_down";
    case WeightRole::kFinalNorm: return "final_norm";
    case WeightRole::kLmHead: return "lm_head";
  }
  return "unknown";
}

bool isPerLayer(WeightRole role) {
  return role != WeightRole::kTokenEmbedding && role != WeightRole::kFinalNorm &&
         role != WeightRole::kLmHead;
}

Result<ModelSource> ModelSource::open(const std::string& path, OpenMode mode) {
  namespace fs = std::filesystem;
  ModelSource src;
  src.path_ = path;
  src.mode_ = mode;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    src.format_ = Format::kSafetensors;
    std::string config_path = (fs::path(path) / "config.json").string();
    if (!fs::exists(config_path, ec))
      return makeError("{}: checkpoint directory has no config.json", path);
    std::ifstream config_file(config_path);
    std::stringstream config_text;
    config_text << config_file.rdbuf();
    // A state-space checkpoint's config is SsmSource's (ssm_config.h); the
    // runtime reads its tensors by name alone.
    if (isSsmConfigText(config_text.str())) {
      auto ckpt = SafetensorsCheckpoint::open(path, mode);
      if (!ckpt) return ckpt.error();
      src.checkpoint_ = std::make_unique<SafetensorsCheckpoint>(ckpt.take());
      return src;
    }
    auto config = parseHfConfig(config_path);
    if (!config) return config.error();
    src.config_ = config.take();
    auto ckpt = SafetensorsCheckpoint::open(path, mode);
    if (!ckpt) return ckpt.error();
    src.checkpoint_ = std::make_unique<SafetensorsCheckpoint>(ckpt.take());
    auto quant = parseInt4QuantConfig(config_text.str(), config_path);
    if (!quant) return quant.error();
    if (*quant) {
      auto int4 = Int4Checkpoint::open(*src.checkpoint_, **quant);
      if (!int4) return int4.error();
      src.int4_ = std::make_unique<Int4Checkpoint>(int4.take());
    }
    // Some tied checkpoints still store lm_head.weight; the flag decides.
    if (src.config_.image_text_model) KILN_RETURN_IF_ERROR(src.findTextModel());
    // After findTextModel: which weights are linears depends on the prefix.
    auto sparsity = parseSparsityConfig(config_text.str(), config_path);
    if (!sparsity) return sparsity.error();
    if (*sparsity) {
      auto sparse = SparseCheckpoint::open(*src.checkpoint_, **sparsity,
                                           src.linearWeightNames(/*decoder_only=*/false));
      if (!sparse) return sparse.error();
      src.sparse_ = std::make_unique<SparseCheckpoint>(sparse.take());
    }
  } else {
    if (!fs::exists(path, ec)) return makeError("{}: no such file or directory", path);
    src.format_ = Format::kGguf;
    auto file = GgufFile::open(path);
    if (!file) return file.error();
    src.gguf_ = std::make_unique<GgufFile>(file.take());
    auto config = configFromGguf(*src.gguf_);
    if (!config) return config.error();
    src.config_ = config.take();
  }
  return src;
}

// Gemma3ForConditionalGeneration's language model: transformers before 4.52
// saved it as language_model.model.* and language_model.lm_head, later ones
// as model.language_model.* and lm_head; the vision tower and projector
// (vision_tower.*, multi_modal_projector.*, or under model.) are left out.
Status ModelSource::findTextModel() {
  const std::pair<std::string_view, std::string_view> spellings[] = {
      {"language_model.model.", "language_model.lm_head.weight"},
      {"model.language_model.", "lm_head.weight"},
  };
  for (auto [decoder, head] : spellings) {
    if (findTensor(std::string(decoder) + "embed_tokens.weight") == nullptr) continue;
    hf_decoder_ = decoder;
    hf_lm_head_ = head;
    int64_t left_out = 0;
    for (const TensorInfo& t : tensors())
      if (t.name.compare(0, hf_decoder_.size(), hf_decoder_) != 0 && t.name != hf_lm_head_) ++left_out;
    notices_.push_back(fmt::format("{}: {} (image-text): importing the language model ({}*) only; {} vision tower "
                                   "and projector tensors left out, so the model takes text, not images",
                                   path_, config_.architecture, hf_decoder_, left_out));
    return Status::success();
  }
  return makeError("{}: a Gemma 3 image-text checkpoint (model_type gemma3) with no tensor "
                   "'language_model.model.embed_tokens.weight' or 'model.language_model.embed_tokens.weight'; "
                   "expected its language model under one of these prefixes",
                   path_);
}

const std::vector<TensorInfo>& ModelSource::tensors() const {
  if (int4_) return int4_->tensors();
  if (sparse_) return sparse_->tensors();
  return gguf_ ? gguf_->tensors() : checkpoint_->tensors();
}

const TensorInfo* ModelSource::findTensor(std::string_view name) const {
  if (int4_) return int4_->findTensor(name);
  if (sparse_) return sparse_->findTensor(name);
  return gguf_ ? gguf_->findTensor(name) : checkpoint_->findTensor(name);
}

std::string ModelSource::formatName(WeightRole role, int layer) const {
  RoleNames names = roleNames(role);
  // Gemma's post_attention_layernorm normalizes the attention output; its FFN input norm has a name of its own.
  if (role == WeightRole::kFfnNorm && config_.sandwich_norms) names.hf = "pre_feedforward_layernorm.weight";
  if (config_.architecture == "mixtral") {  // MixtralSparseMoeBlock: w1 gate, w3 up, w2 down
    if (role == WeightRole::kRouter) names.hf = "block_sparse_moe.gate.weight";
    if (role == WeightRole::kExpertGate) names.hf = "block_sparse_moe.experts.{}.w1.weight";
    if (role == WeightRole::kExpertUp) names.hf = "block_sparse_moe.experts.{}.w3.weight";
    if (role == WeightRole::kExpertDown) names.hf = "block_sparse_moe.experts.{}.w2.weight";
  }
  if (format_ == Format::kGguf)
    return isPerLayer(role) ? fmt::format("blk.{}.{}", layer, names.gguf)
                            : std::string(names.gguf);
  if (role == WeightRole::kLmHead) return hf_lm_head_;
  return isPerLayer(role) ? fmt::format("{}layers.{}.{}", hf_decoder_, layer, names.hf)
                          : hf_decoder_ + std::string(names.hf);
}

std::string ModelSource::expertWeightName(WeightRole role, int layer, int expert) const {
  return fmt::format(fmt::runtime(formatName(role, layer)), expert);
}

std::vector<std::string> ModelSource::layerTensorNames(WeightRole role, int layer) const {
  if (!isExpertRole(role) || expertsStacked()) return {formatName(role, layer)};
  std::vector<std::string> names;
  for (int e = 0; e < config_.num_experts; ++e) names.push_back(expertWeightName(role, layer, e));
  return names;
}

std::string ModelSource::weightName(WeightRole role, int layer) const {
  std::string name = formatName(role, layer);
  if (role == WeightRole::kLmHead && config_.tie_word_embeddings && findTensor(name) == nullptr)
    return formatName(WeightRole::kTokenEmbedding, 0);
  return name;
}

const TensorInfo* ModelSource::weight(WeightRole role, int layer) const {
  if (isPerLayer(role) && (layer < 0 || layer >= config_.num_layers)) return nullptr;
  return findTensor(weightName(role, layer));
}

std::vector<int64_t> ModelSource::expectedShape(WeightRole role) const {
  const ModelConfig& c = config_;
  const int64_t q = c.num_heads * c.head_dim;
  const int64_t kv = c.num_kv_heads * c.head_dim;
  switch (role) {
    case WeightRole::kTokenEmbedding:
    case WeightRole::kLmHead: return {c.vocab_size, c.hidden_size};
    case WeightRole::kAttnNorm:
    case WeightRole::kFfnNorm:
    case WeightRole::kAttnPostNorm:
    case WeightRole::kFfnPostNorm:
    case WeightRole::kFinalNorm: return {c.hidden_size};
    case WeightRole::kQ: return {q, c.hidden_size};
    case WeightRole::kK:
    case WeightRole::kV: return {kv, c.hidden_size};
    case WeightRole::kO: return {c.hidden_size, q};
    case WeightRole::kQBias: return {q};
    case WeightRole::kKBias:
    case WeightRole::kVBias: return {kv};
    case WeightRole::kOBias: return {c.hidden_size};
    case WeightRole::kQNorm:
    case WeightRole::kKNorm: return {c.head_dim};
    case WeightRole::kQkv: return {q + 2 * kv, c.hidden_size};
    case WeightRole::kGateUp: return {2 * c.intermediate_size, c.hidden_size};
    case WeightRole::kGate:
    case WeightRole::kUp: return {c.intermediate_size, c.hidden_size};
    case WeightRole::kDown: return {c.hidden_size, c.intermediate_size};
    case WeightRole::kRouter: return {c.num_experts, c.hidden_size};
    case WeightRole::kExpertGate:
    case WeightRole::kExpertUp:
      if (expertsStacked()) return {c.num_experts, c.moe_intermediate_size, c.hidden_size};
      return {c.moe_intermediate_size, c.hidden_size};
    case WeightRole::kExpertDown:
      if (expertsStacked()) return {c.num_experts, c.hidden_size, c.moe_intermediate_size};
      return {c.hidden_size, c.moe_intermediate_size};
  }
  return {};
}

Status ModelSource::checkWeights() const {
  auto check = [&](WeightRole role, int layer, std::string name) -> Status {
    const TensorInfo* t = findTensor(name);
    std::vector<int64_t> expected = expectedShape(role);
    if (t == nullptr)
      return makeError("{}: missing tensor '{}' ({}{}), expected shape {}{}", path_, name,
                       weightRoleName(role),
                       isPerLayer(role) ? fmt::format(" of layer {}", layer) : "",
                       shapeToString(expected),
                       int4_ ? fmt::format(" (or, packed by {}, its .qweight, .qzeros and .scales)",
                                           int4MethodName(int4_->config().method))
                             : "");
    if (t->shape != expected)
      return makeError("{}: tensor '{}' has shape {}, expected {}", path_, name,
                       shapeToString(t->shape), shapeToString(expected));
    return Status::success();
  };
  for (WeightRole role :
       {WeightRole::kTokenEmbedding, WeightRole::kFinalNorm, WeightRole::kLmHead})
    KILN_RETURN_IF_ERROR(check(role, 0, weightName(role, 0)));
  for (int layer = 0; layer < config_.num_layers; ++layer) {
    for (WeightRole role : kPerLayerRoles) {
      if (!usesRole(role, layer)) continue;
      for (const std::string& name : layerTensorNames(role, layer))
        KILN_RETURN_IF_ERROR(check(role, layer, name));
    }
  }
  return checkNoUnusedLayerTensors();
}

bool ModelSource::usesRole(WeightRole role, int layer) const {
  const bool moe = config_.isMoeLayer(layer);
  switch (role) {
    case WeightRole::kQBias:
    case WeightRole::kKBias:
    case WeightRole::kVBias: return config_.attention_bias;
    case WeightRole::kOBias: return config_.output_bias;
    case WeightRole::kQNorm:
    case WeightRole::kKNorm: return config_.qk_norm;
    case WeightRole::kQ:
    case WeightRole::kK:
    case WeightRole::kV: return !config_.fused_qkv;
    case WeightRole::kQkv: return config_.fused_qkv;
    case WeightRole::kGate:
    case WeightRole::kUp: return !config_.fused_gate_up && !moe;
    case WeightRole::kGateUp: return config_.fused_gate_up && !moe;
    case WeightRole::kDown: return !moe;
    case WeightRole::kRouter:
    case WeightRole::kExpertGate:
    case WeightRole::kExpertUp:
    case WeightRole::kExpertDown: return moe;
    case WeightRole::kAttnPostNorm:
    case WeightRole::kFfnPostNorm: return config_.sandwich_norms;
    default: return true;
  }
}

// Per-layer tensors ("model.layers.N.*", "blk.N.*") are each one of the
// layer's roles; HF's saved rotary inverse frequencies (recomputed from the
// config) are the one exception. Packed int4 layers show as their .weight.
Status ModelSource::checkNoUnusedLayerTensors() const {
  const std::string prefix = format_ == Format::kGguf ? "blk." : hf_decoder_ + "layers.";
  std::set<std::string> used;
  for (int layer = 0; layer < config_.num_layers; ++layer)
    for (WeightRole role : kPerLayerRoles)
      if (usesRole(role, layer))
        for (std::string& name : layerTensorNames(role, layer)) used.insert(std::move(name));
  for (const TensorInfo& t : tensors()) {
    const std::string& name = t.name;
    if (name.compare(0, prefix.size(), prefix) != 0 || used.count(name)) continue;
    if (name.find(".rotary_emb.inv_freq") != std::string::npos) continue;
    return makeError("{}: tensor '{}' is not part of the {} graph kiln builds for this config{}; running without "
                     "it would compute another model",
                     path_, name, config_.architecture,
                     name.find("norm") != std::string::npos && !config_.qk_norm ? " (no qk_norm)" : "");
  }
  return Status::success();
}

std::vector<std::string> ModelSource::linearWeightNames(bool decoder_only) const {
  constexpr WeightRole kLinearRoles[] = {
      WeightRole::kQ,    WeightRole::kK,      WeightRole::kV,          WeightRole::kO,
      WeightRole::kQkv,  WeightRole::kGate,   WeightRole::kUp,         WeightRole::kGateUp,
      WeightRole::kDown, WeightRole::kRouter, WeightRole::kExpertGate, WeightRole::kExpertUp,
      WeightRole::kExpertDown};
  std::vector<std::string> names;
  for (int layer = 0; layer < config_.num_layers; ++layer)
    for (WeightRole role : kLinearRoles)
      if (usesRole(role, layer) && !(decoder_only && role == WeightRole::kRouter))
        for (std::string& name : layerTensorNames(role, layer)) names.push_back(std::move(name));
  // A tied head is the embedding, not a linear of its own.
  if (!decoder_only && weightName(WeightRole::kLmHead) != weightName(WeightRole::kTokenEmbedding))
    names.push_back(weightName(WeightRole::kLmHead));
  return names;
}

bool ModelSource::decoderLinearsAre24() const {
  if (!sparse_) return false;
  for (const std::string& name : linearWeightNames(/*decoder_only=*/true))
    if (!sparse_->weights24().count(name)) return false;
  return true;
}

Result<std::span<const uint8_t>> ModelSource::tensorData(const TensorInfo& tensor) const {
  if (gguf_) {
    std::span<const uint8_t> data = gguf_->tensorData(tensor);
    if (data.size() != tensor.size_bytes)
      return makeError("{}: tensor '{}' is not inside this file", path_, tensor.name);
    return data;
  }
  if (int4_) return int4_->tensorData(tensor);
  if (sparse_) return sparse_->tensorData(tensor);
  return checkpoint_->tensorData(tensor);
}

Result<std::span<const uint8_t>> ModelSource::weightData(WeightRole role, int layer) const {
  const TensorInfo* t = weight(role, layer);
  if (t == nullptr)
    return makeError("{}: no tensor '{}' for {}", path_, weightName(role, layer),
                     weightRoleName(role));
  return tensorData(*t);
}

}  // namespace kiln::formats
