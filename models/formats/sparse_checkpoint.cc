#include "models/formats/sparse_checkpoint.h"

#include <fmt/format.h>

#include <cstring>

namespace kiln::formats {
namespace {

using Format = SparsityConfig::Format;

constexpr std::string_view kWeightSuffix = ".weight";
constexpr std::string_view kParts[] = {".compressed", ".bitmask", ".shape", ".row_offsets"};

bool endsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool isValueType(ElementType type) {
  return type == ElementType::F16 || type == ElementType::BF16 || type == ElementType::F32;
}

// Bit c % 8 of byte c / 8, least significant first (numpy.packbits with
// bitorder="little", as the package packs its masks).
bool kept(const uint8_t* row_mask, int64_t column) {
  return (row_mask[column / 8] >> (column % 8)) & 1;
}

// Zero or negative zero: the sign bit masked off leaves nothing.
bool isZero(const uint8_t* value, int64_t value_bytes) {
  if (value_bytes == 4) {
    uint32_t bits;
    std::memcpy(&bits, value, 4);
    return (bits & 0x7fffffffu) == 0;
  }
  uint16_t bits;
  std::memcpy(&bits, value, 2);
  return (bits & 0x7fffu) == 0;
}

}  // namespace

Result<SparseCheckpoint> SparseCheckpoint::open(const SafetensorsCheckpoint& checkpoint,
                                                const SparsityConfig& config,
                                                const std::vector<std::string>& linear_weights) {
  SparseCheckpoint ckpt;
  ckpt.checkpoint_ = &checkpoint;
  ckpt.config_ = config;
  if (config.format == Format::kDense) {
    ckpt.tensors_ = checkpoint.tensors();
    if (config.is24()) {
      for (const std::string& weight : linear_weights) {
        if (!checkpoint.findTensor(weight) || !endsWith(weight, kWeightSuffix)) continue;
        auto covered =
            config.covers(weight.substr(0, weight.size() - kWeightSuffix.size()), /*linear=*/true);
        if (!covered.ok()) return covered.error();
        if (*covered) ckpt.weights24_.insert(weight);
      }
    }
  } else {
    KILN_RETURN_IF_ERROR(ckpt.findCompressedLayers());
  }
  for (size_t i = 0; i < ckpt.tensors_.size(); ++i) ckpt.index_[ckpt.tensors_[i].name] = i;
  return ckpt;
}

Status SparseCheckpoint::findCompressedLayers() {
  const std::string& dir = checkpoint_->directory();
  const std::string_view format = sparsityFormatName(config_.format);
  const bool bitmask24 = config_.format == Format::kSparse24Bitmask;

  // Every module with any compressed part is a compressed layer.
  std::map<std::string, CompressedLayer> layers;
  for (const TensorInfo& t : checkpoint_->tensors())
    for (std::string_view suffix : kParts)
      if (endsWith(t.name, suffix)) {
        std::string module = t.name.substr(0, t.name.size() - suffix.size());
        layers[module].module = module;
      }

  for (auto& [module, layer] : layers) {
    auto part = [&](std::string_view suffix, bool required) -> Result<const TensorInfo*> {
      const TensorInfo* t = checkpoint_->findTensor(module + std::string(suffix));
      if (!t && required)
        return makeError("{}: tensor '{}{}' is missing; a {} layer needs {}.compressed, "
                         ".bitmask and .shape",
                         dir, module, suffix, format, module);
      return t;
    };
    auto values = part(".compressed", true);
    if (!values.ok()) return values.error();
    auto bitmask = part(".bitmask", true);
    if (!bitmask.ok()) return bitmask.error();
    auto shape = part(".shape", true);
    if (!shape.ok()) return shape.error();
    auto row_offsets = part(".row_offsets", false);
    if (!row_offsets.ok()) return row_offsets.error();
    layer.values = *values;
    layer.bitmask = *bitmask;
    layer.shape = *shape;

    const size_t value_dims = bitmask24 ? 2 : 1;
    if (!isValueType(layer.values->type) || layer.values->shape.size() != value_dims)
      return makeError("{}: tensor '{}' is {} {}, expected F16, BF16 or F32 values {} (kiln "
                       "reads {} over unquantized weights)",
                       dir, layer.values->name, elementTypeName(layer.values->type),
                       shapeToString(layer.values->shape),
                       bitmask24 ? "[out, in/2]" : "[kept count]", format);
    if ((layer.bitmask->type != ElementType::U8 && layer.bitmask->type != ElementType::I8) ||
        layer.bitmask->shape.size() != 2)
      return makeError("{}: tensor '{}' is {} {}, expected a U8 matrix [out, ceil(in/8)]", dir,
                       layer.bitmask->name, elementTypeName(layer.bitmask->type),
                       shapeToString(layer.bitmask->shape));
    if ((layer.shape->type != ElementType::I64 && layer.shape->type != ElementType::I32) ||
        numElements(layer.shape->shape).value_or(0) != 2)
      return makeError("{}: tensor '{}' is {} {}, expected the two integers out, in", dir,
                       layer.shape->name, elementTypeName(layer.shape->type),
                       shapeToString(layer.shape->shape));

    // The dense shape from the headers: sparse-24-bitmask keeps exactly half
    // of each row; sparse-bitmask's count varies, so its mask's width says.
    const int64_t mask_bytes = layer.bitmask->shape[1];
    layer.rows = layer.bitmask->shape[0];
    layer.columns = bitmask24 ? 2 * layer.values->shape[1] : 8 * mask_bytes;
    if (layer.rows <= 0 || layer.columns <= 0)
      return makeError("{}: layer '{}' is empty ({} {}, {} {})", dir, module,
                       layer.values->name, shapeToString(layer.values->shape),
                       layer.bitmask->name, shapeToString(layer.bitmask->shape));
    if (bitmask24 && (layer.values->shape[0] != layer.rows || (layer.columns + 7) / 8 != mask_bytes))
      return makeError("{}: tensor '{}' has shape {}, expected [{}, {}] for '{}' of shape {} "
                       "(two kept values in every four columns)",
                       dir, layer.bitmask->name, shapeToString(layer.bitmask->shape),
                       layer.values->shape[0], (layer.columns + 7) / 8, layer.values->name,
                       shapeToString(layer.values->shape));
    if (!bitmask24 && layer.values->shape[0] > layer.rows * layer.columns)
      return makeError("{}: tensor '{}' holds {} values, more than the {} weights '{}' of "
                       "shape {} can mark",
                       dir, layer.values->name, layer.values->shape[0],
                       layer.rows * layer.columns, layer.bitmask->name,
                       shapeToString(layer.bitmask->shape));
    if (*row_offsets && (*row_offsets)->shape != std::vector<int64_t>{layer.rows})
      return makeError("{}: tensor '{}' has shape {}, expected [{}] (one offset per row)", dir,
                       (*row_offsets)->name, shapeToString((*row_offsets)->shape), layer.rows);
    if (config_.is24() && layer.columns % 4 != 0)
      return makeError("{}: layer '{}' has {} input columns, not a multiple of 4, but {} says "
                       "2:4",
                       dir, module, layer.columns, config_.where);
    if (checkpoint_->findTensor(module + std::string(kWeightSuffix)))
      return makeError("{}: layer '{}' has both a dense '{}.weight' and {} tensors", dir, module,
                       module, format);
  }

  for (const TensorInfo& t : checkpoint_->tensors()) {
    bool part = false;
    for (std::string_view suffix : kParts)
      part |= endsWith(t.name, suffix) &&
              layers.count(t.name.substr(0, t.name.size() - suffix.size()));
    if (!part) tensors_.push_back(t);
  }
  for (auto& [module, layer] : layers) {
    TensorInfo weight;
    weight.name = module + std::string(kWeightSuffix);
    weight.shape = {layer.rows, layer.columns};
    weight.type = layer.values->type;
    weight.size_bytes = *bytesForElements(weight.type, layer.rows * layer.columns);
    weight.file = layer.values->file;
    if (config_.is24()) weights24_.insert(weight.name);
    compressed_[weight.name] = layer;
    tensors_.push_back(std::move(weight));
  }
  return Status::success();
}

const TensorInfo* SparseCheckpoint::findTensor(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

Result<std::vector<uint8_t>> SparseCheckpoint::decompress(const CompressedLayer& layer) const {
  const std::string& dir = checkpoint_->directory();
  auto values = checkpoint_->tensorData(*layer.values);
  if (!values.ok()) return values.error();
  auto mask = checkpoint_->tensorData(*layer.bitmask);
  if (!mask.ok()) return mask.error();
  auto shape = checkpoint_->tensorData(*layer.shape);
  if (!shape.ok()) return shape.error();

  int64_t stored_shape[2];
  for (int i = 0; i < 2; ++i) {
    if (layer.shape->type == ElementType::I64) {
      std::memcpy(&stored_shape[i], shape->data() + 8 * i, 8);
    } else {
      int32_t narrow;
      std::memcpy(&narrow, shape->data() + 4 * i, 4);
      stored_shape[i] = narrow;
    }
  }
  if (stored_shape[0] != layer.rows || stored_shape[1] != layer.columns)
    return makeError("{}: tensor '{}' says [{}, {}], but '{}' and '{}' hold a [{}, {}] weight{}",
                     dir, layer.shape->name, stored_shape[0], stored_shape[1],
                     layer.values->name, layer.bitmask->name, layer.rows, layer.columns,
                     config_.format == Format::kSparseBitmask
                         ? " (kiln reads sparse-bitmask layers whose in-features fill the "
                           "mask's bytes, a multiple of 8)"
                         : "");

  const int64_t mask_bytes = layer.bitmask->shape[1];
  const int64_t value_count = *numElements(layer.values->shape);
  int64_t marked = 0;
  for (int64_t r = 0; r < layer.rows; ++r)
    for (int64_t c = 0; c < layer.columns; ++c) marked += kept(mask->data() + r * mask_bytes, c);
  if (marked != value_count)
    return makeError("{}: tensor '{}' marks {} kept weights, but '{}' holds {} values", dir,
                     layer.bitmask->name, marked, layer.values->name, value_count);

  const int64_t value_bytes = layer.values->type == ElementType::F32 ? 4 : 2;
  std::vector<uint8_t> dense(size_t(layer.rows * layer.columns * value_bytes), 0);
  const uint8_t* next = values->data();
  for (int64_t r = 0; r < layer.rows; ++r)
    for (int64_t c = 0; c < layer.columns; ++c)
      if (kept(mask->data() + r * mask_bytes, c)) {
        std::memcpy(dense.data() + (r * layer.columns + c) * value_bytes, next, value_bytes);
        next += value_bytes;
      }
  return dense;
}

Status SparseCheckpoint::check24(const TensorInfo& weight, std::span<const uint8_t> data) const {
  const std::string& dir = checkpoint_->directory();
  if (weight.shape.size() != 2 || weight.shape[1] % 4 != 0 || !isValueType(weight.type))
    return makeError("{}: tensor '{}' is {} {}, but {} says it is 2:4, which needs an F16, "
                     "BF16 or F32 matrix whose columns are a multiple of 4",
                     dir, weight.name, elementTypeName(weight.type), shapeToString(weight.shape),
                     config_.where);
  const int64_t rows = weight.shape[0], columns = weight.shape[1];
  const int64_t value_bytes = weight.type == ElementType::F32 ? 4 : 2;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c0 = 0; c0 < columns; c0 += 4) {
      int nonzeros = 0;
      for (int64_t c = c0; c < c0 + 4; ++c)
        nonzeros += !isZero(data.data() + (r * columns + c) * value_bytes, value_bytes);
      if (nonzeros > 2)
        return makeError("{}: {}: row {}, columns {}..{} hold {} nonzeros, but {} says 2:4", dir,
                         weight.name, r, c0, c0 + 3, nonzeros, config_.where);
    }
  }
  return Status::success();
}

Result<std::span<const uint8_t>> SparseCheckpoint::tensorData(const TensorInfo& tensor) const {
  auto layer = compressed_.find(tensor.name);
  if (layer == compressed_.end()) {
    auto data = checkpoint_->tensorData(tensor);
    if (!data.ok() || !weights24_.count(tensor.name) || checked_.count(tensor.name)) return data;
    KILN_RETURN_IF_ERROR(check24(tensor, *data));
    checked_.insert(tensor.name);
    return data;
  }
  auto done = dense_.find(tensor.name);
  if (done == dense_.end()) {
    auto bytes = decompress(layer->second);
    if (!bytes.ok()) return bytes.error();
    if (weights24_.count(tensor.name))
      KILN_RETURN_IF_ERROR(check24(*findTensor(tensor.name), *bytes));
    done = dense_.emplace(tensor.name, std::make_unique<std::vector<uint8_t>>(bytes.take())).first;
  }
  return std::span<const uint8_t>(*done->second);
}

}  // namespace kiln::formats
