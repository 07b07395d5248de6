#include "models/formats/model_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "models/formats/error_text.h"
#include "models/formats/mapped_file.h"
#include "models/formats/result_assign.h"

namespace kiln::formats {
namespace {

using json = nlohmann::json;

constexpr std::string_view kSupported = "llama, mistral, qwen2, qwen3, phi3, gemma3_text, mixtral, qwen3_moe";
constexpr int64_t kMaxSize = (int64_t{1} << 31) - 1;

bool isSupportedArch(std::string_view a) {
  return a == "llama" || a == "mistral" || a == "qwen2" || a == "qwen3" || a == "phi3" || a == "gemma3" ||
         a == "mixtral" || a == "qwen3_moe";
}

std::string_view jsonTypeName(const json& j) {
  switch (j.type()) {
    case json::value_t::null: return "null";
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    case json::value_t::string: return "a string";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a number";
    default: return "invalid";
  }
}

// Typed field access over one config object; every error names the file and
// the field. A JSON null counts as absent (HF writes "head_dim": null).
class HfFields {
 public:
  HfFields(const json& obj, const std::string& name, std::string prefix = "")
      : obj_(obj), name_(name), prefix_(std::move(prefix)) {}

  const json* get(std::string_view key) const {
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  Error illTyped(std::string_view key, const json& v, std::string_view expected) const {
    std::string shown = v.dump();
    if (shown.size() > 40) shown = shown.substr(0, 37) + "...";
    return makeError("{}: field '{}{}' is {} ({}), expected {}", name_, prefix_, key,
                     jsonTypeName(v), shown, expected);
  }

  Result<int64_t> integer(std::string_view key, std::optional<int64_t> fallback) const {
    const json* v = get(key);
    if (v == nullptr) {
      if (fallback) return *fallback;
      return makeError("{}: missing field '{}{}' (expected an integer)", name_, prefix_, key);
    }
    if (v->is_number_unsigned()) {
      if (v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return illTyped(key, *v, "an integer that fits int64");
      return static_cast<int64_t>(v->get<uint64_t>());
    }
    if (v->is_number_integer()) return v->get<int64_t>();
    return illTyped(key, *v, "an integer");
  }

  Result<double> number(std::string_view key, std::optional<double> fallback) const {
    const json* v = get(key);
    if (v == nullptr) {
      if (fallback) return *fallback;
      return makeError("{}: missing field '{}{}' (expected a number)", name_, prefix_, key);
    }
    if (!v->is_number()) return illTyped(key, *v, "a number");
    return v->get<double>();
  }

  Result<bool> boolean(std::string_view key, bool fallback) const {
    const json* v = get(key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) return illTyped(key, *v, "a boolean");
    return v->get<bool>();
  }

  Result<std::optional<std::string>> string(std::string_view key) const {
    const json* v = get(key);
    if (v == nullptr) return std::optional<std::string>();
    if (!v->is_string()) return illTyped(key, *v, "a string");
    return std::optional<std::string>(v->get<std::string>());
  }

 private:
  const json& obj_;
  const std::string& name_;
  std::string prefix_;
};

std::string_view archFromClassName(std::string_view cls) {
  if (cls == "LlamaForCausalLM") return "llama";
  if (cls == "MistralForCausalLM") return "mistral";
  if (cls == "Qwen2ForCausalLM") return "qwen2";
  if (cls == "Qwen3ForCausalLM") return "qwen3";
  if (cls == "Phi3ForCausalLM") return "phi3";
  if (cls == "Gemma3ForCausalLM") return "gemma3";
  if (cls == "MixtralForCausalLM") return "mixtral";
  if (cls == "Qwen3MoeForCausalLM") return "qwen3_moe";
  return {};
}

Status parseRopeScaling(const json& rs, const std::string& name, std::string_view field,
                        ModelConfig& c) {
  if (!rs.is_object())
    return makeError("{}: field '{}' is {}, expected an object or null", name, field,
                     jsonTypeName(rs));
  std::string prefix = fmt::format("{}.", field);
  HfFields f(rs, name, prefix);
  std::optional<std::string> type;
  KILN_ASSIGN(type, f.string("rope_type"));
  if (!type) KILN_ASSIGN(type, f.string("type"));  // older configs
  if (!type || *type == "default") return Status::success();
  if (*type == "linear") {
    c.rope_scaling.kind = RopeScaling::Kind::kLinear;
    KILN_ASSIGN(c.rope_scaling.factor, f.number("factor", std::nullopt));
  } else if (*type == "llama3") {
    c.rope_scaling.kind = RopeScaling::Kind::kLlama3;
    KILN_ASSIGN(c.rope_scaling.factor, f.number("factor", std::nullopt));
    KILN_ASSIGN(c.rope_scaling.low_freq_factor, f.number("low_freq_factor", std::nullopt));
    KILN_ASSIGN(c.rope_scaling.high_freq_factor, f.number("high_freq_factor", std::nullopt));
    KILN_ASSIGN(c.rope_scaling.original_max_position_embeddings,
                f.integer("original_max_position_embeddings", std::nullopt));
  } else {
    return makeError("{}: field '{}rope_type' is '{}', supported: default, linear, llama3", name,
                     prefix, printable(*type));
  }
  return Status::success();
}

// Fields that change the computation in ways kiln does not implement: a
// model that sets them is refused rather than run approximately.
Status rejectUnimplemented(const HfFields& f, const std::string& name) {
  for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping", "dual_chunk_attention_config",
                          "attention_chunk_size", "sinks", "attention_sinks", "use_attention_sinks"}) {
    const json* v = f.get(key);
    if (v == nullptr || (v->is_boolean() && !v->get<bool>())) continue;
    std::string shown = v->dump();
    if (shown.size() > 40) shown = shown.substr(0, 37) + "...";
    return makeError("{}: field '{}' is {}, which kiln does not implement", name, key, shown);
  }
  const json* partial = f.get("partial_rotary_factor");
  if (partial != nullptr && !(partial->is_number() && partial->get<double>() == 1.0))
    return makeError("{}: field 'partial_rotary_factor' is {}, kiln rotates whole heads only (1.0)", name,
                     partial->dump());
  return Status::success();
}

// Routing and expert features of other MoE families (Qwen2-MoE's and
// DeepSeek's shared experts, grouped or sigmoid routing, scaled routed
// outputs, dense leading layers): each changes what inference computes, so a
// config that turns one on is refused by name. Mixtral's router_jitter_noise
// and the aux-loss settings act in training only.
Status rejectUnimplementedMoe(const HfFields& f, const std::string& name) {
  struct Neutral {
    const char* key;
    std::string_view what;  // the value that leaves inference as kiln runs it
    bool (*ok)(const json&);
  };
  auto zero = [](const json& v) { return v.is_number() && v.get<double>() == 0; };
  auto one = [](const json& v) { return v.is_number() && v.get<double>() == 1; };
  auto upToOne = [](const json& v) { return v.is_number() && v.get<double>() <= 1; };
  auto softmax = [](const json& v) { return v.is_string() && v.get<std::string>() == "softmax"; };
  auto greedy = [](const json& v) { return v.is_string() && v.get<std::string>() == "greedy"; };
  const Neutral fields[] = {
      {"shared_expert_intermediate_size", "0 (no shared expert)", zero},
      {"n_shared_experts", "0 (no shared expert)", zero},
      {"num_shared_experts", "0 (no shared expert)", zero},
      {"moe_shared_expert_intermediate_size", "0 (no shared expert)", zero},
      {"routed_scaling_factor", "1", one},
      {"scoring_func", "'softmax'", softmax},
      {"topk_method", "'greedy'", greedy},
      {"n_group", "1 (ungrouped routing)", upToOne},
      {"topk_group", "1 (ungrouped routing)", upToOne},
      {"first_k_dense_replace", "0", zero},
      {"moe_layer_freq", "1", one},
  };
  for (const Neutral& n : fields) {
    const json* v = f.get(n.key);
    if (v == nullptr || n.ok(*v)) continue;
    std::string shown = v->dump();
    if (shown.size() > 40) shown = shown.substr(0, 37) + "...";
    return makeError("{}: field '{}' is {}, which kiln does not implement (it runs {} only)", name, n.key, shown,
                     n.what);
  }
  return Status::success();
}

// Mixtral: num_local_experts experts of intermediate_size, every layer, the
// top-k weights renormalized. Qwen3-MoE: num_experts of
// moe_intermediate_size, renormalized when norm_topk_prob; layer i is MoE
// unless listed in mlp_only_layers and when (i + 1) % decoder_sparse_step
// == 0 (Qwen3MoeDecoderLayer's rule), else a dense MLP of intermediate_size.
// Defaults are transformers' (MixtralConfig, Qwen3MoeConfig).
Status parseMoe(const HfFields& f, const std::string& name, ModelConfig& c) {
  if (c.architecture == "mixtral") {
    KILN_ASSIGN(c.num_experts, f.integer("num_local_experts", 8));
    KILN_ASSIGN(c.experts_per_token, f.integer("num_experts_per_tok", 2));
    c.moe_intermediate_size = c.intermediate_size;
    c.norm_topk_prob = true;
    return Status::success();
  }
  KILN_ASSIGN(c.num_experts, f.integer("num_experts", 128));
  KILN_ASSIGN(c.experts_per_token, f.integer("num_experts_per_tok", 8));
  KILN_ASSIGN(c.moe_intermediate_size, f.integer("moe_intermediate_size", 768));
  KILN_ASSIGN(c.norm_topk_prob, f.boolean("norm_topk_prob", false));
  int64_t step = 0;
  KILN_ASSIGN(step, f.integer("decoder_sparse_step", 1));
  if (step <= 0) return makeError("{}: field 'decoder_sparse_step' is {}, expected a positive period", name, step);
  c.moe_layers.assign(size_t(std::max<int64_t>(c.num_layers, 0)), false);
  for (int64_t i = 0; i < c.num_layers; ++i) c.moe_layers[size_t(i)] = (i + 1) % step == 0;
  if (const json* dense = f.get("mlp_only_layers")) {
    if (!dense->is_array()) return f.illTyped("mlp_only_layers", *dense, "an array of layer indices");
    for (size_t i = 0; i < dense->size(); ++i) {
      const json& l = (*dense)[i];
      if (!l.is_number_integer() || l.get<int64_t>() < 0 || l.get<int64_t>() >= c.num_layers)
        return makeError("{}: field 'mlp_only_layers[{}]' is {}, expected a layer index below {}", name, i,
                         l.dump(), c.num_layers);
      c.moe_layers[size_t(l.get<int64_t>())] = false;
    }
  }
  return Status::success();
}

// transformers' layer_types: which layers slide. Refuses other type names,
// and sliding layers when `window` is 0 (`no_window` says why it is).
// Returns whether the field is there.
Result<bool> parseLayerTypes(const HfFields& f, const std::string& name, int64_t window, std::string_view no_window,
                             ModelConfig& c) {
  const json* types = f.get("layer_types");
  if (types == nullptr) return false;
  if (!types->is_array()) return f.illTyped("layer_types", *types, "an array of layer type names");
  if (int64_t(types->size()) != c.num_layers)
    return makeError("{}: field 'layer_types' has {} entries, expected num_hidden_layers {}", name, types->size(),
                     c.num_layers);
  for (size_t i = 0; i < types->size(); ++i) {
    const json& t = (*types)[i];
    const std::string type = t.is_string() ? t.get<std::string>() : t.dump();
    if (type == "sliding_attention") {
      if (window == 0)
        return makeError("{}: field 'layer_types[{}]' is 'sliding_attention' but the config sets no window ({})",
                         name, i, no_window);
      c.sliding_layers[i] = true;
    } else if (type != "full_attention") {
      return makeError("{}: field 'layer_types[{}]' is '{}', supported: full_attention, sliding_attention", name, i,
                       printable(type));
    }
  }
  return true;
}

// The window applies only if some layer slides.
void settleSlidingWindow(int64_t window, ModelConfig& c) {
  c.sliding_window =
      std::find(c.sliding_layers.begin(), c.sliding_layers.end(), true) != c.sliding_layers.end() ? window : 0;
  if (c.sliding_window == 0) c.sliding_layers.clear();
}

// Gemma3TextConfig: every layer layer_types marks sliding_attention slides
// by sliding_window (default 4096); without layer_types, every layer but
// each sliding_window_pattern-th (default 6) does.
Status parseGemma3Layers(const HfFields& f, const std::string& name, ModelConfig& c) {
  int64_t window = 0;
  KILN_ASSIGN(window, f.integer("sliding_window", 4096));
  if (window <= 0)
    return makeError("{}: field 'sliding_window' is {}, expected a positive window", name, window);
  c.sliding_layers.assign(size_t(std::max<int64_t>(c.num_layers, 0)), false);
  bool listed = false;
  KILN_ASSIGN(listed, parseLayerTypes(f, name, window, "", c));
  if (!listed) {
    int64_t pattern = 0;
    KILN_ASSIGN(pattern, f.integer("sliding_window_pattern", 6));
    if (pattern <= 0)
      return makeError("{}: field 'sliding_window_pattern' is {}, expected a positive period", name, pattern);
    for (int64_t i = 0; i < c.num_layers; ++i) c.sliding_layers[size_t(i)] = (i + 1) % pattern != 0;
  }
  settleSlidingWindow(window, c);
  return Status::success();
}

// Gemma 3's own fields: GeGLU, sandwich norms with (1 + w), the embedding
// scale, query_pre_attn_scalar, q/k norm, and the sliding layers' RoPE theta
// (rope_local_base_freq; transformers >= 4.56 writes rope_parameters per
// layer type instead, read by parseRope).
Status parseGemma3(const HfFields& f, const std::string& name, ModelConfig& c) {
  for (const char* key : {"hidden_activation", "hidden_act"}) {
    std::optional<std::string> act;
    KILN_ASSIGN(act, f.string(key));
    if (act && *act != "gelu_pytorch_tanh")
      return makeError("{}: field '{}' is '{}', kiln runs Gemma 3's 'gelu_pytorch_tanh' only", name, key,
                       printable(*act));
  }
  bool bidirectional = false;
  KILN_ASSIGN(bidirectional, f.boolean("use_bidirectional_attention", false));
  if (bidirectional)
    return makeError("{}: field 'use_bidirectional_attention' is true, kiln runs causal decoders only", name);
  c.mlp_activation = MlpActivation::kGeluTanh;
  c.sandwich_norms = true;
  c.norm_weight_offset = 1.0;
  c.qk_norm = true;
  c.embedding_scale = std::sqrt(double(c.hidden_size));
  double query_pre_attn_scalar = 0;
  KILN_ASSIGN(query_pre_attn_scalar, f.number("query_pre_attn_scalar", 256));
  if (!(query_pre_attn_scalar > 0))
    return makeError("{}: field 'query_pre_attn_scalar' is {}, expected a positive number", name,
                     query_pre_attn_scalar);
  c.attention_scale = 1.0 / std::sqrt(query_pre_attn_scalar);
  KILN_ASSIGN(c.rope_local_theta, f.number("rope_local_base_freq", 10000.0));
  return Status::success();
}

// transformers' rule: mistral, mixtral and phi3 slide every layer by
// sliding_window (null: none); qwen2, qwen3 and qwen3_moe slide only with use_sliding_window, the
// layers layer_types marks "sliding_attention", or else those from
// max_window_layers on; llama never slides.
Status parseSlidingWindow(const HfFields& f, const std::string& name, ModelConfig& c) {
  if (c.architecture == "gemma3") return parseGemma3Layers(f, name, c);
  if (c.architecture == "mistral" || c.architecture == "phi3" || c.architecture == "mixtral") {
    KILN_ASSIGN(c.sliding_window, f.integer("sliding_window", 0));
    if (c.sliding_window < 0)
      return makeError("{}: field 'sliding_window' is {}, expected a positive window or null", name,
                       c.sliding_window);
    return Status::success();
  }
  if (c.architecture != "qwen2" && c.architecture != "qwen3" && c.architecture != "qwen3_moe")
    return Status::success();
  bool use_sw = false;
  KILN_ASSIGN(use_sw, f.boolean("use_sliding_window", false));
  int64_t window = 0;
  if (use_sw) KILN_ASSIGN(window, f.integer("sliding_window", 0));
  if (window < 0)
    return makeError("{}: field 'sliding_window' is {}, expected a positive window or null", name, window);
  c.sliding_layers.assign(size_t(std::max<int64_t>(c.num_layers, 0)), false);
  bool listed = false;
  KILN_ASSIGN(listed, parseLayerTypes(f, name, window, "use_sliding_window false or sliding_window null", c));
  if (!listed && window > 0) {
    int64_t max_window_layers = 0;
    KILN_ASSIGN(max_window_layers, f.integer("max_window_layers", 28));
    for (int64_t i = std::max<int64_t>(max_window_layers, 0); i < c.num_layers; ++i) c.sliding_layers[size_t(i)] = true;
  }
  settleSlidingWindow(window, c);
  return Status::success();
}

std::optional<ElementType> dtypeFromTorchName(std::string_view name) {
  if (name == "bfloat16") return ElementType::BF16;
  if (name == "float16") return ElementType::F16;
  if (name == "float32") return ElementType::F32;
  return std::nullopt;
}

Result<ModelConfig> parseHfObject(const json& root, const std::string& name);

// Gemma3ForConditionalGeneration (model_type gemma3): its language model is
// text_config, a Gemma3TextConfig (usually sparse: its defaults are
// gemma3_text's), with the outer config's dtype when it names none. Only
// the text model is imported; ModelSource finds its weights and leaves the
// vision tower and projector out.
Result<ModelConfig> parseGemma3ImageText(const json& root, const HfFields& f, const std::string& name) {
  const json* text = f.get("text_config");
  if (text == nullptr)
    return makeError("{}: model_type 'gemma3' (Gemma 3's image-text model) has no field 'text_config', expected "
                     "the language model's config there",
                     name);
  if (!text->is_object()) return f.illTyped("text_config", *text, "an object");
  json inner = *text;
  if (auto it = inner.find("model_type"); it != inner.end() && !it->is_null() && *it != "gemma3_text")
    return makeError("{}: field 'text_config.model_type' is {}, expected \"gemma3_text\"", name, it->dump());
  inner["model_type"] = "gemma3_text";
  for (const char* dtype : {"torch_dtype", "dtype"})
    if (!inner.contains(dtype) && root.contains(dtype)) inner[dtype] = root[dtype];
  ModelConfig c;
  KILN_ASSIGN(c, parseHfObject(inner, name + " text_config"));
  c.source = name;
  c.image_text_model = true;
  return c;
}

Result<ModelConfig> parseHfObject(const json& root, const std::string& name) {
  if (!root.is_object())
    return makeError("{}: top level is {}, expected an object", name, jsonTypeName(root));
  HfFields f(root, name);
  ModelConfig c;
  c.source = name;

  std::optional<std::string> model_type;
  KILN_ASSIGN(model_type, f.string("model_type"));
  if (model_type && *model_type == "gemma3") return parseGemma3ImageText(root, f, name);
  if (model_type && *model_type == "gemma3_text") model_type = "gemma3";
  if (model_type) {
    if (!isSupportedArch(*model_type))
      return makeError("{}: model_type '{}' is not supported; supported: {}", name,
                       printable(*model_type),
                       kSupported);
    c.architecture = *model_type;
  } else {
    const json* archs = f.get("architectures");
    if (archs == nullptr)
      return makeError("{}: missing field 'model_type' (expected a string: {})", name,
                       kSupported);
    if (!archs->is_array() || archs->empty() || !(*archs)[0].is_string())
      return f.illTyped("architectures", *archs, "an array of class names");
    std::string cls = (*archs)[0].get<std::string>();
    c.architecture = std::string(archFromClassName(cls));
    if (c.architecture.empty())
      return makeError("{}: architectures[0] '{}' is not supported; supported: "
                       "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Phi3ForCausalLM, "
                       "Gemma3ForCausalLM, MixtralForCausalLM, Qwen3MoeForCausalLM",
                       name, printable(cls));
  }

  std::optional<std::string> act;
  KILN_ASSIGN(act, f.string("hidden_act"));
  if (act && *act != "silu" && c.architecture != "gemma3")
    return makeError("{}: field 'hidden_act' is '{}', only 'silu' is supported", name,
                     printable(*act));

  // Defaults below are transformers' own for these architectures; Gemma3TextConfig
  // has one for every size (an image-text config's text_config often names only a few).
  const bool gemma3 = c.architecture == "gemma3";
  auto gemma3Default = [&](int64_t v) { return gemma3 ? std::optional<int64_t>(v) : std::nullopt; };
  KILN_ASSIGN(c.hidden_size, f.integer("hidden_size", gemma3Default(2304)));
  KILN_ASSIGN(c.intermediate_size, f.integer("intermediate_size", gemma3Default(9216)));
  KILN_ASSIGN(c.num_layers, f.integer("num_hidden_layers", gemma3Default(26)));
  KILN_ASSIGN(c.num_heads, f.integer("num_attention_heads", gemma3Default(8)));
  KILN_ASSIGN(c.vocab_size, f.integer("vocab_size", gemma3Default(262208)));
  KILN_ASSIGN(c.num_kv_heads, f.integer("num_key_value_heads", gemma3 ? 4 : c.num_heads));
  if (f.get("head_dim") == nullptr && !gemma3 && c.num_heads > 0 && c.hidden_size % c.num_heads != 0)
    return makeError("{}: hidden_size {} is not a multiple of num_heads {} and no head_dim gives the head size",
                     name, c.hidden_size, c.num_heads);
  int64_t default_head_dim = gemma3 ? 256 : c.num_heads > 0 ? c.hidden_size / c.num_heads : 0;
  KILN_ASSIGN(c.head_dim, f.integer("head_dim", default_head_dim));
  int64_t default_max_pos = c.architecture == "llama"     ? 2048
                            : c.architecture == "mistral" ? 4096 * 32
                            : c.architecture == "phi3"    ? 4096
                            : gemma3                      ? 131072
                                                          : 32768;
  KILN_ASSIGN(c.max_position_embeddings, f.integer("max_position_embeddings", default_max_pos));
  KILN_ASSIGN(c.rms_norm_eps, f.number("rms_norm_eps", 1e-6));
  KILN_ASSIGN(c.tie_word_embeddings, f.boolean("tie_word_embeddings", gemma3));
  // Qwen2's q/k/v projections always have biases and its o_proj none;
  // llama's and qwen3's attention_bias puts one on all four; mistral's
  // projections have none whatever the config says (as in transformers).
  if (c.architecture == "qwen2") {
    c.attention_bias = true;
  } else if (c.architecture != "mistral" && c.architecture != "phi3" && c.architecture != "mixtral") {
    KILN_ASSIGN(c.attention_bias, f.boolean("attention_bias", false));
    c.output_bias = c.attention_bias;
  }
  c.qk_norm = c.architecture == "qwen3" || c.architecture == "qwen3_moe";
  c.fused_qkv = c.fused_gate_up = c.architecture == "phi3";
  KILN_RETURN_IF_ERROR(rejectUnimplementedMoe(f, name));
  if (c.architecture == "mixtral" || c.architecture == "qwen3_moe") KILN_RETURN_IF_ERROR(parseMoe(f, name, c));
  bool mlp_bias = false;
  KILN_ASSIGN(mlp_bias, f.boolean("mlp_bias", false));
  if (mlp_bias)
    return makeError("{}: field 'mlp_bias' is true, which is not supported", name);
  KILN_RETURN_IF_ERROR(rejectUnimplemented(f, name));
  if (gemma3) KILN_RETURN_IF_ERROR(parseGemma3(f, name, c));
  KILN_RETURN_IF_ERROR(parseSlidingWindow(f, name, c));

  // transformers >= 4.56 moved rope_theta and rope_scaling into rope_parameters.
  const json* rope_params = f.get("rope_parameters");
  if (rope_params != nullptr) {
    if (!rope_params->is_object())
      return f.illTyped("rope_parameters", *rope_params, "an object");
    HfFields rp(*rope_params, name, "rope_parameters.");
    if (gemma3 && rp.get("full_attention") != nullptr) {
      // Per layer type: the global layers' theta and scaling, the local layers' theta.
      const json& full = *rp.get("full_attention");
      if (!full.is_object()) return rp.illTyped("full_attention", full, "an object");
      KILN_ASSIGN(c.rope_theta, HfFields(full, name, "rope_parameters.full_attention.").number("rope_theta", 1e6));
      KILN_RETURN_IF_ERROR(parseRopeScaling(full, name, "rope_parameters.full_attention", c));
      if (const json* local = rp.get("sliding_attention")) {
        if (!local->is_object()) return rp.illTyped("sliding_attention", *local, "an object");
        ModelConfig scaled;
        KILN_RETURN_IF_ERROR(parseRopeScaling(*local, name, "rope_parameters.sliding_attention", scaled));
        if (scaled.rope_scaling.kind != RopeScaling::Kind::kNone)
          return makeError("{}: field 'rope_parameters.sliding_attention' scales RoPE, kiln scales only Gemma 3's "
                           "global layers",
                           name);
        KILN_ASSIGN(c.rope_local_theta,
                    HfFields(*local, name, "rope_parameters.sliding_attention.").number("rope_theta", 10000.0));
      }
    } else {
      KILN_ASSIGN(c.rope_theta, rp.number("rope_theta", 10000.0));
      KILN_RETURN_IF_ERROR(parseRopeScaling(*rope_params, name, "rope_parameters", c));
    }
  } else {
    KILN_ASSIGN(c.rope_theta, f.number("rope_theta", gemma3 ? 1e6 : 10000.0));
    if (const json* rs = f.get("rope_scaling"))
      KILN_RETURN_IF_ERROR(parseRopeScaling(*rs, name, "rope_scaling", c));
  }
  c.rope_style = RopeStyle::kHalf;

  std::optional<std::string> dtype;
  KILN_ASSIGN(dtype, f.string("torch_dtype"));
  if (!dtype) KILN_ASSIGN(dtype, f.string("dtype"));  // newer transformers
  c.weight_dtype = ElementType::BF16;
  if (dtype) {
    auto t = dtypeFromTorchName(*dtype);
    if (!t)
      return makeError("{}: field 'torch_dtype' is '{}', expected bfloat16, float16 or float32",
                       name, printable(*dtype));
    c.weight_dtype = *t;
  }

  KILN_RETURN_IF_ERROR(c.validate());
  return c;
}

}  // namespace

std::string_view ropeStyleName(RopeStyle style) {
  return style == RopeStyle::kHalf ? "half" : "interleaved";
}

std::string_view mlpActivationName(MlpActivation activation) {
  return activation == MlpActivation::kGeluTanh ? "gelu_tanh" : "silu";
}

std::string_view ropeScalingKindName(RopeScaling::Kind kind) {
  switch (kind) {
    case RopeScaling::Kind::kNone: return "none";
    case RopeScaling::Kind::kLinear: return "linear";
    case RopeScaling::Kind::kLlama3: return "llama3";
  }
  return "none";
}

Status ModelConfig::validate() const {
  const std::string& s = source.empty() ? std::string("model config") : source;
  if (!isSupportedArch(architecture))
    return makeError("{}: architecture '{}' is not supported; supported: {}", s,
                     printable(architecture),
                     kSupported);
  struct Named {
    std::string_view name;
    int64_t value;
  };
  for (Named n : {Named{"hidden_size", hidden_size}, Named{"intermediate_size", intermediate_size},
                  Named{"num_layers", num_layers}, Named{"num_heads", num_heads},
                  Named{"num_kv_heads", num_kv_heads}, Named{"head_dim", head_dim},
                  Named{"vocab_size", vocab_size},
                  Named{"max_position_embeddings", max_position_embeddings}}) {
    if (n.value <= 0) return makeError("{}: {} is {}, expected a positive value", s, n.name, n.value);
    // Real models are far below 2^31 in every size; the cap keeps products
    // of two sizes (weight shapes, byte counts) inside int64.
    if (n.value > kMaxSize)
      return makeError("{}: {} is {}, expected at most {}", s, n.name, n.value, kMaxSize);
  }
  if (num_heads % num_kv_heads != 0)
    return makeError("{}: num_heads {} is not a multiple of num_kv_heads {}", s, num_heads,
                     num_kv_heads);
  if (head_dim % 2 != 0)
    return makeError("{}: head_dim {} is odd, expected an even size for rotary pairs", s,
                     head_dim);
  if (!(rms_norm_eps > 0) || !std::isfinite(rms_norm_eps))
    return makeError("{}: rms_norm_eps is {}, expected a positive number", s, rms_norm_eps);
  if (!(rope_theta > 0) || !std::isfinite(rope_theta))
    return makeError("{}: rope_theta is {}, expected a positive number", s, rope_theta);
  if (rope_local_theta < 0 || !std::isfinite(rope_local_theta))
    return makeError("{}: rope_local_theta is {}, expected 0 (none) or a positive number", s, rope_local_theta);
  if (!(embedding_scale > 0) || !(attention_scale >= 0))
    return makeError("{}: embedding_scale {} / attention_scale {}, expected positive numbers", s, embedding_scale,
                     attention_scale);
  if (sliding_window < 0)
    return makeError("{}: sliding_window is {}, expected 0 (none) or a positive window", s,
                     sliding_window);
  if (!sliding_layers.empty() && int64_t(sliding_layers.size()) != num_layers)
    return makeError("{}: sliding_layers has {} entries, expected one per layer ({})", s, sliding_layers.size(),
                     num_layers);
  if (num_experts < 0 || num_experts > 4096)
    return makeError("{}: num_experts is {}, expected 0 (dense) up to 4096", s, num_experts);
  if (num_experts > 0) {
    if (experts_per_token < 1 || experts_per_token > num_experts)
      return makeError("{}: experts_per_token (num_experts_per_tok) is {}, expected 1..{}", s, experts_per_token,
                       num_experts);
    if (moe_intermediate_size <= 0 || moe_intermediate_size > kMaxSize)
      return makeError("{}: moe_intermediate_size is {}, expected a positive value", s, moe_intermediate_size);
    if (!moe_layers.empty() && int64_t(moe_layers.size()) != num_layers)
      return makeError("{}: moe_layers has {} entries, expected one per layer ({})", s, moe_layers.size(),
                       num_layers);
  }
  const RopeScaling& r = rope_scaling;
  if (r.kind != RopeScaling::Kind::kNone && !(r.factor > 0))
    return makeError("{}: rope_scaling factor is {}, expected a positive number", s, r.factor);
  if (r.kind == RopeScaling::Kind::kLlama3) {
    if (!(r.low_freq_factor > 0) || !(r.high_freq_factor > r.low_freq_factor))
      return makeError("{}: rope_scaling low/high_freq_factor {}/{}, expected 0 < low < high", s,
                       r.low_freq_factor, r.high_freq_factor);
    if (r.original_max_position_embeddings <= 0)
      return makeError("{}: rope_scaling original_max_position_embeddings is {}, expected a "
                       "positive value",
                       s, r.original_max_position_embeddings);
  }
  return Status::success();
}

int64_t ModelConfig::windowOf(int64_t layer) const {
  if (sliding_window <= 0) return 0;
  if (sliding_layers.empty()) return sliding_window;
  return layer >= 0 && layer < int64_t(sliding_layers.size()) && sliding_layers[size_t(layer)] ? sliding_window
                                                                                             : 0;
}

double ModelConfig::ropeThetaOf(int64_t layer) const {
  return rope_local_theta > 0 && windowOf(layer) > 0 ? rope_local_theta : rope_theta;
}

bool ModelConfig::ropeScaledAt(int64_t layer) const {
  return !(rope_local_theta > 0 && windowOf(layer) > 0);
}

bool ModelConfig::isMoeLayer(int64_t layer) const {
  if (num_experts <= 0 || layer < 0 || layer >= num_layers) return false;
  return moe_layers.empty() || moe_layers[size_t(layer)];
}

double ModelConfig::attentionScale() const {
  return attention_scale > 0 ? attention_scale : 1.0 / std::sqrt(double(head_dim));
}

Result<ModelConfig> parseHfConfigText(std::string_view text, const std::string& name) {
  try {
    json root = json::parse(text.begin(), text.end());
    return parseHfObject(root, name);
  } catch (const json::exception& e) {
    return makeError("{}: not valid JSON: {}", name, e.what());
  }
}

Result<ModelConfig> parseHfConfig(const std::string& path) {
  auto mapping = MappedFile::open(path);
  if (!mapping) return mapping.error();
  auto bytes = mapping->bytes();
  return parseHfConfigText(
      std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), path);
}

}  // namespace kiln::formats
