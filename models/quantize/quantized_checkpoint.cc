// The checkpoint form of a written model (quantized_model.h): a checkpoint
// directory with one model.safetensors, config.json (with a GPTQ
// quantization_config for int4 linears), and the source's tokenizer files.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "models/quantize/float_tensors.h"
#include "models/quantize/quantized_model.h"

namespace kiln::quantize {
namespace {

namespace fs = std::filesystem;
using formats::ElementType;
using json = nlohmann::ordered_json;

constexpr const char* kSideFiles[] = {"tokenizer.json", "tokenizer_config.json",
                                      "special_tokens_map.json", "generation_config.json"};

struct OutTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> owned;
  std::span<const uint8_t> bytes;
};

std::string endingIn(const std::string& name, const std::string& suffix) {
  return name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0
             ? name.substr(0, name.size() - suffix.size())
             : std::string();
}

}  // namespace

Status writeCheckpoint(const formats::SafetensorsCheckpoint& source, const QuantizedModel& model,
                       const std::string& dir) {
  const formats::SafetensorsCheckpoint* ckpt = &source;
  const std::string& from = source.directory();

  std::vector<OutTensor> tensors;
  for (const formats::TensorInfo& t : ckpt->tensors()) {
    if (auto it = model.linears.find(t.name); it != model.linears.end()) {
      const formats::Int4Linear& layer = it->second;
      const std::string prefix = endingIn(t.name, ".weight");
      if (prefix.empty() || layer.out_features % 8 != 0 || layer.in_features % 8 != 0)
        return makeError("{}: tensor '{}' [{}, {}]: a GPTQ layer is a <prefix>.weight with in and "
                         "out features multiples of 8",
                         from, t.name, layer.out_features, layer.in_features);
      formats::GptqTensors packed = formats::packGptq(layer);
      const int64_t in = layer.in_features, out = layer.out_features, groups = layer.groups;
      tensors.push_back({prefix + ".qweight", "I32", {in / 8, out}, std::move(packed.qweight), {}});
      tensors.push_back({prefix + ".qzeros", "I32", {groups, out / 8}, std::move(packed.qzeros), {}});
      tensors.push_back({prefix + ".scales", "F16", {groups, out}, std::move(packed.scales), {}});
      tensors.push_back({prefix + ".g_idx", "I32", {in}, std::move(packed.g_idx), {}});
      continue;
    }
    OutTensor o{t.name, std::string(formats::elementTypeName(t.type)), t.shape, {}, {}};
    if (auto f = model.floats.find(t.name); f != model.floats.end()) {
      // A pruned linear keeps its float type (its zeros stay zeros).
      const ElementType type = model.int4() || !isFloatType(t.type) ? ElementType::F32 : t.type;
      o.dtype = std::string(formats::elementTypeName(type));
      o.owned.resize(f->second.size() * (type == ElementType::F32 ? 4 : 2));
      KILN_RETURN_IF_ERROR(storeWeightF32(o.owned, type, f->second));
    } else {
      auto data = ckpt->tensorData(t);
      if (!data.ok()) return data.error();
      o.bytes = *data;
    }
    tensors.push_back(std::move(o));
  }

  json header = json::object();
  header["__metadata__"] = {{"format", "pt"},
                            {model.int4() ? "kiln.quantization.method" : "kiln.sparsity.method",
                             model.method}};
  uint64_t offset = 0;
  for (OutTensor& t : tensors) {
    if (!t.owned.empty()) t.bytes = t.owned;
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');

  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return makeError("{}: cannot create: {}", dir, ec.message());
  const std::string path = dir + "/model.safetensors";
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  const uint64_t length = text.size();
  file.write(reinterpret_cast<const char*>(&length), 8);
  file.write(text.data(), std::streamsize(text.size()));
  for (const OutTensor& t : tensors)
    file.write(reinterpret_cast<const char*>(t.bytes.data()), std::streamsize(t.bytes.size()));
  file.close();
  if (!file) return makeError("{}: cannot write", path);

  std::ifstream in(from + "/config.json");
  std::stringstream config_text;
  config_text << in.rdbuf();
  json config = json::parse(config_text.str(), nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object())
    return makeError("{}/config.json: expected a JSON object", from);
  if (model.int4())
    config["quantization_config"] = {{"quant_method", "gptq"},
                                     {"bits", 4},
                                     {"group_size", model.grid.group},
                                     {"sym", model.grid.sym},
                                     {"desc_act", false},
                                     {"checkpoint_format", "gptq_v2"},
                                     {"kiln_method", model.method}};
  std::ofstream(dir + "/config.json") << config.dump(2) << "\n";
  for (const char* name : kSideFiles) {
    const fs::path file = fs::path(from) / name;
    if (!fs::exists(file, ec)) continue;
    fs::copy_file(file, fs::path(dir) / name, fs::copy_options::overwrite_existing, ec);
    if (ec) return makeError("{}: cannot copy to {}: {}", file.string(), dir, ec.message());
  }
  return {};
}

Status checkWritable(const formats::ModelSource& source) {
  if (source.gguf()) return {};
  if (source.sparse())
    return makeError("{}: a compressed-tensors sparse checkpoint, whose layout kiln does not write: "
                     "give its dense form",
                     source.path());
  if (!source.checkpoint() || source.int4())
    return makeError("{}: not a float safetensors checkpoint", source.path());
  return {};
}

Result<std::string> writeQuantizedModel(const formats::ModelSource& source,
                                        const QuantizedModel& model, const std::string& dir) {
  KILN_RETURN_IF_ERROR(checkWritable(source));
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return makeError("{}: cannot create: {}", dir, ec.message());
  if (const formats::GgufFile* gguf = source.gguf()) {
    const std::string path = (fs::path(dir) / "model.gguf").string();
    KILN_RETURN_IF_ERROR(writeQuantizedGguf(*gguf, model, path));
    return path;
  }
  const std::string path = (fs::path(dir) / "model").string();
  KILN_RETURN_IF_ERROR(writeCheckpoint(*source.checkpoint(), model, path));
  return path;
}

}  // namespace kiln::quantize
