#include "models/formats/gguf_file.h"

#include "models/formats/error_text.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <utility>

namespace kiln::formats {

static_assert(std::endian::native == std::endian::little,
              "the GGUF reader copies little-endian fields verbatim");

namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint32_t kMaxDims = 4;             // GGML_MAX_DIMS
// Deep enough for any real file (tokenizers use one level); bounds recursion
// so a file of nested array headers cannot exhaust the stack.
constexpr int kMaxArrayDepth = 8;
// Smallest encodings, used to reject counts that cannot fit in the bytes left
// before reserving memory for them.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;            // key length, type, u8
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;  // name, n_dims, type, offset

bool isKnownValueType(uint32_t t) { return t <= 12; }

bool isIntegerType(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUInt8:
    case GgufValueType::kInt8:
    case GgufValueType::kUInt16:
    case GgufValueType::kInt16:
    case GgufValueType::kUInt32:
    case GgufValueType::kInt32:
    case GgufValueType::kUInt64:
    case GgufValueType::kInt64:
      return true;
    default:
      return false;
  }
}

bool isSignedType(GgufValueType t) {
  return t == GgufValueType::kInt8 || t == GgufValueType::kInt16 ||
         t == GgufValueType::kInt32 || t == GgufValueType::kInt64;
}

// Sign- or zero-extends one packed little-endian integer of type `t`.
// Returns {is_negative, magnitude-as-int64-or-uint64}.
struct WideInt {
  bool is_signed;
  int64_t s;
  uint64_t u;
};

WideInt loadInt(GgufValueType t, const uint8_t* p) {
  switch (t) {
    case GgufValueType::kUInt8: return {false, 0, p[0]};
    case GgufValueType::kInt8: return {true, static_cast<int8_t>(p[0]), 0};
    case GgufValueType::kUInt16: { uint16_t v; std::memcpy(&v, p, 2); return {false, 0, v}; }
    case GgufValueType::kInt16: { int16_t v; std::memcpy(&v, p, 2); return {true, v, 0}; }
    case GgufValueType::kUInt32: { uint32_t v; std::memcpy(&v, p, 4); return {false, 0, v}; }
    case GgufValueType::kInt32: { int32_t v; std::memcpy(&v, p, 4); return {true, v, 0}; }
    case GgufValueType::kUInt64: { uint64_t v; std::memcpy(&v, p, 8); return {false, 0, v}; }
    case GgufValueType::kInt64: { int64_t v; std::memcpy(&v, p, 8); return {true, v, 0}; }
    default: return {false, 0, 0};
  }
}

std::string describeInt(const WideInt& v) {
  return v.is_signed ? std::to_string(v.s) : std::to_string(v.u);
}

}  // namespace

std::string_view ggufValueTypeName(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUInt8: return "uint8";
    case GgufValueType::kInt8: return "int8";
    case GgufValueType::kUInt16: return "uint16";
    case GgufValueType::kInt16: return "int16";
    case GgufValueType::kUInt32: return "uint32";
    case GgufValueType::kInt32: return "int32";
    case GgufValueType::kFloat32: return "float32";
    case GgufValueType::kBool: return "bool";
    case GgufValueType::kString: return "string";
    case GgufValueType::kArray: return "array";
    case GgufValueType::kUInt64: return "uint64";
    case GgufValueType::kInt64: return "int64";
    case GgufValueType::kFloat64: return "float64";
  }
  return "unknown";
}

size_t ggufScalarBytes(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUInt8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool: return 1;
    case GgufValueType::kUInt16:
    case GgufValueType::kInt16: return 2;
    case GgufValueType::kUInt32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32: return 4;
    case GgufValueType::kUInt64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64: return 8;
    default: return 0;
  }
}

std::string GgufValue::typeName() const {
  if (type != GgufValueType::kArray) return std::string(ggufValueTypeName(type));
  if (array_type == GgufValueType::kArray) {
    // An empty nested array has no element to name its inner type by.
    if (array_values.empty()) return "array[array]";
    return fmt::format("array[{}]", array_values.front().typeName());
  }
  return fmt::format("array[{}]", ggufValueTypeName(array_type));
}

//===----------------------------------------------------------------------===//
// Parsing
//===----------------------------------------------------------------------===//

// A cursor over the file's bytes; every read names the field it is for so a
// truncation error says what was being read.
class GgufParser {
 public:
  explicit GgufParser(GgufFile& file) : f_(file), bytes_(file.bytes_) {}

  Status parse();

 private:
  uint64_t left() const { return bytes_.size() - pos_; }

  Status need(uint64_t n, std::string_view what) {
    if (n <= left()) return Status::success();
    return makeError("{}: {} at offset {} needs {} bytes, but the file ends at {}",
                     f_.path_, what, pos_, n, bytes_.size());
  }

  template <typename T>
  Result<T> read(std::string_view what) {
    KILN_RETURN_IF_ERROR(need(sizeof(T), what));
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  Result<std::string> readString(std::string_view what) {
    auto len = read<uint64_t>(what);
    if (!len) return len.error();
    if (*len > left())
      return makeError("{}: {} at offset {} has length {}, but only {} bytes are left in the file",
                       f_.path_, what, pos_ - 8, *len, left());
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), *len);
    pos_ += *len;
    return s;
  }

  Result<GgufValueType> readValueType(std::string_view what) {
    auto t = read<uint32_t>(what);
    if (!t) return t.error();
    if (!isKnownValueType(*t))
      return makeError("{}: {} is {}, expected a GGUF value type id 0..12", f_.path_,
                       what, *t);
    return static_cast<GgufValueType>(*t);
  }

  Result<GgufValue> readValue(GgufValueType type, const std::string& key, int depth);
  Status readArray(GgufValue& value, const std::string& key, int depth);
  Status readMetadata(uint64_t kv_count);
  Status readAlignment();
  Status readTensorInfos(uint64_t tensor_count);
  Status checkTensorData();

  GgufFile& f_;
  std::span<const uint8_t> bytes_;
  uint64_t pos_ = 0;
};

Result<GgufValue> GgufParser::readValue(GgufValueType type, const std::string& key,
                                        int depth) {
  GgufValue v;
  v.type = type;
  std::string what = fmt::format("metadata '{}' {} value", key, ggufValueTypeName(type));
  switch (type) {
    case GgufValueType::kFloat32: {
      auto x = read<float>(what);
      if (!x) return x.error();
      v.float_value = *x;
      break;
    }
    case GgufValueType::kFloat64: {
      auto x = read<double>(what);
      if (!x) return x.error();
      v.float_value = *x;
      break;
    }
    case GgufValueType::kBool: {
      auto x = read<uint8_t>(what);
      if (!x) return x.error();
      v.uint_value = *x != 0;
      break;
    }
    case GgufValueType::kString: {
      auto s = readString(what);
      if (!s) return s.error();
      v.string_value = s.take();
      break;
    }
    case GgufValueType::kArray:
      KILN_RETURN_IF_ERROR(readArray(v, key, depth));
      break;
    default: {  // integers
      size_t n = ggufScalarBytes(type);
      KILN_RETURN_IF_ERROR(need(n, what));
      WideInt w = loadInt(type, bytes_.data() + pos_);
      pos_ += n;
      if (w.is_signed)
        v.int_value = w.s;
      else
        v.uint_value = w.u;
      break;
    }
  }
  return v;
}

Status GgufParser::readArray(GgufValue& v, const std::string& key, int depth) {
  if (depth >= kMaxArrayDepth)
    return makeError("{}: metadata '{}': arrays nested deeper than {} levels", f_.path_,
                     key, kMaxArrayDepth);
  auto elem = readValueType(fmt::format("metadata '{}' array element type", key));
  if (!elem) return elem.error();
  auto count = read<uint64_t>(fmt::format("metadata '{}' array count", key));
  if (!count) return count.error();
  v.array_type = *elem;
  v.array_size = *count;

  uint64_t min_elem_bytes = *elem == GgufValueType::kString  ? 8
                            : *elem == GgufValueType::kArray ? 12
                                                             : ggufScalarBytes(*elem);
  if (*count > left() / min_elem_bytes)
    return makeError(
        "{}: metadata '{}' array count {} at offset {} needs at least {} bytes per "
        "{} element, but only {} bytes are left in the file",
        f_.path_, key, *count, pos_ - 8, min_elem_bytes, ggufValueTypeName(*elem),
        left());

  if (*elem == GgufValueType::kString) {
    v.array_strings.reserve(*count);
    for (uint64_t i = 0; i < *count; ++i) {
      auto s = readString(fmt::format("metadata '{}' string element {}", key, i));
      if (!s) return s.error();
      v.array_strings.push_back(s.take());
    }
  } else if (*elem == GgufValueType::kArray) {
    v.array_values.reserve(*count);
    for (uint64_t i = 0; i < *count; ++i) {
      auto inner = readValue(GgufValueType::kArray, fmt::format("{}[{}]", key, i), depth + 1);
      if (!inner) return inner.error();
      v.array_values.push_back(inner.take());
    }
  } else {
    uint64_t n = *count * min_elem_bytes;  // checked above against left()
    v.array_bytes.assign(bytes_.data() + pos_, bytes_.data() + pos_ + n);
    pos_ += n;
  }
  return Status::success();
}

Status GgufParser::readMetadata(uint64_t kv_count) {
  f_.keys_.reserve(kv_count);
  for (uint64_t i = 0; i < kv_count; ++i) {
    auto key = readString(fmt::format("metadata #{} key", i));
    if (!key) return key.error();
    const std::string shown = printable(*key);  // for messages only
    auto type = readValueType(fmt::format("metadata '{}' value type", shown));
    if (!type) return type.error();
    auto value = readValue(*type, shown, 0);
    if (!value) return value.error();
    if (f_.values_.count(*key) != 0)
      return makeError("{}: metadata key '{}' appears twice", f_.path_, shown);
    f_.values_.emplace(*key, value.take());
    f_.keys_.push_back(key.take());
  }
  return Status::success();
}

Status GgufParser::readAlignment() {
  const GgufValue* v = f_.find("general.alignment");
  if (v == nullptr) return Status::success();  // the default, 32
  auto a = f_.getUInt("general.alignment");
  if (!a) return a.error();
  if (*a == 0 || (*a & (*a - 1)) != 0 || *a > (uint64_t{1} << 30))
    return makeError("{}: general.alignment is {}, expected a power of two no larger than 2^30",
                     f_.path_, *a);
  f_.alignment_ = *a;
  return Status::success();
}

Status GgufParser::readTensorInfos(uint64_t tensor_count) {
  f_.tensors_.reserve(tensor_count);
  for (uint64_t i = 0; i < tensor_count; ++i) {
    auto name = readString(fmt::format("tensor #{} name", i));
    if (!name) return name.error();
    std::string ctx = fmt::format("tensor '{}'", printable(*name));
    auto n_dims = read<uint32_t>(ctx + " n_dims");
    if (!n_dims) return n_dims.error();
    if (*n_dims > kMaxDims)
      return makeError("{}: {}: n_dims is {}, expected at most {}", f_.path_, ctx, *n_dims,
                       kMaxDims);
    // ne[] is innermost-first; TensorInfo::shape is outermost-first.
    std::vector<int64_t> shape(*n_dims);
    for (uint32_t d = 0; d < *n_dims; ++d) {
      auto ne = read<uint64_t>(fmt::format("{} ne[{}]", ctx, d));
      if (!ne) return ne.error();
      if (*ne == 0 || *ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return makeError("{}: {}: ne[{}] is {}, expected a positive size", f_.path_, ctx, d,
                         *ne);
      shape[*n_dims - 1 - d] = static_cast<int64_t>(*ne);
    }
    auto type_id = read<uint32_t>(ctx + " type");
    if (!type_id) return type_id.error();
    auto offset = read<uint64_t>(ctx + " offset");
    if (!offset) return offset.error();

    auto type = elementTypeFromGgmlId(*type_id);
    if (!type)
      return makeError("{}: {}: unknown ggml type id {}", f_.path_, ctx, *type_id);
    auto count = numElements(shape);
    if (!count)
      return makeError("{}: {}: element count of shape {} overflows int64", f_.path_, ctx,
                       shapeToString(shape));
    // ggml packs each row (the innermost dim) into whole blocks.
    int64_t inner = shape.empty() ? 1 : shape.back();
    if (inner % blockSize(*type) != 0)
      return makeError("{}: {}: innermost dimension {} is not a multiple of the {} block size {}",
                       f_.path_, ctx, inner, elementTypeName(*type), blockSize(*type));
    auto size = bytesForElements(*type, *count);
    if (!size)
      return makeError("{}: {}: {}", f_.path_, ctx, size.error().message);
    if (f_.tensor_index_.count(*name) != 0)
      return makeError("{}: tensor name '{}' appears twice", f_.path_, printable(*name));

    TensorInfo info;
    info.name = name.take();
    info.shape = std::move(shape);
    info.type = *type;
    info.offset = *offset;  // relative for now; made absolute in checkTensorData
    info.size_bytes = *size;
    info.file = f_.path_;
    f_.tensor_index_.emplace(info.name, f_.tensors_.size());
    f_.tensors_.push_back(std::move(info));
  }
  return Status::success();
}

Status GgufParser::checkTensorData() {
  const uint64_t file_size = bytes_.size();
  for (TensorInfo& t : f_.tensors_) {
    if (t.offset % f_.alignment_ != 0)
      return makeError("{}: tensor '{}': offset {} is not a multiple of the alignment {}",
                       f_.path_, printable(t.name), t.offset, f_.alignment_);
    uint64_t begin = 0, end = 0;
    if (__builtin_add_overflow(f_.data_offset_, t.offset, &begin) ||
        __builtin_add_overflow(begin, t.size_bytes, &end) || end > file_size) {
      // Print in 128-bit so an overflowing range still reads correctly.
      unsigned __int128 b = static_cast<unsigned __int128>(f_.data_offset_) + t.offset;
      unsigned __int128 e = b + t.size_bytes;
      return makeError("{}: tensor '{}': data [{}, {}) extends past end of file ({} bytes)",
                       f_.path_, printable(t.name), fmt::to_string(b), fmt::to_string(e),
                       file_size);
    }
    t.offset = begin;
  }
  // Overlapping tensors mean a corrupt table (or aliasing no writer produces).
  std::vector<const TensorInfo*> by_offset;
  by_offset.reserve(f_.tensors_.size());
  for (const TensorInfo& t : f_.tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorInfo& a = *by_offset[i - 1];
    const TensorInfo& b = *by_offset[i];
    if (a.offset + a.size_bytes > b.offset)
      return makeError("{}: tensors '{}' [{}, {}) and '{}' [{}, {}) overlap", f_.path_,
                       printable(a.name), a.offset, a.offset + a.size_bytes, printable(b.name),
                       b.offset, b.offset + b.size_bytes);
  }
  return Status::success();
}

Status GgufParser::parse() {
  auto magic = read<uint32_t>("magic");
  if (!magic) return magic.error();
  if (*magic != kGgufMagic)
    return makeError("{}: bad magic 0x{:08x}, expected 'GGUF' (0x{:08x})", f_.path_, *magic,
                     kGgufMagic);
  auto version = read<uint32_t>("version");
  if (!version) return version.error();
  if (*version != 2 && *version != 3) {
    // A big-endian file's version reads byte-swapped (3 -> 0x03000000).
    bool swapped = *version == 0x02000000 || *version == 0x03000000;
    return makeError("{}: unsupported GGUF version {}, expected 2 or 3{}", f_.path_, *version,
                     swapped ? " (this looks like a big-endian file)" : "");
  }
  f_.version_ = *version;
  auto tensor_count = read<uint64_t>("tensor_count");
  if (!tensor_count) return tensor_count.error();
  auto kv_count = read<uint64_t>("kv_count");
  if (!kv_count) return kv_count.error();
  if (*tensor_count > left() / kMinTensorInfoBytes)
    return makeError(
        "{}: tensor_count {} is impossible: {} bytes left in the file hold at most {} tensor infos",
        f_.path_, *tensor_count, left(), left() / kMinTensorInfoBytes);
  if (*kv_count > left() / kMinKvBytes)
    return makeError(
        "{}: kv_count {} is impossible: {} bytes left in the file hold at most {} metadata entries",
        f_.path_, *kv_count, left(), left() / kMinKvBytes);

  f_.metadata_begin_ = pos_;
  KILN_RETURN_IF_ERROR(readMetadata(*kv_count));
  f_.metadata_end_ = pos_;
  KILN_RETURN_IF_ERROR(readAlignment());
  KILN_RETURN_IF_ERROR(readTensorInfos(*tensor_count));
  // pos_ <= file size and alignment <= 2^30, so this cannot overflow.
  f_.data_offset_ = (pos_ + f_.alignment_ - 1) / f_.alignment_ * f_.alignment_;
  return checkTensorData();
}

//===----------------------------------------------------------------------===//
// GgufFile
//===----------------------------------------------------------------------===//

Result<GgufFile> GgufFile::open(const std::string& path) {
  auto mapping = MappedFile::open(path);
  if (!mapping) return mapping.error();
  GgufFile file;
  file.path_ = path;
  file.mapping_ = std::make_unique<MappedFile>(mapping.take());
  file.bytes_ = file.mapping_->bytes();
  GgufParser parser(file);
  KILN_RETURN_IF_ERROR(parser.parse());
  return file;
}

Result<GgufFile> GgufFile::openBuffer(std::span<const uint8_t> bytes, std::string name) {
  GgufFile file;
  file.path_ = std::move(name);
  file.bytes_ = bytes;
  GgufParser parser(file);
  KILN_RETURN_IF_ERROR(parser.parse());
  return file;
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = values_.find(key);
  return it == values_.end() ? nullptr : &it->second;
}

namespace {

Error missingKey(const std::string& path, std::string_view key) {
  return makeError("{}: metadata '{}' not found", path, printable(key));
}

Error wrongType(const std::string& path, std::string_view key, const GgufValue& v,
                std::string_view expected) {
  return makeError("{}: metadata '{}' is {}, expected {}", path, printable(key), v.typeName(),
                   expected);
}

}  // namespace

Result<uint64_t> GgufFile::getUInt(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return missingKey(path_, key);
  if (!isIntegerType(v->type)) return wrongType(path_, key, *v, "an unsigned integer");
  if (isSignedType(v->type)) {
    if (v->int_value < 0)
      return makeError("{}: metadata '{}' is {} ({}), expected a non-negative integer", path_,
                       printable(key), v->int_value, v->typeName());
    return static_cast<uint64_t>(v->int_value);
  }
  return v->uint_value;
}

Result<int64_t> GgufFile::getInt(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return missingKey(path_, key);
  if (!isIntegerType(v->type)) return wrongType(path_, key, *v, "an integer");
  if (isSignedType(v->type)) return v->int_value;
  if (v->uint_value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return makeError("{}: metadata '{}' is {} (uint64), expected a value that fits int64",
                     path_, printable(key), v->uint_value);
  return static_cast<int64_t>(v->uint_value);
}

Result<double> GgufFile::getFloat(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return missingKey(path_, key);
  if (v->type != GgufValueType::kFloat32 && v->type != GgufValueType::kFloat64)
    return wrongType(path_, key, *v, "float32 or float64");
  return v->float_value;
}

Result<bool> GgufFile::getBool(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return missingKey(path_, key);
  if (v->type != GgufValueType::kBool) return wrongType(path_, key, *v, "bool");
  return v->uint_value != 0;
}

Result<std::string> GgufFile::getString(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return missingKey(path_, key);
  if (v->type != GgufValueType::kString) return wrongType(path_, key, *v, "string");
  return v->string_value;
}

Result<std::vector<std::string>> GgufFile::getStringArray(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return missingKey(path_, key);
  if (v->type != GgufValueType::kArray || v->array_type != GgufValueType::kString)
    return wrongType(path_, key, *v, "array[string]");
  return v->array_strings;
}

Result<std::vector<float>> GgufFile::getFloatArray(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return missingKey(path_, key);
  if (v->type != GgufValueType::kArray ||
      (v->array_type != GgufValueType::kFloat32 && v->array_type != GgufValueType::kFloat64))
    return wrongType(path_, key, *v, "array[float32] or array[float64]");
  std::vector<float> out(v->array_size);
  const uint8_t* p = v->array_bytes.data();
  for (uint64_t i = 0; i < v->array_size; ++i) {
    if (v->array_type == GgufValueType::kFloat32) {
      std::memcpy(&out[i], p + 4 * i, 4);
    } else {
      double d;
      std::memcpy(&d, p + 8 * i, 8);
      out[i] = static_cast<float>(d);
    }
  }
  return out;
}

Result<std::vector<int32_t>> GgufFile::getIntArray(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return missingKey(path_, key);
  if (v->type != GgufValueType::kArray || !isIntegerType(v->array_type))
    return wrongType(path_, key, *v, "an integer array");
  size_t width = ggufScalarBytes(v->array_type);
  std::vector<int32_t> out(v->array_size);
  for (uint64_t i = 0; i < v->array_size; ++i) {
    WideInt w = loadInt(v->array_type, v->array_bytes.data() + width * i);
    bool fits = w.is_signed ? (w.s >= std::numeric_limits<int32_t>::min() &&
                               w.s <= std::numeric_limits<int32_t>::max())
                            : w.u <= static_cast<uint64_t>(std::numeric_limits<int32_t>::max());
    if (!fits)
      return makeError("{}: metadata '{}' element {} is {}, expected a value that fits int32",
                       path_, printable(key), i, describeInt(w));
    out[i] = w.is_signed ? static_cast<int32_t>(w.s) : static_cast<int32_t>(w.u);
  }
  return out;
}

const TensorInfo* GgufFile::findTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::span<const uint8_t> GgufFile::tensorData(const TensorInfo& tensor) const {
  // Infos from another file (or hand-made ones) must not read out of bounds.
  if (tensor.offset > bytes_.size() || tensor.size_bytes > bytes_.size() - tensor.offset)
    return {};
  return bytes_.subspan(tensor.offset, tensor.size_bytes);
}

}  // namespace kiln::formats
