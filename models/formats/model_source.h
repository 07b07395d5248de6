// A model on disk, whatever its format: a .gguf file or a Hugging Face
// checkpoint directory (config.json + safetensors). Gives the config, the
// tensor table, and a canonical lookup from a weight's role to its tensor so
// the importer and the runtime never spell format-specific tensor names.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "models/formats/gguf_file.h"
#include "models/formats/int4_checkpoint.h"
#include "models/formats/model_config.h"
#include "models/formats/safetensors_file.h"
#include "models/formats/sparse_checkpoint.h"
#include "models/formats/tensor_info.h"
#include "runtime/support/error.h"

namespace kiln::formats {

// What a weight does in a Llama-family decoder. Expected shapes (outermost
// first, H = hidden_size, D = head_dim, F = intermediate_size, V = vocab):
//   kTokenEmbedding, kLmHead  [V, H]
//   kAttnNorm, kFfnNorm, kFinalNorm  [H]
//   kQ [num_heads*D, H]   kK, kV [num_kv_heads*D, H]   kO [H, num_heads*D]
//   kQBias [num_heads*D]  kKBias, kVBias [num_kv_heads*D]   (attention_bias only)
//   kOBias [H]            (output_bias only)
//   kQNorm, kKNorm [D]    (qk_norm only: qwen3's per-head RMSNorm of q and k)
//   kQkv [(num_heads + 2 num_kv_heads)*D, H]  (fused_qkv only, in place of kQ, kK, kV: phi3)
//   kGateUp [2F, H]       (fused_gate_up only, in place of kGate, kUp: gate rows, then up rows)
//   kGate, kUp [F, H]     kDown [H, F]
//   kAttnPostNorm, kFfnPostNorm [H]  (sandwich_norms only: gemma3's norms of the
//                         attention and MLP outputs; kFfnNorm is then its
//                         pre_feedforward_layernorm)
//   kRouter [E, H]        (MoE layers: the router, E = num_experts; in place of
//                         kGate, kUp, kDown)
//   kExpertGate, kExpertUp [F', H], kExpertDown [H, F'] per expert, F' =
//                         moe_intermediate_size (HF: one tensor per expert,
//                         expertWeightName); GGUF stacks them [E, F', H] and
//                         [E, H, F'] under one name (expertsStacked)
enum class WeightRole {
  kTokenEmbedding,
  kAttnNorm,
  kQ,
  kK,
  kV,
  kO,
  kQBias,
  kKBias,
  kVBias,
  kOBias,
  kQNorm,
  kKNorm,
  kQkv,
  kFfnNorm,
  kGate,
  kUp,
  kGateUp,
  kDown,
  kAttnPostNorm,
  kFfnPostNorm,
  kRouter,
  kExpertGate,
  kExpertUp,
  kExpertDown,
  kFinalNorm,
  kLmHead,
};

std::string_view weightRoleName(WeightRole role);  // "attn_q", "token_embedding", ...
// True for the roles that exist once per decoder layer.
bool isPerLayer(WeightRole role);

class ModelSource {
 public:
  enum class Format { kGguf, kSafetensors };

  // `path` is a .gguf file or a directory holding config.json and
  // model.safetensors or model.safetensors.index.json. A GGUF is always
  // mapped whole (mapping is cheap); `mode` matters for safetensors.
  static Result<ModelSource> open(const std::string& path, OpenMode mode);

  ModelSource(ModelSource&&) noexcept = default;
  ModelSource& operator=(ModelSource&&) noexcept = default;

  const std::string& path() const { return path_; }
  Format format() const { return format_; }
  const ModelConfig& config() const { return config_; }
  const std::vector<TensorInfo>& tensors() const;
  const TensorInfo* findTensor(std::string_view name) const;
  // The GGUF file (for tokenizer metadata), or nullptr for HF checkpoints.
  const GgufFile* gguf() const { return gguf_.get(); }
  const SafetensorsCheckpoint* checkpoint() const { return checkpoint_.get(); }
  // A GPTQ/AWQ checkpoint's packed layers, or nullptr for other models. When
  // present, tensors(), findTensor() and tensorData() show each packed layer
  // as its <prefix>.weight (int4_checkpoint.h).
  const Int4Checkpoint* int4() const { return int4_.get(); }
  // A compressed-tensors checkpoint with a sparsity_config, or nullptr. When
  // present, tensors(), findTensor() and tensorData() show each compressed
  // layer as its dense <module>.weight, and tensorData() refuses a weight
  // the config says is 2:4 but is not (sparse_checkpoint.h).
  const SparseCheckpoint* sparse() const { return sparse_.get(); }
  // True when the checkpoint says every decoder linear (q, k, v, o, gate,
  // up, down, fused or per expert; not the router or the LM head) is 2:4:
  // kiln-compile then compiles with --sparsity=2:4 unless told otherwise.
  bool decoderLinearsAre24() const;

  // The tensor name serving `role` in this model's format, e.g.
  // "blk.3.attn_q.weight" or "model.layers.3.self_attn.q_proj.weight".
  // `layer` is ignored for global roles. For a tied model without a separate
  // head, kLmHead names the token embedding.
  std::string weightName(WeightRole role, int layer = 0) const;
  // The tensor for `role`, or nullptr if absent.
  const TensorInfo* weight(WeightRole role, int layer = 0) const;
  // True when a layer's experts are one [E, ...] tensor per role (GGUF's
  // ffn_*_exps), false when each expert has its own (HF's experts.{e}.*).
  bool expertsStacked() const { return format_ == Format::kGguf; }
  // HF: the tensor of `expert`'s kExpertGate/Up/Down in `layer`, e.g.
  // "model.layers.3.block_sparse_moe.experts.5.w1.weight".
  std::string expertWeightName(WeightRole role, int layer, int expert) const;
  // Every weight the config needs exists with its expected shape; the error
  // names the tensor, its actual shape and the expected one. A per-layer
  // tensor the config does not use (attention sinks, a q_norm in a config
  // without qk_norm, ...) is refused by name: running without it would be
  // running another model.
  Status checkWeights() const;
  // True when `role` is part of this config's graph (biases, norms) in
  // `layer` (MoE layers have a router and experts, the others an MLP).
  bool usesRole(WeightRole role, int layer = 0) const;
  // The bytes of a weight (kWithData only).
  Result<std::span<const uint8_t>> weightData(WeightRole role, int layer = 0) const;
  Result<std::span<const uint8_t>> tensorData(const TensorInfo& tensor) const;

  // The shape `role` must have under this config.
  std::vector<int64_t> expectedShape(WeightRole role) const;

  // What opening left out that the user should know (one line each, for
  // stderr): an image-text checkpoint's vision tower.
  const std::vector<std::string>& notices() const { return notices_; }

 private:
  ModelSource() = default;
  std::string formatName(WeightRole role, int layer) const;
  // The per-layer tensor names `role` has in `layer`: one, or one per expert.
  std::vector<std::string> layerTensorNames(WeightRole role, int layer) const;
  Status checkNoUnusedLayerTensors() const;
  // The names of every linear layer's weight this config's graph reads.
  std::vector<std::string> linearWeightNames(bool decoder_only) const;
  Status findTextModel();

  std::string path_;
  Format format_ = Format::kGguf;
  OpenMode mode_ = OpenMode::kHeaderOnly;
  ModelConfig config_;
  std::unique_ptr<GgufFile> gguf_;
  std::unique_ptr<SafetensorsCheckpoint> checkpoint_;
  std::unique_ptr<Int4Checkpoint> int4_;
  std::unique_ptr<SparseCheckpoint> sparse_;
  // HF names: the decoder's prefix ("model.", or an image-text model's
  // language model) and the head's name.
  std::string hf_decoder_ = "model.";
  std::string hf_lm_head_ = "lm_head.weight";
  std::vector<std::string> notices_;
};

}  // namespace kiln::formats
