//===- SsmImporter.cpp - Mamba / Mamba-2 model -> xfmr IR ------------------===//
//
// One Mamba layer (S new tokens; I = expand · hidden, N = state size,
// R = dt rank), as transformers' MambaMixer:
//
//   h          = rms_norm(x, norm)
//   u, z       = split(linear(h, in_proj), [I, I])
//   u, conv'   = causal_conv1d(u, past_conv, conv1d) {silu}
//   dt, B, C   = split(linear(u, x_proj), [R, N, N]);  dt = linear(dt, dt_proj) (+ bias)
//   y, ssm'    = selective_scan(u, dt, A_log, B, C, D, past_ssm)
//   x          = x + linear(y · silu(z), out_proj)
//
// One Mamba-2 layer (H heads of P, G groups), as Mamba2Mixer:
//
//   z, xBC, dt = split(linear(h, in_proj), [I, I + 2GN, H])
//   xBC, conv' = causal_conv1d(xBC, past_conv, conv1d) {silu}
//   u, B, C    = split(xBC, [I, GN, GN])     -> [S, H, P], [S, G, N], [S, G, N]
//   y, ssm'    = ssd_scan(u, dt, dt_bias, A_log, B, C, D, past_ssm)
//   x          = x + linear(gated_rms_norm(y, z, norm), out_proj)
//
// Nemotron-H (a hybrid stack, hybrid_override_pattern "M*M-"): every block
// is x += mixer(rms_norm(x)) with a Mamba-2 mixer (its gated norm per group
// of I / G), causal GQA attention without positions (kv_concat, as the
// Llama importer's, scaled by head_dim^-1/2), or an MLP down(relu(up(x))²).
//
// then norm_f and the head (the embedding when tied). x has the residual
// type, the carried conv inputs the activation type, the SSM state f32.
//
//===----------------------------------------------------------------------===//

#include "models/importer/SsmImporter.h"

#include "dialects/xfmr/IR/XfmrDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

#include <cmath>

using namespace mlir;
using kiln::formats::ElementType;
using kiln::formats::SsmConfig;
using kiln::formats::SsmKind;
using kiln::formats::SsmSource;

namespace kiln {
namespace {

constexpr int64_t kDynamic = ShapedType::kDynamic;

class SsmBuilder {
 public:
  SsmBuilder(MLIRContext& context, const SsmSource& source, Type act, Type residual)
      : context_(context), source_(source), config_(source.config()), builder_(&context), act_(act),
        residual_(residual) {}

  OwningOpRef<ModuleOp> build();

 private:
  Location loc(const std::string& name) { return NameLoc::get(StringAttr::get(&context_, name)); }
  RankedTensorType tensor(llvm::ArrayRef<int64_t> shape, Type element) {
    return RankedTensorType::get(shape, element);
  }
  RankedTensorType act(llvm::ArrayRef<int64_t> shape) { return tensor(shape, act_); }
  Value weight(const std::string& name);
  Value linear(Value input, const std::string& weightName, const std::string& biasName, int64_t out,
               const std::string& name);
  llvm::SmallVector<Value> split(Value input, llvm::ArrayRef<int64_t> sizes, const std::string& name);
  Value mambaMixer(Value h, int64_t layer, Value pastConv, Value pastSsm, Value& conv, Value& ssm);
  Value mamba2Mixer(Value h, int64_t layer, Value pastConv, Value pastSsm, Value& conv, Value& ssm);
  Value attention(Value h, int64_t layer, Value pastK, Value pastV, Value& presentK, Value& presentV);
  Value mlp(Value h, int64_t layer);
  formats::SsmLayerKind kindOf(int64_t layer) const {
    return config_.layer_kinds.empty() ? formats::SsmLayerKind::kMamba : config_.layer_kinds[size_t(layer)];
  }
  RankedTensorType ssmStateType();
  DictionaryAttr configAttr();

  MLIRContext& context_;
  const SsmSource& source_;
  const SsmConfig& config_;
  OpBuilder builder_;
  Type act_;
  Type residual_;
  bool failed_ = false;
};

Value SsmBuilder::weight(const std::string& name) {
  const formats::TensorInfo* info = source_.findTensor(name);
  if (!info) {
    emitError(loc(name)) << source_.path() << ": tensor '" << name << "' is missing, expected it for this config";
    failed_ = true;
    return {};
  }
  Type element;
  switch (info->type) {
  case ElementType::F32: element = builder_.getF32Type(); break;
  case ElementType::F16: element = builder_.getF16Type(); break;
  case ElementType::BF16: element = builder_.getBF16Type(); break;
  default:
    emitError(loc(name)) << source_.path() << ": tensor '" << name << "' has type "
                         << formats::elementTypeName(info->type) << ", expected F32, F16 or BF16";
    failed_ = true;
    return {};
  }
  return builder_.create<xfmr::WeightOp>(loc(name), tensor(info->shape, element), builder_.getStringAttr(name));
}

Value SsmBuilder::linear(Value input, const std::string& weightName, const std::string& biasName, int64_t out,
                         const std::string& name) {
  Value w = weight(weightName);
  Value b = biasName.empty() ? Value() : weight(biasName);
  if (!w || (!biasName.empty() && !b)) return {};
  return builder_.create<xfmr::LinearOp>(loc(name), act({kDynamic, out}), input, w, b);
}

llvm::SmallVector<Value> SsmBuilder::split(Value input, llvm::ArrayRef<int64_t> sizes, const std::string& name) {
  llvm::SmallVector<Type> types;
  for (int64_t s : sizes) types.push_back(act({kDynamic, s}));
  auto op = builder_.create<xfmr::SplitOp>(loc(name), types, input, builder_.getI64IntegerAttr(1),
                                           builder_.getDenseI64ArrayAttr(sizes));
  return llvm::SmallVector<Value>(op.getResults());
}

RankedTensorType SsmBuilder::ssmStateType() {
  const SsmConfig& c = config_;
  if (c.kind == SsmKind::kMamba) return tensor({c.intermediate_size, c.state_size}, builder_.getF32Type());
  return tensor({c.num_heads, c.head_dim, c.state_size}, builder_.getF32Type());
}

Value SsmBuilder::mambaMixer(Value h, int64_t l, Value pastConv, Value pastSsm, Value& conv, Value& ssm) {
  const SsmConfig& c = config_;
  const int64_t I = c.intermediate_size, N = c.state_size, R = c.time_step_rank;
  const std::string p = "layer" + std::to_string(l) + ".";
  auto name = [&](const char* what) { return SsmSource::mixerName(l, what); };
  Value proj = linear(h, name("in_proj.weight"), c.use_bias ? name("in_proj.bias") : "", 2 * I, p + "in_proj");
  if (!proj) return {};
  auto uz = split(proj, {I, I}, p + "in_split");
  Value w = weight(name("conv1d.weight"));
  Value b = c.use_conv_bias ? weight(name("conv1d.bias")) : Value();
  if (!w || (c.use_conv_bias && !b)) return {};
  auto convOp = builder_.create<xfmr::CausalConv1dOp>(
      loc(p + "conv1d"), TypeRange{act({kDynamic, I}), act({c.conv_kernel - 1, I})}, uz[0], pastConv, w, b,
      builder_.getStringAttr("silu"));
  Value u = convOp.getResult();
  conv = convOp.getPresent();
  Value dbc = linear(u, name("x_proj.weight"), "", R + 2 * N, p + "x_proj");
  if (!dbc) return {};
  auto parts = split(dbc, {R, N, N}, p + "x_split");
  Value dt = linear(parts[0], name("dt_proj.weight"), name("dt_proj.bias"), I, p + "dt_proj");
  Value aLog = weight(name("A_log")), d = weight(name("D"));
  if (!dt || !aLog || !d) return {};
  auto scan = builder_.create<xfmr::SelectiveScanOp>(loc(p + "scan"), TypeRange{act({kDynamic, I}), ssmStateType()},
                                                     u, dt, aLog, parts[1], parts[2], d, pastSsm);
  ssm = scan.getPresent();
  Value gate = builder_.create<xfmr::SiluOp>(loc(p + "gate_silu"), uz[1]);
  Value gated = builder_.create<xfmr::MulOp>(loc(p + "gate_mul"), scan.getResult(), gate);
  return linear(gated, name("out_proj.weight"), c.use_bias ? name("out_proj.bias") : "", c.hidden_size,
                p + "out_proj");
}

Value SsmBuilder::mamba2Mixer(Value h, int64_t l, Value pastConv, Value pastSsm, Value& conv, Value& ssm) {
  const SsmConfig& c = config_;
  const int64_t I = c.intermediate_size, N = c.state_size, G = c.n_groups, H = c.num_heads, P = c.head_dim;
  const int64_t C = c.convChannels();
  const std::string p = "layer" + std::to_string(l) + ".";
  auto name = [&](const char* what) { return SsmSource::mixerName(l, what); };
  Value proj = linear(h, name("in_proj.weight"), c.use_bias ? name("in_proj.bias") : "", c.inProjFeatures(),
                      p + "in_proj");
  if (!proj) return {};
  auto zxdt = split(proj, {I, C, H}, p + "in_split");
  Value w = weight(name("conv1d.weight"));
  Value b = c.use_conv_bias ? weight(name("conv1d.bias")) : Value();
  if (!w || (c.use_conv_bias && !b)) return {};
  auto convOp = builder_.create<xfmr::CausalConv1dOp>(
      loc(p + "conv1d"), TypeRange{act({kDynamic, C}), act({c.conv_kernel - 1, C})}, zxdt[1], pastConv, w, b,
      builder_.getStringAttr("silu"));
  conv = convOp.getPresent();
  auto xbc = split(convOp.getResult(), {I, G * N, G * N}, p + "xbc_split");
  Value x = builder_.create<xfmr::ReshapeOp>(loc(p + "x_heads"), act({kDynamic, H, P}), xbc[0]);
  Value bg = builder_.create<xfmr::ReshapeOp>(loc(p + "b_groups"), act({kDynamic, G, N}), xbc[1]);
  Value cg = builder_.create<xfmr::ReshapeOp>(loc(p + "c_groups"), act({kDynamic, G, N}), xbc[2]);
  Value dtBias = weight(name("dt_bias")), aLog = weight(name("A_log")), d = weight(name("D"));
  Value normW = weight(name("norm.weight"));
  if (!dtBias || !aLog || !d || !normW) return {};
  auto scan = builder_.create<xfmr::SsdScanOp>(
      loc(p + "scan"), TypeRange{act({kDynamic, H, P}), ssmStateType()}, x, zxdt[2], dtBias, aLog, bg, cg, d,
      pastSsm, builder_.getI64IntegerAttr(c.chunk_size), builder_.getF64FloatAttr(c.time_step_min_limit),
      builder_.getF64FloatAttr(c.time_step_max_limit));
  ssm = scan.getPresent();
  Value y = builder_.create<xfmr::ReshapeOp>(loc(p + "y_merge"), act({kDynamic, I}), scan.getResult());
  Value normed = builder_.create<xfmr::GatedRmsNormOp>(loc(p + "gated_norm"), act({kDynamic, I}), y, zxdt[0], normW,
                                                       builder_.getF64FloatAttr(c.layer_norm_epsilon),
                                                       builder_.getI64IntegerAttr(c.norm_group_size));
  return linear(normed, name("out_proj.weight"), c.use_bias ? name("out_proj.bias") : "", c.hidden_size,
                p + "out_proj");
}

Value SsmBuilder::attention(Value h, int64_t l, Value pastK, Value pastV, Value& presentK, Value& presentV) {
  const SsmConfig& c = config_;
  const int64_t heads = c.attn_heads, kvHeads = c.attn_kv_heads, D = c.attn_head_dim;
  const std::string p = "layer" + std::to_string(l) + ".";
  auto name = [&](const char* what) { return SsmSource::mixerName(l, what); };
  Value q = linear(h, name("q_proj.weight"), "", heads * D, p + "q_proj");
  Value k = linear(h, name("k_proj.weight"), "", kvHeads * D, p + "k_proj");
  Value v = linear(h, name("v_proj.weight"), "", kvHeads * D, p + "v_proj");
  if (!q || !k || !v) return {};
  auto split = [&](Value x, int64_t n, const char* what) -> Value {
    return builder_.create<xfmr::ReshapeOp>(loc(p + what), act({kDynamic, n, D}), x);
  };
  RankedTensorType kvType = act({kDynamic, kvHeads, D});
  presentK = builder_.create<xfmr::KvConcatOp>(loc(p + "k_cache"), kvType, pastK, split(k, kvHeads, "k_heads"));
  presentV = builder_.create<xfmr::KvConcatOp>(loc(p + "v_cache"), kvType, pastV, split(v, kvHeads, "v_heads"));
  DenseI64ArrayAttr swap01 = builder_.getDenseI64ArrayAttr({1, 0, 2});
  auto headsFirst = [&](Value x, int64_t n, const char* what) -> Value {
    return builder_.create<xfmr::TransposeOp>(loc(p + what), act({n, kDynamic, D}), x, swap01);
  };
  Value qt = headsFirst(split(q, heads, "q_heads"), heads, "q_transpose");
  Value kt = headsFirst(presentK, kvHeads, "k_transpose");
  Value vt = headsFirst(presentV, kvHeads, "v_transpose");
  if (heads != kvHeads) {
    IntegerAttr groups = builder_.getI64IntegerAttr(heads / kvHeads);
    kt = builder_.create<xfmr::RepeatKvOp>(loc(p + "k_repeat"), act({heads, kDynamic, D}), kt, groups);
    vt = builder_.create<xfmr::RepeatKvOp>(loc(p + "v_repeat"), act({heads, kDynamic, D}), vt, groups);
  }
  Value scores = builder_.create<xfmr::BatchMatmulOp>(loc(p + "qk"), act({heads, kDynamic, kDynamic}), qt, kt,
                                                      builder_.getUnitAttr());
  Value scaled = builder_.create<xfmr::ScaleOp>(loc(p + "scale"), scores,
                                                builder_.getF64FloatAttr(1.0 / std::sqrt(double(D))));
  Value masked = builder_.create<xfmr::CausalMaskOp>(loc(p + "mask"), scaled, IntegerAttr());
  Value probs = builder_.create<xfmr::SoftmaxOp>(loc(p + "softmax"), masked, builder_.getI64IntegerAttr(2));
  Value context = builder_.create<xfmr::BatchMatmulOp>(loc(p + "pv"), act({heads, kDynamic, D}), probs, vt,
                                                       UnitAttr());
  Value tokensFirst = builder_.create<xfmr::TransposeOp>(loc(p + "o_transpose"), act({kDynamic, heads, D}), context,
                                                         swap01);
  Value merged = builder_.create<xfmr::ReshapeOp>(loc(p + "o_merge"), act({kDynamic, heads * D}), tokensFirst);
  return linear(merged, name("o_proj.weight"), "", c.hidden_size, p + "o_proj");
}

Value SsmBuilder::mlp(Value h, int64_t l) {
  const std::string p = "layer" + std::to_string(l) + ".";
  Value up = linear(h, SsmSource::mixerName(l, "up_proj.weight"), "", config_.mlp_intermediate_size, p + "up_proj");
  if (!up) return {};
  Value act2 = builder_.create<xfmr::ReluSquaredOp>(loc(p + "relu_squared"), up);
  return linear(act2, SsmSource::mixerName(l, "down_proj.weight"), "", config_.hidden_size, p + "down_proj");
}

DictionaryAttr SsmBuilder::configAttr() {
  const SsmConfig& c = config_;
  auto i = [&](int64_t v) { return builder_.getI64IntegerAttr(v); };
  auto f = [&](double v) { return builder_.getF64FloatAttr(v); };
  llvm::SmallVector<NamedAttribute> entries = {
      builder_.getNamedAttr("architecture", builder_.getStringAttr(c.architecture)),
      builder_.getNamedAttr("hidden_size", i(c.hidden_size)),
      builder_.getNamedAttr("intermediate_size", i(c.intermediate_size)),
      builder_.getNamedAttr("num_layers", i(c.num_layers)),
      builder_.getNamedAttr("vocab_size", i(c.vocab_size)),
      builder_.getNamedAttr("state_size", i(c.state_size)),
      builder_.getNamedAttr("conv_kernel", i(c.conv_kernel)),
      builder_.getNamedAttr("conv_channels", i(c.convChannels())),
      builder_.getNamedAttr("rms_norm_eps", f(c.layer_norm_epsilon)),
      builder_.getNamedAttr("tie_word_embeddings", builder_.getBoolAttr(c.tie_word_embeddings)),
      builder_.getNamedAttr("source", builder_.getStringAttr(source_.path())),
  };
  if (c.kind == SsmKind::kMamba) {
    entries.push_back(builder_.getNamedAttr("time_step_rank", i(c.time_step_rank)));
  } else {
    entries.push_back(builder_.getNamedAttr("ssm_heads", i(c.num_heads)));
    entries.push_back(builder_.getNamedAttr("ssm_head_dim", i(c.head_dim)));
    entries.push_back(builder_.getNamedAttr("ssm_groups", i(c.n_groups)));
    entries.push_back(builder_.getNamedAttr("chunk_size", i(c.chunk_size)));
  }
  llvm::SmallVector<Attribute> kinds;
  for (int64_t l = 0; l < c.num_layers; ++l)
    kinds.push_back(builder_.getStringAttr(formats::ssmLayerKindName(kindOf(l))));
  if (!c.layer_kinds.empty() && c.architecture == "nemotron_h") {
    entries.push_back(builder_.getNamedAttr("attention_heads", i(c.attn_heads)));
    entries.push_back(builder_.getNamedAttr("attention_kv_heads", i(c.attn_kv_heads)));
    entries.push_back(builder_.getNamedAttr("attention_head_dim", i(c.attn_head_dim)));
    entries.push_back(builder_.getNamedAttr("mlp_intermediate_size", i(c.mlp_intermediate_size)));
    entries.push_back(builder_.getNamedAttr("norm_group_size", i(c.norm_group_size)));
  }
  entries.push_back(builder_.getNamedAttr("layer_kinds", builder_.getArrayAttr(kinds)));
  return builder_.getDictionaryAttr(entries);
}

OwningOpRef<ModuleOp> SsmBuilder::build() {
  const SsmConfig& c = config_;
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc(source_.path()));
  (*module)->setAttr("xfmr.config", configAttr());
  builder_.setInsertionPointToEnd(module->getBody());

  RankedTensorType ids = tensor({kDynamic}, builder_.getI32Type());
  RankedTensorType convType = act({c.conv_kernel - 1, c.convChannels()});
  RankedTensorType ssmType = ssmStateType();
  RankedTensorType kvType = act({kDynamic, c.attn_kv_heads, c.attn_head_dim});
  llvm::SmallVector<Type> inputs = {ids, ids};
  llvm::SmallVector<Type> results = {act({kDynamic, c.vocab_size})};
  llvm::SmallVector<std::string> names = {"tokens", "positions"};
  llvm::SmallVector<int64_t> firstArg;  // each layer's first state argument (MLP layers carry none)
  for (int64_t l = 0; l < c.num_layers; ++l) {
    firstArg.push_back(int64_t(inputs.size()));
    const std::string n = std::to_string(l);
    if (kindOf(l) == formats::SsmLayerKind::kMamba) {
      inputs.append({convType, ssmType});
      results.append({convType, ssmType});
      names.append({"past_conv." + n, "past_ssm." + n});
    } else if (kindOf(l) == formats::SsmLayerKind::kAttention) {
      inputs.append({kvType, kvType});
      results.append({kvType, kvType});
      names.append({"past_k." + n, "past_v." + n});
    }
  }
  auto func = builder_.create<func::FuncOp>(loc("forward"), "forward", builder_.getFunctionType(inputs, results));
  for (size_t a = 0; a < names.size(); ++a) func.setArgAttr(unsigned(a), "xfmr.name", builder_.getStringAttr(names[a]));
  Block* entry = func.addEntryBlock();
  builder_.setInsertionPointToStart(entry);

  Value table = weight("backbone.embeddings.weight");
  if (!table) return nullptr;
  Value x = builder_.create<xfmr::EmbedOp>(loc("embed"), tensor({kDynamic, c.hidden_size}, residual_),
                                           entry->getArgument(0), table, FloatAttr());
  llvm::SmallVector<Value> returned = {Value()};
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "layer" + std::to_string(l) + ".";
    Value norm = weight(SsmSource::layerNormName(l));
    if (!norm) return nullptr;
    Value h = builder_.create<xfmr::RmsNormOp>(loc(p + "norm"), act({kDynamic, c.hidden_size}), x, norm,
                                               builder_.getF64FloatAttr(c.layer_norm_epsilon));
    Value first, second, out;
    const formats::SsmLayerKind kind = kindOf(l);
    if (kind == formats::SsmLayerKind::kMlp) {
      out = mlp(h, l);
    } else {
      Value pastA = entry->getArgument(unsigned(firstArg[size_t(l)]));
      Value pastB = entry->getArgument(unsigned(firstArg[size_t(l)] + 1));
      out = kind == formats::SsmLayerKind::kAttention ? attention(h, l, pastA, pastB, first, second)
            : c.kind == SsmKind::kMamba                ? mambaMixer(h, l, pastA, pastB, first, second)
                                                       : mamba2Mixer(h, l, pastA, pastB, first, second);
    }
    if (!out) return nullptr;
    x = builder_.create<xfmr::AddOp>(loc(p + "residual"), x, out);
    if (kind != formats::SsmLayerKind::kMlp) returned.append({first, second});
  }
  Value finalNorm = weight("backbone.norm_f.weight");
  Value head = weight(source_.lmHeadName());
  if (!finalNorm || !head) return nullptr;
  Value normed = builder_.create<xfmr::RmsNormOp>(loc("final_norm"), act({kDynamic, c.hidden_size}), x, finalNorm,
                                                  builder_.getF64FloatAttr(c.layer_norm_epsilon));
  returned[0] = builder_.create<xfmr::LogitsOp>(loc("logits"), act({kDynamic, c.vocab_size}), normed, head);
  builder_.create<func::ReturnOp>(loc("return"), returned);
  if (failed_) return nullptr;
  return module;
}

}  // namespace

OwningOpRef<ModuleOp> importSsmModel(MLIRContext& context, const SsmSource& source, const ImportOptions& options) {
  context.loadDialect<xfmr::XfmrDialect, func::FuncDialect>();
  auto floatType = [&](llvm::StringRef name) -> Type {
    if (name == "f32") return Float32Type::get(&context);
    if (name == "bf16") return BFloat16Type::get(&context);
    if (name == "f16") return Float16Type::get(&context);
    return {};
  };
  Type act = floatType(options.activationType);
  Type residual = options.residualType.empty() ? act : floatType(options.residualType);
  if (!act || !residual) {
    emitError(UnknownLoc::get(&context)) << "activation type '" << options.activationType << "' / residual type '"
                                         << options.residualType << "', expected f32, bf16 or f16";
    return nullptr;
  }
  return SsmBuilder(context, source, act, residual).build();
}

}  // namespace kiln
