//===- LlamaImporter.cpp - Llama-family model -> xfmr IR -------------------===//
//
// One decoder layer in the unfused form (S new tokens, P past, T = P + S):
//
//   h     = rms_norm(x, attn_norm)
//   q,k,v = linear(h, Wq/Wk/Wv) (+ bias)        -> reshape [S, heads, D]
//           (phi3: split(linear(h, Wqkv)), the checkpoint's fused projection)
//   q,k   = rms_norm(q/k, Wqn/Wkn)              (qwen3's qk_norm: per head, weight [D])
//   q,k   = rope(q/k, positions)
//   K,V   = kv_concat(past, k/v)                [T, Hkv, D]
//   s     = causal_mask(scale(qᵀ · repeat_kv(K)ᵀ))   [H, S, T]  (+ the layer's sliding window)
//   o     = softmax(s) · repeat_kv(V)           -> [S, H·D] -> linear(Wo) (+ bias)
//   x     = x + o
//   x     = x + linear(silu(linear(h2, Wg)) · linear(h2, Wu), Wd),  h2 = rms_norm(x)
//           (phi3: gate, up = split(linear(h2, Wgate_up)))
//
// Mixture of experts (mixtral, qwen3_moe), in the MoE layers:
//   (w, e) = moe_router(linear(h2, Wrouter))        softmax, top-k [S, k] (+ renormalized)
//   x      = x + moe_ffn(h2, w, e, Wg, Wu, Wd)      Wg/Wu [E, F', H], Wd [E, H, F']
//           (HF's per-expert tensors stacked at import, GGUF's as stored)
//
// Gemma 3 (gemma3): x = embed(tokens) · sqrt(hidden) first; every norm
// weight is weight_offset(w, 1) (its 1 + w, made in f32 at load);
// q·kᵀ is scaled by query_pre_attn_scalar^-1/2; sliding layers rotate with
// rope_local_base_freq, the others with rope_theta and rope_scaling; the
// MLP is GeGLU (gelu_tanh for silu); and the attention and MLP outputs are
// each rms_norm'ed before their residual add (the sandwich norms).
//
// x (the residual stream) has the residual type, everything else the
// activation type; with an f32 residual and bf16 activations the adds are
// (f32, bf16) -> f32 and the norms f32 -> bf16.
//
//===----------------------------------------------------------------------===//

#include "models/importer/LlamaImporter.h"

#include "dialects/xfmr/IR/XfmrDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

#include <cmath>
#include <optional>

using namespace mlir;
using kiln::formats::ElementType;
using kiln::formats::ModelConfig;
using kiln::formats::ModelSource;
using kiln::formats::TensorInfo;
using kiln::formats::WeightRole;

namespace kiln {
namespace {

constexpr int64_t kDynamic = ShapedType::kDynamic;

// xfmr element type for a stored tensor type the backends run; nullopt for
// the rest (q5_0, q5_1, q2_k, q3_k, iq*, ...), which import refuses by name
// rather than leave to a failure at load.
std::optional<Type> elementTypeFor(MLIRContext& context, ElementType type) {
  auto quant = [&](llvm::StringRef kind, unsigned block) -> Type {
    return xfmr::QuantType::get(&context, kind, block);
  };
  switch (type) {
  case ElementType::F32: return Float32Type::get(&context);
  case ElementType::F16: return Float16Type::get(&context);
  case ElementType::BF16: return BFloat16Type::get(&context);
  case ElementType::Q4_0: return quant("q4_0", 32);
  case ElementType::Q4_1: return quant("q4_1", 32);
  case ElementType::Q8_0: return quant("q8_0", 32);
  case ElementType::Q4_K: return quant("q4_k", 256);
  case ElementType::Q5_K: return quant("q5_k", 256);
  case ElementType::Q6_K: return quant("q6_k", 256);
  default: return std::nullopt;
  }
}

// Emits the ops of one model; every method returns null Value after having
// emitted a diagnostic.
class LlamaBuilder {
 public:
  LlamaBuilder(MLIRContext& context, const ModelSource& source, Type act,
               Type residual)
      : context_(context), source_(source), config_(source.config()),
        builder_(&context), act_(act), residual_(residual) {}

  OwningOpRef<ModuleOp> build();

 private:
  Location loc(const std::string& name) {
    return NameLoc::get(StringAttr::get(&context_, name));
  }
  RankedTensorType tensor(llvm::ArrayRef<int64_t> shape, Type element) {
    return RankedTensorType::get(shape, element);
  }
  RankedTensorType act(llvm::ArrayRef<int64_t> shape) { return tensor(shape, act_); }

  Value weight(WeightRole role, int layer);
  Value namedWeight(const std::string& name, WeightRole role);
  Value expertWeights(WeightRole role, int layer);
  Value moe(Value h, int layer);
  Value normWeight(WeightRole role, int layer);
  Value rmsNorm(Value x, WeightRole role, int layer, const std::string& name);
  Value linear(Value input, WeightRole weightRole, std::optional<WeightRole> bias,
               int layer, int64_t outFeatures, const std::string& name);
  Value attention(Value h, Value positions, Value pastK, Value pastV,
                  int layer, Value& presentK, Value& presentV);
  Value mlp(Value h, int layer);
  xfmr::RopeAttr ropeAttr(int layer);
  DictionaryAttr configAttr();

  MLIRContext& context_;
  const ModelSource& source_;
  const ModelConfig& config_;
  OpBuilder builder_;
  Type act_;
  Type residual_;
  bool failed_ = false;
};

Value LlamaBuilder::weight(WeightRole role, int layer) {
  return namedWeight(source_.weightName(role, layer), role);
}

Value LlamaBuilder::namedWeight(const std::string& name, WeightRole role) {
  const TensorInfo* info = source_.findTensor(name);
  Location location = loc(name);
  if (!info) {
    emitError(location) << source_.path() << ": tensor '" << name
                        << "' (" << formats::weightRoleName(role)
                        << ") is missing, expected it for this config";
    failed_ = true;
    return {};
  }
  std::optional<Type> element = elementTypeFor(context_, info->type);
  if (!element) {
    emitError(location) << source_.path() << ": tensor '" << name
                        << "' has type " << formats::elementTypeName(info->type)
                        << ", which kiln does not run; expected F32, F16, BF16, "
                           "Q4_0, Q4_1, Q8_0, Q4_K, Q5_K or Q6_K";
    failed_ = true;
    return {};
  }
  return builder_.create<xfmr::WeightOp>(location, tensor(info->shape, *element),
                                         builder_.getStringAttr(name));
}

// A norm's weight as the kernels use it: the stored w, or gemma's 1 + w in f32.
Value LlamaBuilder::normWeight(WeightRole role, int layer) {
  Value w = weight(role, layer);
  if (!w || config_.norm_weight_offset == 0.0) return w;
  auto stored = cast<RankedTensorType>(w.getType());
  return builder_.create<xfmr::WeightOffsetOp>(
      loc(source_.weightName(role, layer) + ".offset"),
      tensor(stored.getShape(), builder_.getF32Type()), w,
      builder_.getF64FloatAttr(config_.norm_weight_offset));
}

Value LlamaBuilder::rmsNorm(Value x, WeightRole role, int layer, const std::string& name) {
  Value w = normWeight(role, layer);
  if (!w) return {};
  auto shape = cast<RankedTensorType>(x.getType()).getShape();
  return builder_.create<xfmr::RmsNormOp>(loc(name), act(shape), x, w,
                                          builder_.getF64FloatAttr(config_.rms_norm_eps));
}

Value LlamaBuilder::linear(Value input, WeightRole weightRole,
                           std::optional<WeightRole> biasRole, int layer,
                           int64_t outFeatures, const std::string& name) {
  Value w = weight(weightRole, layer);
  Value b = biasRole ? weight(*biasRole, layer) : Value();
  if (!w || (biasRole && !b)) return {};
  return builder_.create<xfmr::LinearOp>(loc(name), act({kDynamic, outFeatures}),
                                         input, w, b);
}

// Gemma 3's sliding layers rotate with their own theta, unscaled.
xfmr::RopeAttr LlamaBuilder::ropeAttr(int layer) {
  const formats::RopeScaling unscaled;
  const formats::RopeScaling& scaling =
      config_.ropeScaledAt(layer) ? config_.rope_scaling : unscaled;
  auto f = [](double v) { return llvm::APFloat(v); };
  int64_t originalMax = scaling.original_max_position_embeddings > 0
                            ? scaling.original_max_position_embeddings
                            : config_.max_position_embeddings;
  return xfmr::RopeAttr::get(
      &context_, f(config_.ropeThetaOf(layer)),
      std::string(formats::ropeStyleName(config_.rope_style)),
      std::string(formats::ropeScalingKindName(scaling.kind)), f(scaling.factor),
      f(scaling.low_freq_factor), f(scaling.high_freq_factor), originalMax);
}

Value LlamaBuilder::attention(Value h, Value positions, Value pastK, Value pastV,
                              int layer, Value& presentK, Value& presentV) {
  const int64_t heads = config_.num_heads, kvHeads = config_.num_kv_heads;
  const int64_t headDim = config_.head_dim;
  const std::string prefix = "layer" + std::to_string(layer) + ".";
  const bool bias = config_.attention_bias;
  auto biasRole = [&](WeightRole role) {
    return bias ? std::optional<WeightRole>(role) : std::nullopt;
  };

  Value q, k, v;
  if (config_.fused_qkv) {  // one [(H + 2 Hkv) D] projection, split as q | k | v
    Value qkv = linear(h, WeightRole::kQkv, std::nullopt, layer,
                       (heads + 2 * kvHeads) * headDim, prefix + "qkv_proj");
    if (!qkv) return {};
    auto parts = builder_.create<xfmr::SplitOp>(
        loc(prefix + "qkv_split"),
        TypeRange{act({kDynamic, heads * headDim}), act({kDynamic, kvHeads * headDim}),
                  act({kDynamic, kvHeads * headDim})},
        qkv, builder_.getI64IntegerAttr(1),
        builder_.getDenseI64ArrayAttr({heads * headDim, kvHeads * headDim, kvHeads * headDim}));
    q = parts.getResult(0);
    k = parts.getResult(1);
    v = parts.getResult(2);
  } else {
    q = linear(h, WeightRole::kQ, biasRole(WeightRole::kQBias), layer,
               heads * headDim, prefix + "q_proj");
    k = linear(h, WeightRole::kK, biasRole(WeightRole::kKBias), layer,
               kvHeads * headDim, prefix + "k_proj");
    v = linear(h, WeightRole::kV, biasRole(WeightRole::kVBias), layer,
               kvHeads * headDim, prefix + "v_proj");
  }
  if (!q || !k || !v) return {};

  auto split = [&](Value x, int64_t n, const char* what) -> Value {
    return builder_.create<xfmr::ReshapeOp>(loc(prefix + what),
                                            act({kDynamic, n, headDim}), x);
  };
  Value qh = split(q, heads, "q_heads"), kh = split(k, kvHeads, "k_heads");
  if (config_.qk_norm) {
    Value qNorm = normWeight(WeightRole::kQNorm, layer);
    Value kNorm = normWeight(WeightRole::kKNorm, layer);
    if (!qNorm || !kNorm) return {};
    FloatAttr eps = builder_.getF64FloatAttr(config_.rms_norm_eps);
    qh = builder_.create<xfmr::RmsNormOp>(loc(prefix + "q_norm"), act({kDynamic, heads, headDim}),
                                          qh, qNorm, eps);
    kh = builder_.create<xfmr::RmsNormOp>(loc(prefix + "k_norm"), act({kDynamic, kvHeads, headDim}),
                                          kh, kNorm, eps);
  }
  xfmr::RopeAttr rope = ropeAttr(layer);
  Value qr = builder_.create<xfmr::RopeOp>(
      loc(prefix + "rope_q"), act({kDynamic, heads, headDim}), qh, positions, rope);
  Value kr = builder_.create<xfmr::RopeOp>(
      loc(prefix + "rope_k"), act({kDynamic, kvHeads, headDim}), kh, positions, rope);
  Value vs = split(v, kvHeads, "v_heads");

  RankedTensorType kvType = act({kDynamic, kvHeads, headDim});
  presentK = builder_.create<xfmr::KvConcatOp>(loc(prefix + "k_cache"), kvType,
                                               pastK, kr);
  presentV = builder_.create<xfmr::KvConcatOp>(loc(prefix + "v_cache"), kvType,
                                               pastV, vs);

  DenseI64ArrayAttr swap01 = builder_.getDenseI64ArrayAttr({1, 0, 2});
  auto headsFirst = [&](Value x, int64_t n, const char* what) -> Value {
    return builder_.create<xfmr::TransposeOp>(
        loc(prefix + what), act({n, kDynamic, headDim}), x, swap01);
  };
  Value qt = headsFirst(qr, heads, "q_transpose");
  Value kt = headsFirst(presentK, kvHeads, "k_transpose");
  Value vt = headsFirst(presentV, kvHeads, "v_transpose");
  if (heads != kvHeads) {
    int64_t groups = heads / kvHeads;
    kt = builder_.create<xfmr::RepeatKvOp>(loc(prefix + "k_repeat"),
                                           act({heads, kDynamic, headDim}), kt,
                                           builder_.getI64IntegerAttr(groups));
    vt = builder_.create<xfmr::RepeatKvOp>(loc(prefix + "v_repeat"),
                                           act({heads, kDynamic, headDim}), vt,
                                           builder_.getI64IntegerAttr(groups));
  }

  RankedTensorType scoreType = act({heads, kDynamic, kDynamic});
  Value scores = builder_.create<xfmr::BatchMatmulOp>(
      loc(prefix + "qk"), scoreType, qt, kt, builder_.getUnitAttr());
  Value scaled = builder_.create<xfmr::ScaleOp>(
      loc(prefix + "scale"), scores,
      builder_.getF64FloatAttr(config_.attentionScale()));
  const int64_t window = config_.windowOf(layer);
  Value masked = builder_.create<xfmr::CausalMaskOp>(
      loc(prefix + "mask"), scaled,
      window > 0 ? builder_.getI64IntegerAttr(window) : IntegerAttr());
  Value probs = builder_.create<xfmr::SoftmaxOp>(loc(prefix + "softmax"), masked,
                                                 builder_.getI64IntegerAttr(2));
  Value context = builder_.create<xfmr::BatchMatmulOp>(
      loc(prefix + "pv"), act({heads, kDynamic, headDim}), probs, vt,
      UnitAttr());
  Value tokensFirst = builder_.create<xfmr::TransposeOp>(
      loc(prefix + "o_transpose"), act({kDynamic, heads, headDim}), context,
      swap01);
  Value merged = builder_.create<xfmr::ReshapeOp>(
      loc(prefix + "o_merge"), act({kDynamic, heads * headDim}), tokensFirst);
  return linear(merged, WeightRole::kO,
                config_.output_bias ? std::optional<WeightRole>(WeightRole::kOBias) : std::nullopt,
                layer, config_.hidden_size, prefix + "o_proj");
}

Value LlamaBuilder::mlp(Value h, int layer) {
  const std::string prefix = "layer" + std::to_string(layer) + ".";
  const int64_t ffn = config_.intermediate_size;
  Value gate, up;
  if (config_.fused_gate_up) {  // one [2F] projection: gate, then up
    Value gateUp = linear(h, WeightRole::kGateUp, std::nullopt, layer, 2 * ffn,
                          prefix + "gate_up_proj");
    if (!gateUp) return {};
    auto parts = builder_.create<xfmr::SplitOp>(
        loc(prefix + "gate_up_split"), TypeRange{act({kDynamic, ffn}), act({kDynamic, ffn})},
        gateUp, builder_.getI64IntegerAttr(1), builder_.getDenseI64ArrayAttr({ffn, ffn}));
    gate = parts.getResult(0);
    up = parts.getResult(1);
  } else {
    gate = linear(h, WeightRole::kGate, std::nullopt, layer, ffn, prefix + "gate_proj");
    up = linear(h, WeightRole::kUp, std::nullopt, layer, ffn, prefix + "up_proj");
  }
  if (!gate || !up) return {};
  const bool gelu = config_.mlp_activation == formats::MlpActivation::kGeluTanh;
  Value activated =
      gelu ? builder_.create<xfmr::GeluTanhOp>(loc(prefix + "gelu_tanh"), gate).getResult()
           : builder_.create<xfmr::SiluOp>(loc(prefix + "silu"), gate).getResult();
  Value product = builder_.create<xfmr::MulOp>(
      loc(prefix + (gelu ? "gelu_tanh_mul" : "silu_mul")), activated, up);
  return linear(product, WeightRole::kDown, std::nullopt, layer,
                config_.hidden_size, prefix + "down_proj");
}

// A layer's experts of `role` as one [E, ...] tensor: GGUF's as stored,
// HF's per-expert tensors stacked (made once at load).
Value LlamaBuilder::expertWeights(WeightRole role, int layer) {
  if (source_.expertsStacked()) return weight(role, layer);
  llvm::SmallVector<Value> experts;
  for (int e = 0; e < config_.num_experts; ++e) {
    Value w = namedWeight(source_.expertWeightName(role, layer, e), role);
    if (!w) return {};
    experts.push_back(w);
  }
  auto one = cast<RankedTensorType>(experts.front().getType());
  llvm::SmallVector<int64_t> shape = {config_.num_experts};
  llvm::append_range(shape, one.getShape());
  return builder_.create<xfmr::StackOp>(
      loc("layer" + std::to_string(layer) + "." + std::string(formats::weightRoleName(role)) + "s"),
      tensor(shape, one.getElementType()), experts);
}

Value LlamaBuilder::moe(Value h, int layer) {
  const std::string prefix = "layer" + std::to_string(layer) + ".";
  const int64_t k = config_.experts_per_token;
  Value logits = linear(h, WeightRole::kRouter, std::nullopt, layer, config_.num_experts,
                        prefix + "router");
  Value gate = expertWeights(WeightRole::kExpertGate, layer);
  Value up = expertWeights(WeightRole::kExpertUp, layer);
  Value down = expertWeights(WeightRole::kExpertDown, layer);
  if (!logits || !gate || !up || !down) return {};
  auto route = builder_.create<xfmr::MoeRouterOp>(
      loc(prefix + "route"), TypeRange{act({kDynamic, k}), tensor({kDynamic, k}, builder_.getI32Type())},
      logits, builder_.getI64IntegerAttr(k), builder_.getBoolAttr(config_.norm_topk_prob));
  return builder_.create<xfmr::MoeFfnOp>(loc(prefix + "experts"), act({kDynamic, config_.hidden_size}), h,
                                         route.getWeights(), route.getExperts(), gate, up, down);
}

DictionaryAttr LlamaBuilder::configAttr() {
  auto i = [&](int64_t v) { return builder_.getI64IntegerAttr(v); };
  auto f = [&](double v) { return builder_.getF64FloatAttr(v); };
  auto s = [&](llvm::StringRef v) { return builder_.getStringAttr(v); };
  const formats::RopeScaling& scaling = config_.rope_scaling;
  llvm::SmallVector<NamedAttribute> entries = {
      builder_.getNamedAttr("architecture", s(config_.architecture)),
      builder_.getNamedAttr("hidden_size", i(config_.hidden_size)),
      builder_.getNamedAttr("intermediate_size", i(config_.intermediate_size)),
      builder_.getNamedAttr("num_layers", i(config_.num_layers)),
      builder_.getNamedAttr("num_heads", i(config_.num_heads)),
      builder_.getNamedAttr("num_kv_heads", i(config_.num_kv_heads)),
      builder_.getNamedAttr("head_dim", i(config_.head_dim)),
      builder_.getNamedAttr("vocab_size", i(config_.vocab_size)),
      builder_.getNamedAttr("max_position_embeddings",
                            i(config_.max_position_embeddings)),
      builder_.getNamedAttr("rms_norm_eps", f(config_.rms_norm_eps)),
      builder_.getNamedAttr("rope_theta", f(config_.rope_theta)),
      builder_.getNamedAttr("rope_style",
                            s(std::string(formats::ropeStyleName(config_.rope_style)))),
      builder_.getNamedAttr(
          "rope_scaling",
          s(std::string(formats::ropeScalingKindName(scaling.kind)))),
      builder_.getNamedAttr("tie_word_embeddings",
                            builder_.getBoolAttr(config_.tie_word_embeddings)),
      builder_.getNamedAttr("attention_bias",
                            builder_.getBoolAttr(config_.attention_bias)),
      builder_.getNamedAttr("output_bias", builder_.getBoolAttr(config_.output_bias)),
      builder_.getNamedAttr("qk_norm", builder_.getBoolAttr(config_.qk_norm)),
      builder_.getNamedAttr("fused_qkv", builder_.getBoolAttr(config_.fused_qkv)),
      builder_.getNamedAttr("fused_gate_up", builder_.getBoolAttr(config_.fused_gate_up)),
      builder_.getNamedAttr("sliding_window", i(config_.sliding_window)),
      builder_.getNamedAttr("source", s(source_.path())),
  };
  // The sliding layers, where not every layer slides (Qwen's max_window_layers, layer_types).
  if (!config_.sliding_layers.empty()) {
    llvm::SmallVector<int64_t> layers;
    for (size_t l = 0; l < config_.sliding_layers.size(); ++l)
      if (config_.sliding_layers[l]) layers.push_back(int64_t(l));
    entries.push_back(builder_.getNamedAttr("sliding_layers", builder_.getDenseI64ArrayAttr(layers)));
  }
  if (config_.num_experts > 0) {  // mixtral, qwen3_moe
    entries.push_back(builder_.getNamedAttr("num_experts", i(config_.num_experts)));
    entries.push_back(builder_.getNamedAttr("experts_per_token", i(config_.experts_per_token)));
    entries.push_back(builder_.getNamedAttr("moe_intermediate_size", i(config_.moe_intermediate_size)));
    entries.push_back(builder_.getNamedAttr("norm_topk_prob", builder_.getBoolAttr(config_.norm_topk_prob)));
    llvm::SmallVector<int64_t> moeLayers;
    for (int64_t l = 0; l < config_.num_layers; ++l)
      if (config_.isMoeLayer(l)) moeLayers.push_back(l);
    entries.push_back(builder_.getNamedAttr("moe_layers", builder_.getDenseI64ArrayAttr(moeLayers)));
  }
  if (config_.sandwich_norms) {  // gemma3 (absent for the others, whose plans stay as they were)
    entries.push_back(builder_.getNamedAttr(
        "mlp_activation", s(std::string(formats::mlpActivationName(config_.mlp_activation)))));
    entries.push_back(builder_.getNamedAttr("sandwich_norms", builder_.getBoolAttr(true)));
    entries.push_back(builder_.getNamedAttr("norm_weight_offset", f(config_.norm_weight_offset)));
    entries.push_back(builder_.getNamedAttr("embedding_scale", f(config_.embedding_scale)));
    entries.push_back(builder_.getNamedAttr("attention_scale", f(config_.attentionScale())));
    entries.push_back(builder_.getNamedAttr("rope_local_theta", f(config_.rope_local_theta)));
  }
  return builder_.getDictionaryAttr(entries);
}

OwningOpRef<ModuleOp> LlamaBuilder::build() {
  const int64_t layers = config_.num_layers;
  const int64_t kvHeads = config_.num_kv_heads, headDim = config_.head_dim;
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc(source_.path()));
  (*module)->setAttr("xfmr.config", configAttr());
  builder_.setInsertionPointToEnd(module->getBody());

  Type i32 = builder_.getI32Type();
  RankedTensorType ids = tensor({kDynamic}, i32);
  RankedTensorType kvType = act({kDynamic, kvHeads, headDim});
  llvm::SmallVector<Type> inputs = {ids, ids};
  llvm::SmallVector<Type> results = {act({kDynamic, config_.vocab_size})};
  for (int64_t l = 0; l < layers; ++l) {
    inputs.append({kvType, kvType});
    results.append({kvType, kvType});
  }
  auto func = builder_.create<func::FuncOp>(
      loc("forward"), "forward", builder_.getFunctionType(inputs, results));
  // Argument names make the signature readable in the printed IR's attrs.
  func.setArgAttr(0, "xfmr.name", builder_.getStringAttr("tokens"));
  func.setArgAttr(1, "xfmr.name", builder_.getStringAttr("positions"));
  for (int64_t l = 0; l < layers; ++l) {
    func.setArgAttr(2 + 2 * l, "xfmr.name",
                    builder_.getStringAttr("past_k." + std::to_string(l)));
    func.setArgAttr(3 + 2 * l, "xfmr.name",
                    builder_.getStringAttr("past_v." + std::to_string(l)));
  }
  Block* entry = func.addEntryBlock();
  builder_.setInsertionPointToStart(entry);
  Value tokens = entry->getArgument(0), positions = entry->getArgument(1);

  const int64_t hidden = config_.hidden_size;
  Value table = weight(WeightRole::kTokenEmbedding, 0);
  if (!table) return nullptr;
  // Gemma's scale is cast to the type the embedding runs in
  // (Gemma3TextScaledWordEmbedding: embed_scale.to(weight.dtype), the
  // dtype transformers loads the model in, not the one it is stored in):
  // kiln's activation type.
  FloatAttr embedScale;
  if (config_.embedding_scale != 1.0) {
    llvm::APFloat scale(config_.embedding_scale);
    bool lost = false;
    scale.convert(cast<FloatType>(act_).getFloatSemantics(), llvm::APFloat::rmNearestTiesToEven, &lost);
    scale.convert(llvm::APFloat::IEEEdouble(), llvm::APFloat::rmNearestTiesToEven, &lost);
    embedScale = builder_.getF64FloatAttr(scale.convertToDouble());
  }
  Value x = builder_.create<xfmr::EmbedOp>(
      loc("embed"), tensor({kDynamic, hidden}, residual_), tokens, table, embedScale);
  llvm::SmallVector<Value> returned = {Value()};
  for (int64_t l = 0; l < layers; ++l) {
    const std::string prefix = "layer" + std::to_string(l) + ".";
    Value h = rmsNorm(x, WeightRole::kAttnNorm, l, prefix + "attn_norm");
    if (!h) return nullptr;
    Value presentK, presentV;
    Value attn = attention(h, positions, entry->getArgument(2 + 2 * l),
                           entry->getArgument(3 + 2 * l), l, presentK, presentV);
    if (!attn) return nullptr;
    if (config_.sandwich_norms)
      attn = rmsNorm(attn, WeightRole::kAttnPostNorm, l, prefix + "attn_post_norm");
    if (!attn) return nullptr;
    x = builder_.create<xfmr::AddOp>(loc(prefix + "attn_residual"), x, attn);
    Value h2 = rmsNorm(x, WeightRole::kFfnNorm, l, prefix + "ffn_norm");
    if (!h2) return nullptr;
    Value down = config_.isMoeLayer(l) ? moe(h2, l) : mlp(h2, l);
    if (down && config_.sandwich_norms)
      down = rmsNorm(down, WeightRole::kFfnPostNorm, l, prefix + "ffn_post_norm");
    if (!down) return nullptr;
    x = builder_.create<xfmr::AddOp>(loc(prefix + "ffn_residual"), x, down);
    returned.append({presentK, presentV});
  }
  Value finalNorm = normWeight(WeightRole::kFinalNorm, 0);
  Value head = weight(WeightRole::kLmHead, 0);
  if (!finalNorm || !head) return nullptr;
  Value normed = builder_.create<xfmr::RmsNormOp>(
      loc("final_norm"), act({kDynamic, hidden}), x, finalNorm,
      builder_.getF64FloatAttr(config_.rms_norm_eps));
  returned[0] = builder_.create<xfmr::LogitsOp>(
      loc("logits"), act({kDynamic, config_.vocab_size}), normed, head);
  builder_.create<func::ReturnOp>(loc("return"), returned);
  if (failed_) return nullptr;
  return module;
}

}  // namespace

OwningOpRef<ModuleOp> importModel(MLIRContext& context,
                                  const formats::ModelSource& source,
                                  const ImportOptions& options) {
  context.loadDialect<xfmr::XfmrDialect, func::FuncDialect>();
  auto floatType = [&](llvm::StringRef name) -> Type {
    if (name == "f32") return Float32Type::get(&context);
    if (name == "bf16") return BFloat16Type::get(&context);
    if (name == "f16") return Float16Type::get(&context);
    return {};
  };
  Type act = floatType(options.activationType);
  if (!act) {
    emitError(UnknownLoc::get(&context))
        << "activation type '" << options.activationType
        << "', expected f32, bf16 or f16";
    return nullptr;
  }
  Type residual = options.residualType.empty() ? act : floatType(options.residualType);
  if (!residual || (residual != act && residual.getIntOrFloatBitWidth() <=
                                           act.getIntOrFloatBitWidth())) {
    emitError(UnknownLoc::get(&context))
        << "residual type '" << options.residualType
        << "', expected the activation type (" << options.activationType
        << ") or a wider float type";
    return nullptr;
  }
  return LlamaBuilder(context, source, act, residual).build();
}

}  // namespace kiln
