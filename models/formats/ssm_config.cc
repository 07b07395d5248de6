#include "models/formats/ssm_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>

#include "models/formats/error_text.h"
#include "models/formats/mapped_file.h"

namespace kiln::formats {
namespace {

using json = nlohmann::json;

constexpr int64_t kMaxSize = (int64_t{1} << 31) - 1;

std::string shown(const json& v) {
  std::string s = v.dump();
  return s.size() > 40 ? s.substr(0, 37) + "..." : s;
}

// Typed access to one config object; errors name the file and the field. A
// JSON null counts as absent.
class Fields {
 public:
  Fields(const json& obj, const std::string& name) : obj_(obj), name_(name) {}

  const json* get(std::string_view key) const {
    auto it = obj_.find(key);
    return it == obj_.end() || it->is_null() ? nullptr : &*it;
  }
  Result<int64_t> integer(std::string_view key, std::optional<int64_t> fallback) const {
    const json* v = get(key);
    if (v == nullptr) {
      if (fallback) return *fallback;
      return makeError("{}: missing field '{}' (expected an integer)", name_, key);
    }
    if (!v->is_number_integer()) return makeError("{}: field '{}' is {}, expected an integer", name_, key, shown(*v));
    return v->get<int64_t>();
  }
  Result<double> number(std::string_view key, double fallback) const {
    const json* v = get(key);
    if (v == nullptr) return fallback;
    if (!v->is_number()) return makeError("{}: field '{}' is {}, expected a number", name_, key, shown(*v));
    return v->get<double>();
  }
  Result<bool> boolean(std::string_view key, bool fallback) const {
    const json* v = get(key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) return makeError("{}: field '{}' is {}, expected a boolean", name_, key, shown(*v));
    return v->get<bool>();
  }
  Result<std::optional<std::string>> string(std::string_view key) const {
    const json* v = get(key);
    if (v == nullptr) return std::optional<std::string>();
    if (!v->is_string()) return makeError("{}: field '{}' is {}, expected a string", name_, key, shown(*v));
    return std::optional<std::string>(v->get<std::string>());
  }

 private:
  const json& obj_;
  const std::string& name_;
};

#define KILN_SSM_ASSIGN(lhs, expr)                 \
  do {                                             \
    auto kiln_r_ = (expr);                         \
    if (!kiln_r_.ok()) return kiln_r_.error();     \
    lhs = kiln_r_.take();                          \
  } while (0)

// Python's json writes float("inf") as a bare Infinity (Mamba2Config's
// time_step_limit); JSON has no such token, so it becomes the string "inf".
json parseConfig(std::string_view text) {
  std::string fixed;
  fixed.reserve(text.size());
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char ch = text[i];
    if (in_string) {
      fixed += ch;
      if (ch == '\\' && i + 1 < text.size()) fixed += text[++i];
      else if (ch == '"') in_string = false;
      continue;
    }
    if (ch == '"') in_string = true;
    if (text.substr(i, 8) == "Infinity") {
      fixed += "\"inf\"";
      i += 7;
      continue;
    }
    fixed += ch;
  }
  return json::parse(fixed, nullptr, /*allow_exceptions=*/false);
}

std::optional<std::string> ssmArch(const json& root) {
  auto type = root.find("model_type");
  if (type != root.end() && type->is_string()) {
    std::string t = type->get<std::string>();
    if (t == "mamba" || t == "mamba2" || t == "nemotron_h") return t;
    return std::nullopt;
  }
  auto archs = root.find("architectures");
  if (archs != root.end() && archs->is_array() && !archs->empty() && (*archs)[0].is_string()) {
    std::string cls = (*archs)[0].get<std::string>();
    if (cls == "MambaForCausalLM") return std::string("mamba");
    if (cls == "Mamba2ForCausalLM") return std::string("mamba2");
    if (cls == "NemotronHForCausalLM") return std::string("nemotron_h");
  }
  return std::nullopt;
}

// Fields whose non-default values ask for computation kiln does not run.
Status rejectUnimplemented(const Fields& f, const std::string& name, const SsmConfig& c) {
  std::optional<std::string> act;
  KILN_SSM_ASSIGN(act, f.string("hidden_act"));
  if (act && *act != "silu" && *act != "swish")
    return makeError("{}: field 'hidden_act' is '{}', kiln runs the SSM conv and gate with 'silu' only", name,
                     printable(*act));
  bool mambapy = false;
  KILN_SSM_ASSIGN(mambapy, f.boolean("use_mambapy", false));
  if (mambapy)
    return makeError("{}: field 'use_mambapy' is true, a training-time fallback scan kiln does not run", name);
  bool assoc = false;
  KILN_SSM_ASSIGN(assoc, f.boolean("use_associative_scan", false));
  if (assoc)
    return makeError("{}: field 'use_associative_scan' is true, kiln runs its own chunked scan only", name);
  if (c.kind == SsmKind::kMamba2) {
    bool rms = true;
    KILN_SSM_ASSIGN(rms, f.boolean("rms_norm", true));
    if (!rms) return makeError("{}: field 'rms_norm' is false, kiln runs Mamba-2's gated RMSNorm only", name);
    if (const json* lt = f.get("layer_types")) {
      if (!lt->is_array()) return makeError("{}: field 'layer_types' is {}, expected an array", name, shown(*lt));
      for (size_t i = 0; i < lt->size(); ++i) {
        const json& t = (*lt)[i];
        if (!t.is_string() || t.get<std::string>() != "mamba")
          return makeError("{}: field 'layer_types[{}]' is {}, kiln's Mamba-2 runs 'mamba' layers only", name, i,
                           shown(t));
      }
    }
  }
  return Status::success();
}

// Nemotron-H (NemotronHConfig): Mamba-2 mixers under mamba_* names, the
// gated norm per group of I / G, attention layers without positions, relu²
// MLP layers; hybrid_override_pattern (or layers_block_type) lists them.
// MoE layers ('E') and the MTP head are refused.
Status parseNemotronH(const Fields& f, const std::string& name, SsmConfig& c) {
  auto string_is = [&](const char* key, std::initializer_list<const char*> allowed) -> Status {
    std::optional<std::string> v;
    KILN_SSM_ASSIGN(v, f.string(key));
    if (!v) return Status::success();
    for (const char* a : allowed)
      if (*v == a) return Status::success();
    return makeError("{}: field '{}' is '{}', kiln runs '{}' only", name, key, printable(*v), *allowed.begin());
  };
  KILN_RETURN_IF_ERROR(string_is("mlp_hidden_act", {"relu2"}));
  KILN_RETURN_IF_ERROR(string_is("mamba_hidden_act", {"silu", "swish"}));
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    bool on = false;
    KILN_SSM_ASSIGN(on, f.boolean(key, false));
    if (on) return makeError("{}: field '{}' is true, which kiln does not implement for nemotron_h", name, key);
  }
  if (const json* mtp = f.get("num_nextn_predict_layers"); mtp && !(mtp->is_number_integer() && mtp->get<int64_t>() == 0))
    return makeError("{}: field 'num_nextn_predict_layers' is {}, kiln runs no MTP head", name, shown(*mtp));
  KILN_SSM_ASSIGN(c.num_heads, f.integer("mamba_num_heads", 128));
  KILN_SSM_ASSIGN(c.head_dim, f.integer("mamba_head_dim", 64));
  c.intermediate_size = c.num_heads * c.head_dim;
  KILN_SSM_ASSIGN(c.n_groups, f.integer("n_groups", 8));
  KILN_SSM_ASSIGN(c.state_size, f.integer("ssm_state_size", 128));
  KILN_SSM_ASSIGN(c.chunk_size, f.integer("chunk_size", 128));
  KILN_SSM_ASSIGN(c.attn_heads, f.integer("num_attention_heads", 32));
  KILN_SSM_ASSIGN(c.attn_kv_heads, f.integer("num_key_value_heads", 8));
  KILN_SSM_ASSIGN(c.attn_head_dim, f.integer("head_dim", c.attn_heads > 0 ? c.hidden_size / c.attn_heads : 0));
  KILN_SSM_ASSIGN(c.mlp_intermediate_size, f.integer("intermediate_size", 21504));
  if (c.n_groups <= 0 || c.intermediate_size % c.n_groups != 0)
    return makeError("{}: field 'n_groups' is {}, expected a divisor of mamba_num_heads × mamba_head_dim {}", name,
                     c.n_groups, c.intermediate_size);
  c.norm_group_size = c.intermediate_size / c.n_groups;
  if (c.attn_heads <= 0 || c.attn_kv_heads <= 0 || c.attn_heads % c.attn_kv_heads != 0 || c.attn_head_dim <= 0)
    return makeError("{}: num_attention_heads {} / num_key_value_heads {} / head_dim {}, expected positive sizes, "
                     "kv heads dividing heads", name, c.attn_heads, c.attn_kv_heads, c.attn_head_dim);
  std::vector<std::string> kinds;
  if (const json* list = f.get("layers_block_type")) {
    if (!list->is_array()) return makeError("{}: field 'layers_block_type' is {}, expected an array", name, shown(*list));
    for (const json& k : *list) kinds.push_back(k.is_string() ? k.get<std::string>() : k.dump());
  } else {
    std::optional<std::string> pattern;
    KILN_SSM_ASSIGN(pattern, f.string("hybrid_override_pattern"));
    if (!pattern) return makeError("{}: missing field 'hybrid_override_pattern' (expected a string such as \"M*M-\")", name);
    for (char ch : *pattern)
      kinds.push_back(ch == 'M' ? "mamba" : ch == '*' ? "attention" : ch == '-' ? "mlp" : ch == 'E' ? "moe" : std::string(1, ch));
  }
  if (int64_t(kinds.size()) != c.num_layers)
    return makeError("{}: the layer pattern lists {} layers, expected num_hidden_layers {}", name, kinds.size(),
                     c.num_layers);
  c.layer_kinds.clear();
  for (size_t i = 0; i < kinds.size(); ++i) {
    if (kinds[i] == "mamba") c.layer_kinds.push_back(SsmLayerKind::kMamba);
    else if (kinds[i] == "attention") c.layer_kinds.push_back(SsmLayerKind::kAttention);
    else if (kinds[i] == "mlp") c.layer_kinds.push_back(SsmLayerKind::kMlp);
    else
      return makeError("{}: layer {} is '{}' in the layer pattern, kiln runs mamba (M), attention (*) and mlp (-) "
                       "layers", name, i, printable(kinds[i]));
  }
  return Status::success();
}

}  // namespace

std::string_view ssmKindName(SsmKind kind) { return kind == SsmKind::kMamba ? "mamba" : "mamba2"; }

std::string_view ssmLayerKindName(SsmLayerKind kind) {
  return kind == SsmLayerKind::kMamba ? "mamba" : kind == SsmLayerKind::kAttention ? "attention" : "mlp";
}

int64_t SsmConfig::convChannels() const {
  return kind == SsmKind::kMamba ? intermediate_size : intermediate_size + 2 * n_groups * state_size;
}

int64_t SsmConfig::inProjFeatures() const {
  return kind == SsmKind::kMamba ? 2 * intermediate_size : intermediate_size + convChannels() + num_heads;
}

int64_t SsmConfig::ssmStateElements() const {
  return kind == SsmKind::kMamba ? intermediate_size * state_size : num_heads * head_dim * state_size;
}

Status SsmConfig::validate() const {
  const std::string& s = source.empty() ? std::string("model config") : source;
  struct Named {
    std::string_view name;
    int64_t value;
  };
  for (Named n : {Named{"hidden_size", hidden_size}, Named{"intermediate_size", intermediate_size},
                  Named{"num_hidden_layers", num_layers}, Named{"vocab_size", vocab_size},
                  Named{"state_size", state_size}, Named{"conv_kernel", conv_kernel}}) {
    if (n.value <= 0 || n.value > kMaxSize)
      return makeError("{}: {} is {}, expected a positive value below 2^31", s, n.name, n.value);
  }
  // The conv state keeps the last K - 1 inputs; kernels hold one channel's K taps in registers.
  if (conv_kernel < 2 || conv_kernel > 8)
    return makeError("{}: field 'conv_kernel' is {}, kiln runs causal conv widths 2 to 8", s, conv_kernel);
  if (kind == SsmKind::kMamba) {
    if (time_step_rank <= 0 || time_step_rank > kMaxSize)
      return makeError("{}: time_step_rank is {}, expected a positive value", s, time_step_rank);
  } else {
    if (num_heads <= 0 || head_dim <= 0 || n_groups <= 0)
      return makeError("{}: num_heads {} / head_dim {} / n_groups {}, expected positive values", s, num_heads,
                       head_dim, n_groups);
    if (num_heads * head_dim != intermediate_size)
      return makeError("{}: num_heads {} × head_dim {} is {}, expected expand × hidden_size = {}", s, num_heads,
                       head_dim, num_heads * head_dim, intermediate_size);
    if (num_heads % n_groups != 0)
      return makeError("{}: field 'n_groups' is {}, expected a divisor of num_heads {}", s, n_groups, num_heads);
    if (chunk_size <= 0) return makeError("{}: field 'chunk_size' is {}, expected a positive length", s, chunk_size);
    if (!(time_step_min_limit >= 0) || !(time_step_max_limit > time_step_min_limit))
      return makeError("{}: field 'time_step_limit' is [{}, {}], expected 0 <= min < max", s, time_step_min_limit,
                       time_step_max_limit);
  }
  if (!(layer_norm_epsilon > 0) || !std::isfinite(layer_norm_epsilon))
    return makeError("{}: layer_norm_epsilon is {}, expected a positive number", s, layer_norm_epsilon);
  return Status::success();
}

bool isSsmConfigText(std::string_view json_text) {
  json root = parseConfig(json_text);
  return root.is_object() && ssmArch(root).has_value();
}

Result<SsmConfig> parseSsmConfigText(std::string_view json_text, const std::string& name) {
  json root = parseConfig(json_text);
  if (root.is_discarded()) return makeError("{}: not valid JSON", name);
  if (!root.is_object()) return makeError("{}: top level is not an object", name);
  std::optional<std::string> arch = ssmArch(root);
  if (!arch) return makeError("{}: not a state-space model (model_type mamba or mamba2)", name);
  Fields f(root, name);
  SsmConfig c;
  c.source = name;
  c.architecture = *arch;
  c.kind = *arch == "mamba" ? SsmKind::kMamba : SsmKind::kMamba2;  // nemotron_h's mixers are Mamba-2's
  const bool m2 = c.kind == SsmKind::kMamba2;
  // Defaults are transformers' MambaConfig / Mamba2Config.
  KILN_SSM_ASSIGN(c.hidden_size, f.integer("hidden_size", m2 ? 4096 : 768));
  KILN_SSM_ASSIGN(c.num_layers, f.integer("num_hidden_layers", m2 ? 64 : 32));
  KILN_SSM_ASSIGN(c.vocab_size, f.integer("vocab_size", m2 ? 32768 : 50280));
  KILN_SSM_ASSIGN(c.state_size, f.integer("state_size", m2 ? 128 : 16));
  KILN_SSM_ASSIGN(c.conv_kernel, f.integer("conv_kernel", 4));
  KILN_SSM_ASSIGN(c.layer_norm_epsilon, f.number("layer_norm_epsilon", 1e-5));
  KILN_SSM_ASSIGN(c.use_bias, f.boolean("use_bias", false));
  KILN_SSM_ASSIGN(c.use_conv_bias, f.boolean("use_conv_bias", true));
  KILN_SSM_ASSIGN(c.tie_word_embeddings, f.boolean("tie_word_embeddings", !m2));
  double expand = 2;
  KILN_SSM_ASSIGN(expand, f.number("expand", 2));
  // transformers: int(expand * hidden_size)
  c.intermediate_size = int64_t(expand * double(c.hidden_size));
  const json* inter = c.architecture == "nemotron_h" ? nullptr : f.get("intermediate_size");  // nemotron_h's is the MLP's
  if (inter != nullptr) {
    if (!inter->is_number_integer() || inter->get<int64_t>() != c.intermediate_size)
      return makeError("{}: field 'intermediate_size' is {}, expected expand × hidden_size = {}", name, shown(*inter),
                       c.intermediate_size);
  }
  if (m2) {
    KILN_SSM_ASSIGN(c.num_heads, f.integer("num_heads", 128));
    KILN_SSM_ASSIGN(c.head_dim, f.integer("head_dim", 64));
    KILN_SSM_ASSIGN(c.n_groups, f.integer("n_groups", 8));
    KILN_SSM_ASSIGN(c.chunk_size, f.integer("chunk_size", 256));
    if (const json* limit = f.get("time_step_limit")) {
      // [min, max]; JSON has no infinity, so transformers writes it as a huge number or a string
      auto bound = [](const json& v, double& out) {
        if (v.is_number()) {
          out = v.get<double>();
          return true;
        }
        if (v.is_string() && (v.get<std::string>() == "inf" || v.get<std::string>() == "Infinity")) {
          out = std::numeric_limits<double>::infinity();
          return true;
        }
        return false;
      };
      if (!limit->is_array() || limit->size() != 2 || !bound((*limit)[0], c.time_step_min_limit) ||
          !bound((*limit)[1], c.time_step_max_limit))
        return makeError("{}: field 'time_step_limit' is {}, expected [min, max]", name, shown(*limit));
    }
  } else {
    const json* rank = f.get("time_step_rank");
    if (rank == nullptr || (rank->is_string() && rank->get<std::string>() == "auto")) {
      c.time_step_rank = (c.hidden_size + 15) / 16;  // math.ceil(hidden_size / 16)
    } else if (rank->is_number_integer()) {
      c.time_step_rank = rank->get<int64_t>();
    } else {
      return makeError("{}: field 'time_step_rank' is {}, expected an integer or \"auto\"", name, shown(*rank));
    }
  }
  c.layer_kinds.assign(size_t(std::max<int64_t>(c.num_layers, 0)), SsmLayerKind::kMamba);
  c.norm_group_size = c.intermediate_size;
  if (c.architecture == "nemotron_h") KILN_RETURN_IF_ERROR(parseNemotronH(f, name, c));
  else KILN_RETURN_IF_ERROR(rejectUnimplemented(f, name, c));
  std::optional<std::string> dtype;
  KILN_SSM_ASSIGN(dtype, f.string("torch_dtype"));
  if (!dtype) KILN_SSM_ASSIGN(dtype, f.string("dtype"));
  c.weight_dtype = ElementType::BF16;
  if (dtype) {
    if (*dtype == "float32") c.weight_dtype = ElementType::F32;
    else if (*dtype == "float16") c.weight_dtype = ElementType::F16;
    else if (*dtype != "bfloat16")
      return makeError("{}: field 'torch_dtype' is '{}', expected bfloat16, float16 or float32", name,
                       printable(*dtype));
  }
  KILN_RETURN_IF_ERROR(c.validate());
  return c;
}

Result<SsmConfig> parseSsmConfig(const std::string& path) {
  auto mapping = MappedFile::open(path);
  if (!mapping) return mapping.error();
  auto bytes = mapping->bytes();
  return parseSsmConfigText(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), path);
}

}  // namespace kiln::formats
