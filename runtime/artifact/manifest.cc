#include "runtime/artifact/manifest.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/artifact/element_types.h"
#include "runtime/artifact/step_params_json.h"

namespace kiln {

using json = nlohmann::json;

//===----------------------------------------------------------------------===//
// Look-ups
//===----------------------------------------------------------------------===//

const EntryValue* Entry::findValue(int64_t id) const {
  for (const EntryValue& v : values)
    if (v.id == id) return &v;
  return nullptr;
}

const EntryInput* Entry::findInput(std::string_view input_name) const {
  for (const EntryInput& in : inputs)
    if (in.name == input_name) return &in;
  return nullptr;
}

const ManifestWeight* Manifest::findWeight(int64_t id) const {
  auto it = std::lower_bound(weights.begin(), weights.end(), id,
                             [](const ManifestWeight& w, int64_t v) { return w.id < v; });
  return it != weights.end() && it->id == id ? &*it : nullptr;
}

const Entry* Manifest::findEntry(std::string_view entry_name) const {
  auto it = entries.find(std::string(entry_name));
  return it == entries.end() ? nullptr : &it->second;
}

//===----------------------------------------------------------------------===//
// Parsing
//===----------------------------------------------------------------------===//

namespace {

// Reads typed fields out of JSON objects; every error is
// "<file>: <json path>: <what was expected>".
class Reader {
 public:
  explicit Reader(std::string file) : file_(std::move(file)) {}

  Error error(const std::string& path, const std::string& what) const {
    return makeError("{}: {}: {}", file_, path, what);
  }
  std::string join(const std::string& path, std::string_view key) const {
    return path.empty() ? std::string(key) : path + "." + std::string(key);
  }
  static std::string index(const std::string& path, size_t i) {
    return path + "[" + std::to_string(i) + "]";
  }
  const std::string& file() const { return file_; }

  Result<const json*> field(const json& obj, const std::string& path, std::string_view key,
                            json::value_t type, std::string_view expected) const {
    auto it = obj.find(key);
    if (it == obj.end())
      return error(path.empty() ? std::string("<root>") : path,
                   fmt::format("missing field '{}' (expected {})", key, expected));
    const json& v = *it;
    bool matches = v.type() == type ||
                   (type == json::value_t::number_integer &&
                    v.type() == json::value_t::number_unsigned) ||
                   (type == json::value_t::number_float && v.is_number());
    if (!matches)
      return error(join(path, key), fmt::format("expected {}, got {}", expected, v.type_name()));
    return &v;
  }

  Result<int64_t> integer(const json& obj, const std::string& path, std::string_view key,
                          int64_t min = INT64_MIN) const {
    auto v = field(obj, path, key, json::value_t::number_integer, "an integer");
    if (!v.ok()) return v.error();
    if ((*v)->is_number_unsigned() && (*v)->get<uint64_t>() > uint64_t(INT64_MAX))
      return error(join(path, key), "integer out of range");
    int64_t value = (*v)->get<int64_t>();
    if (value < min)
      return error(join(path, key), fmt::format("expected an integer >= {}, got {}", min, value));
    return value;
  }
  Result<double> number(const json& obj, const std::string& path, std::string_view key) const {
    auto v = field(obj, path, key, json::value_t::number_float, "a number");
    if (!v.ok()) return v.error();
    return (*v)->get<double>();
  }
  Result<std::string> string(const json& obj, const std::string& path,
                             std::string_view key) const {
    auto v = field(obj, path, key, json::value_t::string, "a string");
    if (!v.ok()) return v.error();
    return (*v)->get<std::string>();
  }
  Result<const json*> object(const json& obj, const std::string& path,
                             std::string_view key) const {
    return field(obj, path, key, json::value_t::object, "an object");
  }
  Result<const json*> array(const json& obj, const std::string& path,
                            std::string_view key) const {
    return field(obj, path, key, json::value_t::array, "an array");
  }
  // A list of integers; dims may be -1 (dynamic) when allow_dynamic.
  Result<std::vector<int64_t>> shape(const json& obj, const std::string& path,
                                     std::string_view key, bool allow_dynamic) const {
    auto arr = array(obj, path, key);
    if (!arr.ok()) return arr.error();
    std::vector<int64_t> dims;
    const std::string p = join(path, key);
    for (size_t i = 0; i < (*arr)->size(); ++i) {
      const json& d = (**arr)[i];
      if (!d.is_number_integer())
        return error(index(p, i), fmt::format("expected an integer, got {}", d.type_name()));
      int64_t dim = d.get<int64_t>();
      if (dim < 0 && !(allow_dynamic && dim == -1))
        return error(index(p, i), fmt::format("expected a dimension >= 0{}, got {}",
                                              allow_dynamic ? " or -1" : "", dim));
      dims.push_back(dim);
    }
    return dims;
  }

 private:
  std::string file_;
};

Result<ModelInfo> parseModel(const Reader& r, const json& root) {
  auto model = r.object(root, "", "model");
  if (!model.ok()) return model.error();
  const json& m = **model;
  ModelInfo info;
  auto source = r.string(m, "model", "source");
  if (!source.ok()) return source.error();
  info.source = *source;
  auto format = r.string(m, "model", "source_format");
  if (!format.ok()) return format.error();
  if (*format != "gguf" && *format != "safetensors")
    return r.error("model.source_format",
                   fmt::format("expected \"gguf\" or \"safetensors\", got \"{}\"", *format));
  info.source_format = *format;
  auto size = r.integer(m, "model", "source_size", 0);
  if (!size.ok()) return size.error();
  info.source_size = uint64_t(*size);
  auto mtime = r.integer(m, "model", "source_mtime");
  if (!mtime.ok()) return mtime.error();
  info.source_mtime = *mtime;
  if (m.contains("source_files")) {
    auto files = r.array(m, "model", "source_files");
    if (!files.ok()) return files.error();
    for (size_t i = 0; i < (*files)->size(); ++i) {
      const json& f = (**files)[i];
      const std::string path = Reader::index("model.source_files", i);
      if (!f.is_object()) return r.error(path, fmt::format("expected an object, got {}", f.type_name()));
      ManifestSourceFile file;
      auto name = r.string(f, path, "file");
      if (!name.ok()) return name.error();
      file.file = *name;
      auto bytes = r.integer(f, path, "size", 0);
      if (!bytes.ok()) return bytes.error();
      file.size = uint64_t(*bytes);
      auto time = r.integer(f, path, "mtime");
      if (!time.ok()) return time.error();
      file.mtime = *time;
      auto hash = r.string(f, path, "sampled_hash");
      if (!hash.ok()) return hash.error();
      if (hash->size() != 16 || hash->find_first_not_of("0123456789abcdef") != std::string::npos)
        return r.error(path + ".sampled_hash", fmt::format("expected 16 lower-case hex digits, got \"{}\"", *hash));
      file.sampled_hash = *hash;
      info.source_files.push_back(std::move(file));
    }
  }
  auto config = r.object(m, "model", "config");
  if (!config.ok()) return config.error();
  const json& c = **config;
  auto arch = r.string(c, "model.config", "architecture");
  if (!arch.ok()) return arch.error();
  info.architecture = *arch;
  auto vocab = r.integer(c, "model.config", "vocab_size", 1);
  if (!vocab.ok()) return vocab.error();
  info.vocab_size = *vocab;
  auto hidden = r.integer(c, "model.config", "hidden_size", 1);
  if (!hidden.ok()) return hidden.error();
  info.hidden_size = *hidden;
  auto layers = r.integer(c, "model.config", "num_layers", 1);
  if (!layers.ok()) return layers.error();
  info.num_layers = *layers;
  info.config_json = c.dump();
  return info;
}

Result<ParallelLayout> parseParallel(const Reader& r, const json& root, int world_size, int rank) {
  auto section = r.object(root, "", "parallel");
  if (!section.ok()) return section.error();
  ParallelLayout layout;
  auto tp = r.integer(**section, "parallel", "tensor_parallel", 1);
  if (!tp.ok()) return tp.error();
  auto pp = r.integer(**section, "parallel", "pipeline_parallel", 1);
  if (!pp.ok()) return pp.error();
  auto tpRank = r.integer(**section, "parallel", "tp_rank", 0);
  if (!tpRank.ok()) return tpRank.error();
  auto ppStage = r.integer(**section, "parallel", "pp_stage", 0);
  if (!ppStage.ok()) return ppStage.error();
  if (*tp * *pp != world_size)
    return r.error("parallel", fmt::format("tensor_parallel {} x pipeline_parallel {} is {}, world_size is {}", *tp,
                                           *pp, *tp * *pp, world_size));
  if (*tpRank >= *tp)
    return r.error("parallel.tp_rank", fmt::format("{} is not below tensor_parallel {}", *tpRank, *tp));
  if (*ppStage >= *pp)
    return r.error("parallel.pp_stage", fmt::format("{} is not below pipeline_parallel {}", *ppStage, *pp));
  if (*ppStage * *tp + *tpRank != rank)
    return r.error("parallel", fmt::format("pp_stage {} x tensor_parallel {} + tp_rank {} is {}, rank is {}", *ppStage,
                                           *tp, *tpRank, *ppStage * *tp + *tpRank, rank));
  layout.tensor_parallel = int(*tp);
  layout.pipeline_parallel = int(*pp);
  layout.tp_rank = int(*tpRank);
  layout.pp_stage = int(*ppStage);
  return layout;
}

Result<WeightPrepare> parsePrepare(const Reader& r, const json& p, const std::string& path) {
  WeightPrepare prep;
  auto op = r.string(p, path, "op");
  if (!op.ok()) return op.error();
  if (*op != "concat_rows" && *op != "quantize" && *op != "offset" && *op != "sparsify" && *op != "slice")
    return r.error(path + ".op",
                   fmt::format("unknown prepare op '{}' (expected concat_rows, quantize, offset, sparsify or slice)",
                               *op));
  prep.op = *op;
  auto inputs = r.shape(p, path, "inputs", /*allow_dynamic=*/false);
  if (!inputs.ok()) return inputs.error();
  if (inputs->empty()) return r.error(path + ".inputs", "expected at least one weight id");
  prep.inputs = *inputs;
  if (prep.op == "offset") {
    if (prep.inputs.size() != 1) return r.error(path + ".inputs", "offset takes one weight id");
    if (!p.contains("value") || !p["value"].is_number())
      return r.error(path + ".value", "expected a number (what offset adds)");
    prep.value = p["value"].get<double>();
  }
  if (prep.op == "slice") {
    if (prep.inputs.size() != 1) return r.error(path + ".inputs", "slice takes one weight id");
    auto axis = r.integer(p, path, "axis", 0);
    if (!axis.ok()) return axis.error();
    auto offset = r.integer(p, path, "offset", 0);
    if (!offset.ok()) return offset.error();
    auto size = r.integer(p, path, "size", 1);
    if (!size.ok()) return size.error();
    prep.axis = *axis;
    prep.offset = *offset;
    prep.size = *size;
  }
  if (prep.op == "sparsify") {
    if (prep.inputs.size() != 1) return r.error(path + ".inputs", "sparsify takes one weight id");
    auto pattern = r.string(p, path, "pattern");
    if (!pattern.ok()) return pattern.error();
    auto method = r.string(p, path, "method");
    if (!method.ok()) return method.error();
    if (*pattern != "2:4") return r.error(path + ".pattern", fmt::format("'{}', expected '2:4'", *pattern));
    if (*method != "magnitude" && *method != "sparsegpt")
      return r.error(path + ".method", fmt::format("'{}', expected 'magnitude' or 'sparsegpt'", *method));
    prep.pattern = *pattern;
    prep.method = *method;
  }
  if (prep.op == "quantize") {
    auto scheme = r.string(p, path, "scheme");
    if (!scheme.ok()) return scheme.error();
    prep.scheme = *scheme;
    if (p.contains("group")) {
      auto group = r.integer(p, path, "group", 0);
      if (!group.ok()) return group.error();
      prep.group = *group;
    }
    if (p.contains("result")) {
      auto result = r.integer(p, path, "result", 0);
      if (!result.ok()) return result.error();
      prep.result = *result;
    }
  }
  return prep;
}

Result<std::vector<ManifestWeight>> parseWeights(const Reader& r, const json& root) {
  auto weights = r.array(root, "", "weights");
  if (!weights.ok()) return weights.error();
  std::vector<ManifestWeight> out;
  std::set<int64_t> ids;
  for (size_t i = 0; i < (*weights)->size(); ++i) {
    const json& w = (**weights)[i];
    const std::string path = Reader::index("weights", i);
    if (!w.is_object()) return r.error(path, fmt::format("expected an object, got {}", w.type_name()));
    ManifestWeight weight;
    auto id = r.integer(w, path, "id", 0);
    if (!id.ok()) return id.error();
    if (!ids.insert(*id).second)
      return r.error(path + ".id", fmt::format("duplicate weight id {}", *id));
    weight.id = *id;
    auto name = r.string(w, path, "name");
    if (!name.ok()) return name.error();
    weight.name = *name;
    auto type = r.string(w, path, "type");
    if (!type.ok()) return type.error();
    if (!isPlanElementType(*type))
      return r.error(path + ".type", fmt::format("unknown element type '{}'", *type));
    weight.type = *type;
    auto shape = r.shape(w, path, "shape", /*allow_dynamic=*/false);
    if (!shape.ok()) return shape.error();
    weight.shape = *shape;
    bool has_source = w.contains("source"), has_prepare = w.contains("prepare");
    if (has_source == has_prepare)
      return r.error(path, "expected exactly one of 'source' (a checkpoint tensor) or 'prepare'");
    if (has_source) {
      auto source = r.string(w, path, "source");
      if (!source.ok()) return source.error();
      weight.source = *source;
    } else {
      auto prep = r.object(w, path, "prepare");
      if (!prep.ok()) return prep.error();
      auto parsed = parsePrepare(r, **prep, path + ".prepare");
      if (!parsed.ok()) return parsed.error();
      weight.prepare = parsed.take();
    }
    out.push_back(std::move(weight));
  }
  // Preparation inputs must name other weights.
  for (size_t i = 0; i < out.size(); ++i) {
    if (!out[i].prepare) continue;
    for (size_t j = 0; j < out[i].prepare->inputs.size(); ++j) {
      int64_t input = out[i].prepare->inputs[j];
      std::string path = Reader::index(Reader::index("weights", i) + ".prepare.inputs", j);
      if (!ids.count(input))
        return r.error(path, fmt::format("unknown weight id {}", input));
      if (input == out[i].id) return r.error(path, "a weight cannot be prepared from itself");
    }
  }
  std::sort(out.begin(), out.end(),
            [](const ManifestWeight& a, const ManifestWeight& b) { return a.id < b.id; });
  return out;
}

Result<KvCacheConfig> parseKvCache(const Reader& r, const json& root) {
  auto kv = r.object(root, "", "kv_cache");
  if (!kv.ok()) return kv.error();
  KvCacheConfig config;
  auto layers = r.integer(**kv, "kv_cache", "layers", 0);
  if (!layers.ok()) return layers.error();
  auto page = r.integer(**kv, "kv_cache", "page_size", 1);
  if (!page.ok()) return page.error();
  // A model without attention layers (layers 0) has pools of no heads.
  auto heads = r.integer(**kv, "kv_cache", "kv_heads", *layers > 0 ? 1 : 0);
  if (!heads.ok()) return heads.error();
  auto dim = r.integer(**kv, "kv_cache", "head_dim", *layers > 0 ? 1 : 0);
  if (!dim.ok()) return dim.error();
  auto type = r.string(**kv, "kv_cache", "type");
  if (!type.ok()) return type.error();
  for (auto [value, key] : {std::pair{*layers, "layers"}, std::pair{*page, "page_size"},
                            std::pair{*heads, "kv_heads"}, std::pair{*dim, "head_dim"}})
    if (value > INT32_MAX) return r.error(std::string("kv_cache.") + key, "value too large");
  config.layers = int(*layers);
  config.page_size = int(*page);
  config.kv_heads = int(*heads);
  config.head_dim = int(*dim);
  config.type = *type;
  // The pool types either backend may hold, and the scales each needs.
  const bool scaled = config.type == "int8" || config.type == "fp8e4m3";
  if (!scaled && config.type != "f32" && config.type != "f16" && config.type != "bf16")
    return r.error("kv_cache.type", fmt::format("unknown KV cache type '{}', expected one of: f32, f16, bf16, "
                                                "int8, fp8e4m3",
                                                config.type));
  if (kv.value()->contains("scales")) {
    auto scales = r.string(**kv, "kv_cache", "scales");
    if (!scales.ok()) return scales.error();
    config.scales = *scales;
  }
  if (scaled && config.scales != "token_head")
    return r.error("kv_cache.scales",
                   fmt::format("{} pools need \"token_head\" scales (an f32 per token slot and kv head), got '{}'",
                               config.type, config.scales));
  if (!scaled && !config.scales.empty())
    return r.error("kv_cache.scales", fmt::format("{} pools take no scales, got '{}'", config.type, config.scales));
  if (kv.value()->contains("sliding_windows")) {
    auto windows = r.shape(**kv, "kv_cache", "sliding_windows", /*allow_dynamic=*/false);
    if (!windows.ok()) return windows.error();
    if (int64_t(windows->size()) != config.layers)
      return r.error("kv_cache.sliding_windows",
                     fmt::format("has {} entries, expected one per layer ({})", windows->size(), config.layers));
    for (size_t i = 0; i < windows->size(); ++i)
      if ((*windows)[i] > INT32_MAX)
        return r.error(Reader::index("kv_cache.sliding_windows", i), "value too large");
    config.sliding_windows = windows.take();
  }
  return config;
}

// state_cache: {"conv_type": t, "layers": [{"conv": [K-1, C], "ssm": [...],
// "conv_bytes": n, "ssm_bytes": n}, ...]}; each layer's bytes must be its
// shapes' in its type.
Result<StateCacheConfig> parseStateCache(const Reader& r, const json& root) {
  auto state = r.object(root, "", "state_cache");
  if (!state.ok()) return state.error();
  StateCacheConfig config;
  auto type = r.string(**state, "state_cache", "conv_type");
  if (!type.ok()) return type.error();
  config.conv_type = *type;
  const int64_t conv_element = config.conv_type == "f32" ? 4 : config.conv_type == "bf16" || config.conv_type == "f16" ? 2 : 0;
  if (conv_element == 0)
    return r.error("state_cache.conv_type", fmt::format("'{}', expected f32, bf16 or f16", config.conv_type));
  auto layers = r.array(**state, "state_cache", "layers");
  if (!layers.ok()) return layers.error();
  if ((*layers)->empty()) return r.error("state_cache.layers", "expected at least one state-space layer");
  for (size_t i = 0; i < (*layers)->size(); ++i) {
    const std::string p = Reader::index("state_cache.layers", i);
    const json& l = (**layers)[i];
    if (!l.is_object()) return r.error(p, fmt::format("expected an object, got {}", l.type_name()));
    StateCacheLayer layer;
    auto conv = r.shape(l, p, "conv", /*allow_dynamic=*/false);
    if (!conv.ok()) return conv.error();
    auto ssm = r.shape(l, p, "ssm", /*allow_dynamic=*/false);
    if (!ssm.ok()) return ssm.error();
    auto conv_bytes = r.integer(l, p, "conv_bytes", 1);
    if (!conv_bytes.ok()) return conv_bytes.error();
    auto ssm_bytes = r.integer(l, p, "ssm_bytes", 1);
    if (!ssm_bytes.ok()) return ssm_bytes.error();
    if (conv->size() != 2) return r.error(p + ".conv", fmt::format("has {} extents, expected 2 ([K-1, C])", conv->size()));
    if (ssm->size() != 2 && ssm->size() != 3)
      return r.error(p + ".ssm", fmt::format("has {} extents, expected 2 ([I, N]) or 3 ([H, P, N])", ssm->size()));
    int64_t conv_elements = 1, ssm_elements = 1;
    for (int64_t e : *conv) conv_elements *= e;
    for (int64_t e : *ssm) ssm_elements *= e;
    if (conv_elements <= 0 || ssm_elements <= 0 || conv_elements > (int64_t(1) << 40) || ssm_elements > (int64_t(1) << 40))
      return r.error(p, "expected positive extents");
    if (*conv_bytes != conv_elements * conv_element)
      return r.error(p + ".conv_bytes", fmt::format("{} is not {} {} elements ({} bytes)", *conv_bytes, conv_elements,
                                                    config.conv_type, conv_elements * conv_element));
    if (*ssm_bytes != ssm_elements * 4)
      return r.error(p + ".ssm_bytes", fmt::format("{} is not {} f32 elements ({} bytes)", *ssm_bytes, ssm_elements,
                                                   ssm_elements * 4));
    layer.conv = conv.take();
    layer.ssm = ssm.take();
    layer.conv_bytes = *conv_bytes;
    layer.ssm_bytes = *ssm_bytes;
    config.layers.push_back(std::move(layer));
  }
  return config;
}

// Every paged_attention step reads its layer's pools with that layer's
// window from kv_cache.sliding_windows, so the runtime can rely on either.
Status checkSlidingWindows(const Reader& r, const Entry& entry, const std::string& path, const KvCacheConfig& kv) {
  for (size_t i = 0; i < entry.steps.size(); ++i) {
    const Step& step = entry.steps[i];
    const auto* a = std::get_if<PagedAttentionParams>(&step.params);
    if (!a) continue;
    const int layer = step.args[1].layer;
    if (a->sliding_window != kv.slidingWindow(layer))
      return r.error(Reader::index(path + ".steps", i) + ".params.sliding_window",
                     fmt::format("{} is not kv_cache.sliding_windows[{}] {}", a->sliding_window, layer,
                                 kv.slidingWindow(layer)));
  }
  return {};
}

Result<ParamMap> parseParams(const Reader& r, const json& step, const std::string& path) {
  if (!step.contains("params")) return ParamMap{};
  auto params = r.object(step, path, "params");
  if (!params.ok()) return params.error();
  return paramsFromJson(**params, r.file() + ": " + path + ".params");
}

// A rope_kv_append or paged_attention step reads and writes the pools
// kv_cache describes.
Status checkHeadsMatchPool(const Reader& r, const AttentionHeads& a, const std::string& path,
                           const KvCacheConfig& kv) {
  auto mismatch = [&](const char* name, int64_t value, int64_t pool) {
    return r.error(path + ".params." + name,
                   fmt::format("{} is not kv_cache.{} {}", value, name, pool));
  };
  if (a.kv_heads != kv.kv_heads) return mismatch("kv_heads", a.kv_heads, kv.kv_heads);
  if (a.head_dim != kv.head_dim) return mismatch("head_dim", a.head_dim, kv.head_dim);
  if (a.page_size != kv.page_size) return mismatch("page_size", a.page_size, kv.page_size);
  if (a.kv_type != kv.type)
    return r.error(path + ".params.kv_type",
                   fmt::format("{} is not kv_cache.type {}", a.kv_type, kv.type));
  return {};
}

Result<StepArg> parseArg(const Reader& r, const json& a, const std::string& path,
                         const Entry& entry, const std::set<int64_t>& weight_ids,
                         const KvCacheConfig& kv, const StateCacheConfig& state) {
  if (!a.is_object() || a.size() != 1)
    return r.error(path, "expected an object with one of 'input', 'weight', 'value', 'pool', 'state'");
  StepArg arg;
  if (a.contains("input")) {
    auto name = r.string(a, path, "input");
    if (!name.ok()) return name.error();
    if (!entry.findInput(*name))
      return r.error(path, fmt::format("unknown input '{}'", *name));
    arg.kind = StepArg::Kind::kInput;
    arg.input = *name;
  } else if (a.contains("weight")) {
    auto id = r.integer(a, path, "weight");
    if (!id.ok()) return id.error();
    if (!weight_ids.count(*id)) return r.error(path, fmt::format("unknown weight id {}", *id));
    arg.kind = StepArg::Kind::kWeight;
    arg.id = *id;
  } else if (a.contains("value")) {
    auto id = r.integer(a, path, "value");
    if (!id.ok()) return id.error();
    if (!entry.findValue(*id)) return r.error(path, fmt::format("unknown value id {}", *id));
    arg.kind = StepArg::Kind::kValue;
    arg.id = *id;
  } else if (a.contains("pool")) {
    auto pool = r.object(a, path, "pool");
    if (!pool.ok()) return pool.error();
    const std::string p = path + ".pool";
    auto layer = r.integer(**pool, p, "layer", 0);
    if (!layer.ok()) return layer.error();
    if (*layer >= kv.layers)
      return r.error(p + ".layer", fmt::format("layer {} is out of range (kv_cache.layers is {})",
                                               *layer, kv.layers));
    auto role = r.string(**pool, p, "role");
    if (!role.ok()) return role.error();
    if (*role != "k" && *role != "v")
      return r.error(p + ".role", fmt::format("expected \"k\" or \"v\", got \"{}\"", *role));
    arg.kind = StepArg::Kind::kPool;
    arg.layer = int(*layer);
    arg.role = *role == "k" ? PoolRole::kKey : PoolRole::kValue;
  } else if (a.contains("state")) {
    auto pool = r.object(a, path, "state");
    if (!pool.ok()) return pool.error();
    const std::string p = path + ".state";
    auto layer = r.integer(**pool, p, "layer", 0);
    if (!layer.ok()) return layer.error();
    if (*layer >= int64_t(state.layers.size()))
      return r.error(p + ".layer", fmt::format("layer {} is out of range (state_cache has {} layers)", *layer,
                                               state.layers.size()));
    auto role = r.string(**pool, p, "role");
    if (!role.ok()) return role.error();
    if (*role != "conv" && *role != "ssm")
      return r.error(p + ".role", fmt::format("expected \"conv\" or \"ssm\", got \"{}\"", *role));
    arg.kind = StepArg::Kind::kState;
    arg.layer = int(*layer);
    arg.state_role = *role == "conv" ? StateRole::kConv : StateRole::kSsm;
  } else {
    return r.error(path, "expected an object with one of 'input', 'weight', 'value', 'pool', 'state'");
  }
  return arg;
}

char argLetter(StepArg::Kind kind) {
  switch (kind) {
    case StepArg::Kind::kInput: return 'i';
    case StepArg::Kind::kWeight: return 'w';
    case StepArg::Kind::kValue: return 'v';
    case StepArg::Kind::kPool: return 'p';
    case StepArg::Kind::kState: return 's';
  }
  return '?';
}

// The argument lists each kind takes, as letters (i input, w weight,
// v value, p pool), in the order of the table in artifact.md.
std::vector<std::string_view> argSignatures(StepKind kind) {
  switch (kind) {
    case StepKind::kEmbedding: return {"iw"};
    case StepKind::kRmsNorm: return {"vw"};
    case StepKind::kResidualRmsNorm: return {"vvw"};
    case StepKind::kGemm: return {"vw", "vww"};
    // positions are an input, or verify's tree_positions value
    case StepKind::kRopeKvAppend:
      return {"viipp", "vvviipp", "viippww", "vvviippww", "vvipp", "vvvvipp", "vvippww", "vvvvippww"};
    case StepKind::kPagedAttention: return {"vppiii", "vppiiiv"};  // (, tree_mask)
    case StepKind::kSiluMul: return {"v", "vv"};
    case StepKind::kAdd:
    case StepKind::kMul: return {"vv"};
    case StepKind::kSilu:
    case StepKind::kSplit: return {"v"};
    case StepKind::kGatherLastTokens: return {"vi"};
    case StepKind::kMoeRouter: return {"v", "vw"};  // logits, or (h, Wrouter)
    case StepKind::kMoeFfn: return {"vvvwww"};
    case StepKind::kTreePositions: return {"iii"};
    case StepKind::kTreeMask: return {"ii"};
    case StepKind::kAccept: return {"viii", "viiii"};  // (, draft_probs)
    // x, conv pool, weight, query_start, state_slots (, bias)
    case StepKind::kSsmConv1d: return {"vswii", "vswiiw"};
    // x, dt, a_log, b, c, d, ssm pool, query_start, state_slots
    case StepKind::kSelectiveScan: return {"vvwvvwsii"};
    // x, dt, dt_bias, a_log, b, c, d, ssm pool, query_start, state_slots
    case StepKind::kSsdScan: return {"vvwwvvwsii"};
    case StepKind::kSsmGatedNorm: return {"vvw"};
    case StepKind::kKvAppend: return {"vvipp"};  // k, v, slot_mapping, k_pool, v_pool
    case StepKind::kReluSquared: return {"v"};
    case StepKind::kAllReduce:
    case StepKind::kSend: return {"v"};
    case StepKind::kRecv: return {""};
  }
  return {};
}

std::string describeSignature(std::string_view sig) {
  std::string out;
  for (char c : sig) {
    if (!out.empty()) out += ", ";
    out += c == 'i' ? "input" : c == 'w' ? "weight" : c == 'v' ? "value" : c == 's' ? "state pool" : "pool";
  }
  return "(" + out + ")";
}

Result<Step> parseStep(const Reader& r, const json& s, const std::string& path,
                       const Entry& entry, const std::set<int64_t>& weight_ids,
                       const KvCacheConfig& kv, const StateCacheConfig& state) {
  if (!s.is_object()) return r.error(path, fmt::format("expected an object, got {}", s.type_name()));
  Step step;
  step.path = r.file() + ": " + path;
  auto kind = r.string(s, path, "kind");
  if (!kind.ok()) return kind.error();
  auto parsed_kind = parseStepKind(*kind);
  if (!parsed_kind)
    return r.error(path + ".kind", fmt::format("unknown step kind '{}' (supported: {})", *kind,
                                               supportedStepKinds()));
  step.kind = *parsed_kind;
  if (s.contains("instance")) {
    auto instance = r.string(s, path, "instance");
    if (!instance.ok()) return instance.error();
    step.instance = *instance;
  }
  auto values = parseParams(r, s, path);
  if (!values.ok()) return values.error();
  auto params = parseStepParams(step.kind, *values, r.file() + ": " + path + ".params");
  if (!params.ok()) return params.error();
  step.params = params.take();
  if (const AttentionHeads* heads = attentionHeads(step.params))
    KILN_RETURN_IF_ERROR(checkHeadsMatchPool(r, *heads, path, kv));
  if (const auto* append = std::get_if<KvAppendParams>(&step.params))
    KILN_RETURN_IF_ERROR(checkHeadsMatchPool(
        r, AttentionHeads{append->kv_heads, append->kv_heads, append->head_dim, append->page_size, append->kv_type},
        path, kv));

  auto args = r.array(s, path, "args");
  if (!args.ok()) return args.error();
  std::string letters;
  for (size_t i = 0; i < (*args)->size(); ++i) {
    auto arg = parseArg(r, (**args)[i], Reader::index(path + ".args", i), entry, weight_ids, kv, state);
    if (!arg.ok()) return arg.error();
    letters += argLetter(arg->kind);
    step.args.push_back(arg.take());
  }
  std::vector<std::string_view> sigs = argSignatures(step.kind);
  if (std::find(sigs.begin(), sigs.end(), letters) == sigs.end()) {
    std::string expected;
    for (std::string_view sig : sigs)
      expected += (expected.empty() ? "" : " or ") + describeSignature(sig);
    return r.error(path + ".args", fmt::format("{} takes {}, got {}", *kind, expected,
                                               describeSignature(letters)));
  }

  if (s.contains("variants")) {
    auto variants = r.array(s, path, "variants");
    if (!variants.ok()) return variants.error();
    for (size_t i = 0; i < (*variants)->size(); ++i) {
      auto v = variantFromJson((**variants)[i], step.kind, r.file() + ": " + Reader::index(path + ".variants", i));
      if (!v.ok()) return v.error();
      step.variants.push_back(v.take());
    }
  }

  auto results = r.shape(s, path, "results", /*allow_dynamic=*/false);
  if (!results.ok()) return results.error();
  for (size_t i = 0; i < results->size(); ++i)
    if (!entry.findValue((*results)[i]))
      return r.error(Reader::index(path + ".results", i),
                     fmt::format("unknown value id {}", (*results)[i]));
  size_t min_results = 1, max_results = 1;
  if (step.kind == StepKind::kKvAppend || step.kind == StepKind::kSend) min_results = max_results = 0;
  if (step.kind == StepKind::kResidualRmsNorm) max_results = 2;
  if (step.kind == StepKind::kSplit) max_results = SIZE_MAX;
  if (step.kind == StepKind::kAccept || step.kind == StepKind::kMoeRouter) min_results = max_results = 2;
  if (results->size() < min_results || results->size() > max_results)
    return r.error(path + ".results",
                   fmt::format("{} gives {} result{}, got {}", *kind,
                               max_results == 0          ? "no"
                               : max_results == SIZE_MAX ? "at least 1"
                               : min_results == 2      ? "2"
                               : max_results == 2      ? "1 or 2"
                                                       : "1",
                               max_results == 1 ? "" : "s", results->size()));
  // The param cross-checks that need the step's args and results.
  if (const auto* w = std::get_if<ResidualRmsNormParams>(&step.params); w && results->size() != (w->writes_sum ? 2u : 1u))
    return r.error(path + ".results", fmt::format("writes_sum is {}, so expected {} result(s), got {}",
                                                  w->writes_sum, w->writes_sum ? 2 : 1, results->size()));
  if (const auto* sp = std::get_if<SplitParams>(&step.params); sp && results->size() != sp->sizes.size())
    return r.error(path + ".results",
                   fmt::format("{} sizes for {} results", sp->sizes.size(), results->size()));
  if (const auto* g = std::get_if<GemmParams>(&step.params)) {
    const size_t expected = 2 + size_t(g->scales) + size_t(g->bias);
    if (step.args.size() != expected)
      return r.error(path + ".args", fmt::format("gemm with scales {} and bias {} takes {} args, got {}", g->scales,
                                                 g->bias, expected, step.args.size()));
  }
  if (const auto* q = std::get_if<RopeKvAppendParams>(&step.params)) {
    const size_t expected = (q->merged_qkv ? 5 : 7) + (q->qk_norm ? 2 : 0);
    if (step.args.size() != expected)
      return r.error(path + ".args", fmt::format("merged_qkv is {} and qk_norm {} but the step has {} args",
                                                 q->merged_qkv, q->qk_norm, step.args.size()));
  }
  if (const auto* a = std::get_if<PagedAttentionParams>(&step.params); a && a->tree_mask != (step.args.size() == 7))
    return r.error(path + ".args", fmt::format("tree_mask is {} but the step has {} args", a->tree_mask,
                                               step.args.size()));
  if (const auto* a = std::get_if<AcceptParams>(&step.params);
      a && (a->mode == "rejection") != (step.args.size() == 5))
    return r.error(path + ".args", fmt::format("mode {} {} draft_probs but the step has {} args", a->mode,
                                               a->mode == "rejection" ? "takes" : "takes no", step.args.size()));
  if (const auto* m = std::get_if<SiluMulParams>(&step.params); m && !m->activation.empty() && m->activation != "gelu_tanh")
    return r.error(path + ".params.activation", fmt::format("'{}', expected gelu_tanh or absent (silu)", m->activation));
  if (const auto* m = std::get_if<SiluMulParams>(&step.params); m && m->merged_gate_up != (step.args.size() == 1))
    return r.error(path + ".args", fmt::format("merged_gate_up is {} but the step has {} args", m->merged_gate_up,
                                               step.args.size()));
  step.results = *results;
  return step;
}

Result<Entry> parseEntry(const Reader& r, const json& e, const std::string& path,
                         const std::set<int64_t>& weight_ids, const KvCacheConfig& kv,
                         const StateCacheConfig& state) {
  Entry entry;
  auto inputs = r.array(e, path, "inputs");
  if (!inputs.ok()) return inputs.error();
  for (size_t i = 0; i < (*inputs)->size(); ++i) {
    const json& in = (**inputs)[i];
    const std::string p = Reader::index(path + ".inputs", i);
    EntryInput input;
    auto name = r.string(in, p, "name");
    if (!name.ok()) return name.error();
    if (entry.findInput(*name)) return r.error(p + ".name", fmt::format("duplicate input '{}'", *name));
    input.name = *name;
    auto type = r.string(in, p, "type");
    if (!type.ok()) return type.error();
    input.type = *type;
    if (in.contains("shape")) {
      auto shape = r.shape(in, p, "shape", /*allow_dynamic=*/true);
      if (!shape.ok()) return shape.error();
      input.shape = *shape;
    }
    entry.inputs.push_back(std::move(input));
  }

  auto arena = r.object(e, path, "arena");
  if (!arena.ok()) return arena.error();
  auto bpt = r.integer(**arena, path + ".arena", "bytes_per_token", 0);
  if (!bpt.ok()) return bpt.error();
  entry.bytes_per_token = *bpt;

  auto values = r.array(e, path, "values");
  if (!values.ok()) return values.error();
  for (size_t i = 0; i < (*values)->size(); ++i) {
    const json& v = (**values)[i];
    const std::string p = Reader::index(path + ".values", i);
    if (!v.is_object()) return r.error(p, fmt::format("expected an object, got {}", v.type_name()));
    EntryValue value;
    auto id = r.integer(v, p, "id", 0);
    if (!id.ok()) return id.error();
    if (entry.findValue(*id)) return r.error(p + ".id", fmt::format("duplicate value id {}", *id));
    value.id = *id;
    auto type = r.string(v, p, "type");
    if (!type.ok()) return type.error();
    value.type = *type;
    auto shape = r.shape(v, p, "shape", /*allow_dynamic=*/true);
    if (!shape.ok()) return shape.error();
    value.shape = *shape;
    auto rows = r.string(v, p, "rows");
    if (!rows.ok()) return rows.error();
    if (*rows == "tokens") {
      value.rows = ValueRows::kTokens;
    } else if (*rows == "sequences") {
      value.rows = ValueRows::kSequences;
    } else if (*rows == "fixed") {
      value.rows = ValueRows::kFixed;
    } else {
      return r.error(p + ".rows", fmt::format("expected \"tokens\", \"sequences\" or \"fixed\", "
                                              "got \"{}\"",
                                              *rows));
    }
    auto row_bytes = r.integer(v, p, "row_bytes", 0);
    if (!row_bytes.ok()) return row_bytes.error();
    value.row_bytes = *row_bytes;
    bool has_offset = v.contains("offset"), has_view = v.contains("view_of");
    if (has_offset == has_view)
      return r.error(p, "expected exactly one of 'offset' (arena storage) or 'view_of'");
    if (has_offset) {
      auto offset = r.integer(v, p, "offset", 0);
      if (!offset.ok()) return offset.error();
      if (*offset > entry.bytes_per_token || value.row_bytes > entry.bytes_per_token - *offset)
        return r.error(p, fmt::format("offset {} + row_bytes {} is past the arena's "
                                      "bytes_per_token {}",
                                      *offset, value.row_bytes, entry.bytes_per_token));
      value.offset = *offset;
    } else {
      auto view = r.integer(v, p, "view_of", 0);
      if (!view.ok()) return view.error();
      value.view_of = *view;
    }
    entry.values.push_back(std::move(value));
  }
  // Views: the source exists, is not the view itself, has the same row bytes,
  // and the chain ends in storage.
  for (size_t i = 0; i < entry.values.size(); ++i) {
    const EntryValue& v = entry.values[i];
    if (!v.view_of) continue;
    const std::string p = Reader::index(path + ".values", i) + ".view_of";
    const EntryValue* src = entry.findValue(*v.view_of);
    if (!src) return r.error(p, fmt::format("unknown value id {}", *v.view_of));
    if (src->row_bytes != v.row_bytes || src->rows != v.rows)
      return r.error(p, fmt::format("view of value {} must have its rows and row_bytes ({}), "
                                    "got {}",
                                    src->id, src->row_bytes, v.row_bytes));
    size_t hops = 0;
    while (src->view_of && hops++ <= entry.values.size()) src = entry.findValue(*src->view_of);
    if (!src || src->view_of) return r.error(p, "view chain does not end in arena storage");
  }

  auto steps = r.array(e, path, "steps");
  if (!steps.ok()) return steps.error();
  for (size_t i = 0; i < (*steps)->size(); ++i) {
    auto step = parseStep(r, (**steps)[i], Reader::index(path + ".steps", i), entry, weight_ids, kv, state);
    if (!step.ok()) return step.error();
    entry.steps.push_back(step.take());
  }

  auto outputs = r.array(e, path, "outputs");
  if (!outputs.ok()) return outputs.error();
  for (size_t i = 0; i < (*outputs)->size(); ++i) {
    const json& o = (**outputs)[i];
    const std::string p = Reader::index(path + ".outputs", i);
    EntryOutput output;
    auto name = r.string(o, p, "name");
    if (!name.ok()) return name.error();
    output.name = *name;
    auto value = r.integer(o, p, "value", 0);
    if (!value.ok()) return value.error();
    if (!entry.findValue(*value))
      return r.error(p + ".value", fmt::format("unknown value id {}", *value));
    output.value = *value;
    entry.outputs.push_back(std::move(output));
  }
  if (e.contains("megakernel")) {
    auto plan = megakernelFromJson(e["megakernel"], entry, r.file() + ": " + path + ".megakernel");
    if (!plan.ok()) return plan.error();
    entry.megakernel = plan.take();
  }
  return entry;
}

std::string scalarText(const json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

}  // namespace

Result<Manifest> Manifest::parse(std::string_view json_text, const std::string& path) {
  json root = json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) {
    // Re-parse with exceptions only to get the position of the error.
    std::string detail = "invalid JSON";
    try {
      (void)json::parse(json_text.begin(), json_text.end());
    } catch (const json::parse_error& e) {
      detail = e.what();
    }
    return makeError("{}: {}", path, detail);
  }
  Reader r(path);
  if (!root.is_object())
    return r.error("<root>", fmt::format("expected an object, got {}", root.type_name()));

  auto format = r.string(root, "", "format");
  if (!format.ok()) return format.error();
  if (*format != "kiln-artifact")
    return r.error("format", fmt::format("expected \"kiln-artifact\", got \"{}\"", *format));
  auto version = r.integer(root, "", "version");
  if (!version.ok()) return version.error();
  if (*version != kManifestVersion)
    return r.error("version", fmt::format("unsupported version {} (this runtime reads version {})",
                                          *version, kManifestVersion));
  Manifest m;
  m.path = path;
  m.version = int(*version);

  auto model = parseModel(r, root);
  if (!model.ok()) return model.error();
  m.model = model.take();

  if (root.contains("options")) {
    auto options = r.object(root, "", "options");
    if (!options.ok()) return options.error();
    for (auto it = (*options)->begin(); it != (*options)->end(); ++it)
      m.options[it.key()] = scalarText(it.value());
  }
  if (auto target = m.options.find("target"); target != m.options.end()) m.target = target->second;
  else m.target = "cpu";
  auto activation = r.string(root, "", "activation_type");
  if (!activation.ok()) return activation.error();
  m.activation_type = *activation;
  if (root.contains("world_size")) {
    auto world = r.integer(root, "", "world_size", 1);
    if (!world.ok()) return world.error();
    m.world_size = int(std::min<int64_t>(*world, INT32_MAX));
  }
  if (root.contains("rank")) {
    auto rank = r.integer(root, "", "rank", 0);
    if (!rank.ok()) return rank.error();
    if (*rank >= m.world_size)
      return r.error("rank", fmt::format("rank {} is not below world_size {}", *rank, m.world_size));
    m.rank = int(*rank);
  }
  if (root.contains("parallel")) {
    auto layout = parseParallel(r, root, m.world_size, m.rank);
    if (!layout.ok()) return layout.error();
    m.parallel = *layout;
  } else if (m.world_size != 1) {
    return r.error("parallel", fmt::format("missing: world_size {} needs the tensor- and pipeline-parallel "
                                           "layout", m.world_size));
  }

  auto weights = parseWeights(r, root);
  if (!weights.ok()) return weights.error();
  m.weights = weights.take();
  std::set<int64_t> weight_ids;
  for (const ManifestWeight& w : m.weights) weight_ids.insert(w.id);

  auto kv = parseKvCache(r, root);
  if (!kv.ok()) return kv.error();
  m.kv_cache = kv.take();
  if (root.contains("state_cache")) {
    auto state = parseStateCache(r, root);
    if (!state.ok()) return state.error();
    m.state_cache = state.take();
  }
  if (m.kv_cache.layers == 0 && m.state_cache.layers.empty())
    return r.error("kv_cache.layers", "is 0 and there is no state_cache: the model carries no state");

  auto entries = r.object(root, "", "entries");
  if (!entries.ok()) return entries.error();
  for (auto it = (*entries)->begin(); it != (*entries)->end(); ++it) {
    const std::string p = "entries." + it.key();
    if (!it.value().is_object())
      return r.error(p, fmt::format("expected an object, got {}", it.value().type_name()));
    auto entry = parseEntry(r, it.value(), p, weight_ids, m.kv_cache, m.state_cache);
    if (!entry.ok()) return entry.error();
    KILN_RETURN_IF_ERROR(checkSlidingWindows(r, *entry, p, m.kv_cache));
    entry->name = it.key();
    m.entries[it.key()] = entry.take();
  }
  if (!m.entries.count("forward")) return r.error("entries", "missing entry 'forward'");
  return m;
}

Result<Manifest> Manifest::load(const std::string& artifact_dir_or_file) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string path = artifact_dir_or_file;
  if (fs::is_directory(path, ec)) path = (fs::path(path) / "manifest.json").string();
  std::ifstream file(path, std::ios::binary);
  if (!file)
    return makeError("{}: cannot open the artifact manifest (expected DIR/manifest.json "
                     "written by kiln-compile -o DIR)",
                     path);
  std::ostringstream text;
  text << file.rdbuf();
  return parse(text.str(), path);
}

}  // namespace kiln
