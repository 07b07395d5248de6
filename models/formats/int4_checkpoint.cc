#include "models/formats/int4_checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

#include "models/formats/int4_linear.h"

namespace kiln::formats {
namespace {

using json = nlohmann::json;
using Method = Int4QuantConfig::Method;

constexpr std::string_view kPackedSuffixes[] = {".qweight", ".qzeros", ".scales", ".g_idx"};

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool endsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// The block width a packed layer must have in whole multiples to become
// q4_0/q4_1 rows (ggml's 32-element blocks).
constexpr int64_t kBlockColumns = 32;

}  // namespace

std::string_view int4MethodName(Method method) {
  return method == Method::kGptq ? "gptq" : "awq";
}

Result<std::optional<Int4QuantConfig>> parseInt4QuantConfig(std::string_view config_json,
                                                            const std::string& name) {
  json root = json::parse(config_json, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object() || !root.contains("quantization_config"))
    return std::optional<Int4QuantConfig>();
  const json& q = root["quantization_config"];
  const std::string where = name + ": quantization_config";
  if (!q.is_object()) return makeError("{}: expected an object, got {}", where, q.type_name());

  auto text = [&](std::initializer_list<const char*> keys,
                  const char* fallback) -> Result<std::string> {
    for (const char* key : keys) {
      if (!q.contains(key) || q[key].is_null()) continue;
      if (!q[key].is_string())
        return makeError("{}.{}: expected a string, got {}", where, key, q[key].type_name());
      return lower(q[key].get<std::string>());
    }
    return std::string(fallback);
  };
  auto integer = [&](std::initializer_list<const char*> keys) -> Result<std::optional<int64_t>> {
    for (const char* key : keys) {
      if (!q.contains(key) || q[key].is_null()) continue;
      if (!q[key].is_number_integer())
        return makeError("{}.{}: expected an integer, got {}", where, key, q[key].type_name());
      return std::optional<int64_t>(q[key].get<int64_t>());
    }
    return std::optional<int64_t>();
  };
  auto flag = [&](const char* key, bool fallback) -> Result<bool> {
    if (!q.contains(key) || q[key].is_null()) return fallback;
    if (!q[key].is_boolean())
      return makeError("{}.{}: expected true or false, got {}", where, key, q[key].type_name());
    return q[key].get<bool>();
  };

  auto method = text({"quant_method"}, "");
  if (!method.ok()) return method.error();
  // compressed-tensors without quantization groups carries only a
  // sparsity_config (sparsity_config.h reads it); quantized weights in its
  // layouts are not read.
  if (*method == "compressed-tensors") {
    if (q.contains("config_groups") && q["config_groups"].is_object() && !q["config_groups"].empty())
      return makeError("{}.config_groups: compressed-tensors quantized weights are not supported "
                       "(kiln reads gptq and awq, and compressed-tensors' sparsity_config over "
                       "unquantized weights)",
                       where);
    return std::optional<Int4QuantConfig>();
  }
  Int4QuantConfig config;
  if (*method == "gptq") {
    config.method = Method::kGptq;
  } else if (*method == "awq") {
    config.method = Method::kAwq;
  } else {
    return makeError("{}.quant_method: '{}' is not supported (kiln reads gptq and awq)", where,
                     *method);
  }
  // AutoAWQ's own quant_config.json spells these w_bit and q_group_size.
  auto bits = integer({"bits", "w_bit"});
  if (!bits.ok()) return bits.error();
  if (!*bits || **bits != 4)
    return makeError("{}.bits: {} is not supported (kiln reads 4-bit {} checkpoints)", where,
                     *bits ? fmt::to_string(**bits) : "absent", *method);
  auto group = integer({"group_size", "q_group_size"});
  if (!group.ok()) return group.error();
  if (!*group || (**group != -1 && **group <= 0))
    return makeError("{}.group_size: {}, expected -1 (per channel) or a positive column count",
                     where, *group ? fmt::to_string(**group) : "absent");
  config.group_size = **group;

  if (config.method == Method::kGptq) {
    auto desc_act = flag("desc_act", false);
    if (!desc_act.ok()) return desc_act.error();
    config.desc_act = *desc_act;
    auto sym = flag("sym", true);
    if (!sym.ok()) return sym.error();
    config.sym = *sym;
    // transformers writes checkpoint_format, GPTQModel format.
    auto format = text({"checkpoint_format", "format"}, "gptq");
    if (!format.ok()) return format.error();
    if (*format != "gptq" && *format != "gptq_v2")
      return makeError("{}.checkpoint_format: '{}' is not supported (kiln reads gptq and "
                       "gptq_v2)",
                       where, *format);
    config.zeros_minus_one = *format == "gptq";
  } else {
    auto version = text({"version"}, "gemm");
    if (!version.ok()) return version.error();
    if (*version != "gemm")
      return makeError("{}.version: '{}' is not supported (kiln reads AWQ's gemm packing)",
                       where, *version);
    auto zero_point = flag("zero_point", true);
    if (!zero_point.ok()) return zero_point.error();
    if (!*zero_point)
      return makeError("{}.zero_point: false is not supported (kiln reads AWQ with zero "
                       "points)",
                       where);
    config.sym = false;
    config.zeros_minus_one = false;
  }
  return std::optional<Int4QuantConfig>(config);
}

Result<Int4Checkpoint> Int4Checkpoint::open(const SafetensorsCheckpoint& checkpoint,
                                            const Int4QuantConfig& config) {
  Int4Checkpoint ckpt;
  ckpt.checkpoint_ = &checkpoint;
  ckpt.config_ = config;
  const std::string& dir = checkpoint.directory();
  const bool gptq = config.method == Method::kGptq;
  const std::string_view method = int4MethodName(config.method);

  // Every prefix that has any packed part is a packed layer.
  std::map<std::string, PackedLayer> layers;
  for (const TensorInfo& t : checkpoint.tensors())
    for (std::string_view suffix : kPackedSuffixes)
      if (endsWith(t.name, suffix))
        layers[t.name.substr(0, t.name.size() - suffix.size())].prefix =
            t.name.substr(0, t.name.size() - suffix.size());

  for (auto& [prefix, layer] : layers) {
    auto part = [&](std::string_view suffix, ElementType type,
                    bool required) -> Result<const TensorInfo*> {
      const std::string name = prefix + std::string(suffix);
      const TensorInfo* t = checkpoint.findTensor(name);
      if (!t) {
        if (!required) return t;
        return makeError("{}: tensor '{}' is missing; a {} layer needs {}.qweight, .qzeros, "
                         ".scales{}",
                         dir, name, method, prefix, gptq ? " and .g_idx" : "");
      }
      if (t->type != type || t->shape.size() != (suffix == ".g_idx" ? 1u : 2u))
        return makeError("{}: tensor '{}' is {} {}, expected a {} {}", dir, name,
                         elementTypeName(t->type), shapeToString(t->shape),
                         elementTypeName(type), suffix == ".g_idx" ? "vector" : "matrix");
      return t;
    };
    auto qweight = part(".qweight", ElementType::I32, true);
    if (!qweight.ok()) return qweight.error();
    auto qzeros = part(".qzeros", ElementType::I32, true);
    if (!qzeros.ok()) return qzeros.error();
    auto scales = part(".scales", ElementType::F16, true);
    if (!scales.ok()) return scales.error();
    auto g_idx = part(".g_idx", ElementType::I32, gptq);
    if (!g_idx.ok()) return g_idx.error();
    if (!gptq && *g_idx)
      return makeError("{}: tensor '{}.g_idx' is in an AWQ checkpoint, which has no g_idx", dir,
                       prefix);
    layer.qweight = *qweight;
    layer.qzeros = *qzeros;
    layer.scales = *scales;
    layer.g_idx = *g_idx;

    // scales fixes out; g_idx (GPTQ) or qweight's rows (AWQ) fix in.
    layer.out_features = layer.scales->shape[1];
    layer.in_features = gptq ? layer.g_idx->shape[0] : layer.qweight->shape[0];
    const int64_t in = layer.in_features, out = layer.out_features;
    if (in <= 0 || in % 8 != 0 || out <= 0 || out % 8 != 0)
      return makeError("{}: layer '{}' has in_features {} and out_features {} (from {}), "
                       "expected positive multiples of 8 (eight 4-bit values per int32)",
                       dir, prefix, in, out, gptq ? "g_idx and scales" : "qweight and scales");
    if (config.group_size != -1 && in % config.group_size != 0)
      return makeError("{}: tensor '{}.qweight': group_size {} does not divide in_features {}",
                       dir, prefix, config.group_size, in);
    layer.group_size = config.group_size == -1 ? in : config.group_size;
    layer.groups = in / layer.group_size;
    auto expect = [&](const TensorInfo* t, std::vector<int64_t> shape) -> Status {
      if (t->shape != shape)
        return makeError("{}: tensor '{}' has shape {}, expected {} ({} in_features {}, "
                         "out_features {}, {} groups)",
                         dir, t->name, shapeToString(t->shape), shapeToString(shape), method, in,
                         out, layer.groups);
      return Status::success();
    };
    KILN_RETURN_IF_ERROR(expect(layer.qweight, gptq ? std::vector<int64_t>{in / 8, out}
                                                    : std::vector<int64_t>{in, out / 8}));
    KILN_RETURN_IF_ERROR(expect(layer.qzeros, {layer.groups, out / 8}));
    KILN_RETURN_IF_ERROR(expect(layer.scales, {layer.groups, out}));
    if (checkpoint.findTensor(prefix + ".weight"))
      return makeError("{}: layer '{}' has both a float '{}.weight' and packed {} tensors", dir,
                       prefix, prefix, method);
  }

  for (const TensorInfo& t : checkpoint.tensors()) {
    bool packed = false;
    for (std::string_view suffix : kPackedSuffixes)
      packed |= endsWith(t.name, suffix) &&
                layers.count(t.name.substr(0, t.name.size() - suffix.size()));
    if (!packed) ckpt.tensors_.push_back(t);
  }
  for (auto& [prefix, layer] : layers) {
    const bool blocks = !(gptq && config.desc_act) && layer.group_size % kBlockColumns == 0 &&
                        layer.in_features % kBlockColumns == 0;
    TensorInfo weight;
    weight.name = prefix + ".weight";
    weight.shape = {layer.out_features, layer.in_features};
    weight.type = !blocks ? ElementType::F32 : (gptq && config.sym) ? ElementType::Q4_0
                                                                    : ElementType::Q4_1;
    weight.size_bytes = *bytesForElements(weight.type, layer.out_features * layer.in_features);
    weight.file = layer.qweight->file;
    ckpt.packed_[weight.name] = layer;
    ckpt.tensors_.push_back(std::move(weight));
  }
  for (size_t i = 0; i < ckpt.tensors_.size(); ++i) ckpt.index_[ckpt.tensors_[i].name] = i;
  return ckpt;
}

const TensorInfo* Int4Checkpoint::findTensor(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

Result<Int4Linear> Int4Checkpoint::unpack(const PackedLayer& layer) const {
  PackedInt4Tensors packed;
  packed.prefix = layer.prefix;
  auto read = [&](const TensorInfo* t, std::span<const uint8_t>& out) -> Status {
    if (!t) return Status::success();
    auto data = checkpoint_->tensorData(*t);
    if (!data.ok()) return data.error();
    out = *data;
    return Status::success();
  };
  KILN_RETURN_IF_ERROR(read(layer.qweight, packed.qweight));
  KILN_RETURN_IF_ERROR(read(layer.qzeros, packed.qzeros));
  KILN_RETURN_IF_ERROR(read(layer.scales, packed.scales));
  KILN_RETURN_IF_ERROR(read(layer.g_idx, packed.g_idx));
  auto unpacked =
      config_.method == Method::kGptq
          ? unpackGptq(packed, layer.in_features, layer.out_features, layer.groups,
                       config_.zeros_minus_one)
          : unpackAwq(packed, layer.in_features, layer.out_features, layer.group_size);
  if (!unpacked.ok())
    return makeError("{}: {}", checkpoint_->directory(), unpacked.error().message);
  return unpacked;
}

Result<std::vector<float>> Int4Checkpoint::dequantized(std::string_view weight_name) const {
  auto layer = packed_.find(weight_name);
  if (layer == packed_.end())
    return makeError("{}: '{}' is not a packed layer", checkpoint_->directory(), weight_name);
  auto unpacked = unpack(layer->second);
  if (!unpacked.ok()) return unpacked.error();
  return dequantizeInt4(*unpacked);
}

Result<std::vector<uint8_t>> Int4Checkpoint::convert(const PackedLayer& layer,
                                                     ElementType type) const {
  auto unpacked = unpack(layer);
  if (!unpacked.ok()) return unpacked.error();
  if (type != ElementType::F32 && !unpacked->groupsAreContiguous(layer.group_size))
    return makeError("{}: tensor '{}.g_idx' is not in column order (act-order) but "
                     "quantization_config.desc_act is false",
                     checkpoint_->directory(), layer.prefix);
  auto bytes = packInt4For(*unpacked, type, layer.group_size, layer.prefix);
  if (!bytes.ok()) return makeError("{}: {}", checkpoint_->directory(), bytes.error().message);
  return bytes;
}

Result<std::span<const uint8_t>> Int4Checkpoint::tensorData(const TensorInfo& tensor) const {
  auto layer = packed_.find(tensor.name);
  if (layer == packed_.end()) return checkpoint_->tensorData(tensor);
  auto done = converted_.find(tensor.name);
  if (done == converted_.end()) {
    auto bytes = convert(layer->second, findTensor(tensor.name)->type);
    if (!bytes.ok()) return bytes.error();
    done = converted_
               .emplace(tensor.name, std::make_unique<std::vector<uint8_t>>(bytes.take()))
               .first;
  }
  return std::span<const uint8_t>(*done->second);
}

}  // namespace kiln::formats
