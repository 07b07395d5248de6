#include "runtime/weights/weight_store.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <tuple>

#include "runtime/numerics/quant.h"
#include "runtime/support/content_hash.h"
#include "runtime/weights/sparse24.h"
#include "runtime/weights/weight_quantization.h"

namespace kiln {

namespace fs = std::filesystem;
using formats::ElementType;

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::optional<ElementType> parseManifestType(const std::string& name) {
  std::string upper = name;
  for (char& c : upper) c = char(std::toupper(static_cast<unsigned char>(c)));
  return formats::parseElementTypeName(upper);
}

std::optional<WeightType> kernelType(ElementType type) {
  switch (type) {
    case ElementType::F32: return WeightType::F32;
    case ElementType::F16: return WeightType::F16;
    case ElementType::BF16: return WeightType::BF16;
    case ElementType::Q4_0: return WeightType::Q4_0;
    case ElementType::Q4_1: return WeightType::Q4_1;
    case ElementType::Q8_0: return WeightType::Q8_0;
    case ElementType::Q4_K: return WeightType::Q4_K;
    case ElementType::Q5_K: return WeightType::Q5_K;
    case ElementType::Q6_K: return WeightType::Q6_K;
    default: return std::nullopt;
  }
}

Result<int64_t> elementCount(const std::vector<int64_t>& shape) {
  auto n = formats::numElements(shape);
  if (!n) return makeError("shape {} overflows", formats::shapeToString(shape));
  return *n;
}

}  // namespace

Result<SourceStamp> sourceStamp(const std::string& path) {
  std::error_code ec;
  auto fileStamp = [](const std::string& file, std::string name) -> Result<SourceFileStamp> {
    struct stat st{};
    if (::stat(file.c_str(), &st) != 0)
      return makeError("{}: cannot stat: {}", file, std::strerror(errno));
    auto hash = sampledContentHash(file);
    if (!hash.ok()) return hash.error();
    return SourceFileStamp{std::move(name), uint64_t(st.st_size), int64_t(st.st_mtime), hash.take()};
  };
  if (!fs::is_directory(path, ec)) {
    auto stamp = fileStamp(path, fs::path(path).filename().string());
    if (!stamp.ok()) return stamp.error();
    return SourceStamp{stamp->size, stamp->mtime, {*stamp}};
  }
  SourceStamp total;
  std::vector<std::string> files;
  // The files that make the checkpoint (kiln-compile counts the same ones).
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    const fs::path& file = entry.path();
    if (file.extension() == ".safetensors" || file.filename() == "config.json" ||
        file.filename() == "model.safetensors.index.json")
      files.push_back(file.string());
  }
  if (ec) return makeError("{}: cannot list the checkpoint directory: {}", path, ec.message());
  std::sort(files.begin(), files.end());
  for (const std::string& file : files) {
    auto stamp = fileStamp(file, fs::path(file).filename().string());
    if (!stamp.ok()) return stamp.error();
    total.size += stamp->size;
    total.mtime = std::max(total.mtime, stamp->mtime);
    total.files.push_back(stamp.take());
  }
  return total;
}

namespace {

// Each file the manifest lists against the model as it is now; the error
// names the file and both hashes.
Status checkSourceFiles(const Manifest& manifest, const std::string& source_path, const SourceStamp& now) {
  for (const ManifestSourceFile& then : manifest.model.source_files) {
    auto it = std::find_if(now.files.begin(), now.files.end(),
                           [&](const SourceFileStamp& f) { return f.file == then.file; });
    const std::string file =
        fs::is_directory(source_path) ? (fs::path(source_path) / then.file).string() : source_path;
    if (it == now.files.end())
      return makeError("{}: model.source file {} is gone since the artifact was compiled: recompile it with "
                       "kiln-compile",
                       manifest.path, file);
    if (it->sampled_hash != then.sampled_hash || it->size != then.size || it->mtime != then.mtime)
      return makeError("{}: model.source file {} changed since the artifact was compiled: its sampled content "
                       "hash is {} (size {} bytes, mtime {}), the manifest records {} (size {} bytes, mtime {}): "
                       "recompile it with kiln-compile",
                       manifest.path, file, it->sampled_hash, it->size, it->mtime, then.sampled_hash, then.size,
                       then.mtime);
  }
  return Status::success();
}

}  // namespace

const BoundWeight* WeightStore::find(int64_t id) const {
  auto it = std::lower_bound(weights_.begin(), weights_.end(), id,
                             [](const BoundWeight& w, int64_t v) { return w.id < v; });
  return it != weights_.end() && it->id == id ? &*it : nullptr;
}

Result<WeightStore> WeightStore::open(const Manifest& manifest, const WeightStoreOptions& options) {
  const std::string& mpath = manifest.path;
  const std::string source_path =
      options.source_path.empty() ? manifest.model.source : options.source_path;
  if (options.check_source_stamp) {
    auto stamp = sourceStamp(source_path);
    if (!stamp.ok())
      return makeError("{}: model.source: {}", mpath, stamp.error().message);
    KILN_RETURN_IF_ERROR(checkSourceFiles(manifest, source_path, *stamp));
    if (stamp->size != manifest.model.source_size || stamp->mtime != manifest.model.source_mtime)
      return makeError("{}: model.source {} changed since the artifact was compiled (size {} "
                       "bytes, mtime {}; the manifest expects size {} bytes, mtime {}): "
                       "recompile it with kiln-compile",
                       mpath, source_path, stamp->size, stamp->mtime, manifest.model.source_size,
                       manifest.model.source_mtime);
  }
  auto source = formats::ModelSource::open(source_path, formats::OpenMode::kWithData);
  if (!source.ok()) return makeError("{}: model.source: {}", mpath, source.error().message);

  WeightStore store;
  store.source_.emplace(source.take());
  const formats::ModelSource& src = *store.source_;

  // Weights that some step reads directly: these must end in a kernel type.
  std::set<int64_t> used;
  for (const auto& [name, entry] : manifest.entries)
    for (const Step& step : entry.steps)
      for (const StepArg& arg : step.args)
        if (arg.kind == StepArg::Kind::kWeight) used.insert(arg.id);

  store.weights_.resize(manifest.weights.size());
  // 0 = not yet bound, 1 = binding (cycle check), 2 = bound.
  std::vector<int> state(manifest.weights.size(), 0);
  auto indexOf = [&](int64_t id) -> size_t {
    const ManifestWeight* w = manifest.findWeight(id);
    return size_t(w - manifest.weights.data());
  };

  std::function<Status(size_t)> bind;

  // A load-time preparation's input, bound and joined, as an f32 matrix
  // (GGUF blocks dequantized where `blocks_allowed`).
  auto floatMatrix = [&](int64_t input, const std::string& where, const char* op,
                         bool blocks_allowed) -> Result<std::vector<float>> {
    KILN_RETURN_IF_ERROR(bind(indexOf(input)));
    store.join(store.weights_[indexOf(input)]);  // the preparation reads it whole
    const BoundWeight& ib = store.weights_[indexOf(input)];
    auto ktype = kernelType(ib.format_type);
    if (ib.shape.size() != 2 || !ktype || ib.sparse24 || (!blocks_allowed && isQuantized(*ktype)))
      return makeError("{}: {} input {} '{}' must be a float{} matrix, got {} {}", where, op, input, ib.name,
                       blocks_allowed ? " or GGUF block" : "", lower(formats::elementTypeName(ib.format_type)),
                       formats::shapeToString(ib.shape));
    std::vector<float> values(size_t(ib.shape[0] * ib.shape[1]));
    KILN_RETURN_IF_ERROR(dequantizeRow(*ktype, ib.data, values.data(), int64_t(values.size())));
    return values;
  };
  // Result 1 of a quantize: the scheme's scales, f32 in the manifest's shape.
  auto bindScales = [&](const ManifestWeight& mw, BoundWeight& bw, const std::string& where,
                        const std::vector<float>& scales) -> Status {
    auto count = elementCount(mw.shape);
    if (!count.ok() || uint64_t(*count) != scales.size())
      return makeError("{}: the scales have {} values, the manifest shape {} holds {}", where, scales.size(),
                       formats::shapeToString(mw.shape), count.ok() ? *count : -1);
    auto buffer = std::make_unique<uint8_t[]>(scales.size() * sizeof(float));
    std::memcpy(buffer.get(), scales.data(), scales.size() * sizeof(float));
    bw.data = buffer.get();
    bw.size_bytes = scales.size() * sizeof(float);
    bw.format_type = ElementType::F32;
    store.owned_.push_back(std::move(buffer));
    return {};
  };

  // `quantize` preparations (kiln's int8/int4/fp8 schemes): the float input is
  // quantized once per (input, scheme, group) into the CPU kernels' block
  // layout (weight_quantization.h); result 0 binds the packed weight (its
  // scales folded into the blocks), result 1 the scales themselves.
  struct Quantized {
    QuantizedWeight weight;
    const uint8_t* packed = nullptr;  // weight.packed, once moved into the store
  };
  std::map<std::tuple<int64_t, std::string, int64_t>, Quantized> quantized;

  // 2:4 sparse weights (sparse24.h): `sparsify` compresses its input (float
  // or GGUF blocks, dequantized) into f32 kept values; `quantize` with
  // int8sp24 / int4sp24 quantizes a sparsify's kept values once per (input,
  // scheme, group), keeping its metadata; result 1 binds the scales.
  std::map<int64_t, Sparse24Matrix> compressed;  // sparsify weight id -> its matrix
  struct PackedSparse {
    PackedSparse24 weight;
    const uint8_t* bytes = nullptr;  // weight.data, once moved into the store
  };
  std::map<std::tuple<int64_t, std::string, int64_t>, PackedSparse> packed_sparse;
  auto bindSparse = [&](const ManifestWeight& mw, BoundWeight& bw, const std::string& where, int64_t input,
                        const std::string& scheme, int64_t group) -> Status {
    const Sparse24Matrix* matrix = nullptr;
    if (scheme == "sp24") {
      auto dense = floatMatrix(input, where, "sparsify", /*blocks_allowed=*/true);
      if (!dense.ok()) return dense.error();
      const BoundWeight& ib = store.weights_[indexOf(input)];
      auto m = compressSparse24(dense->data(), ib.shape[0], ib.shape[1], mw.prepare->method, ib.name);
      if (!m.ok()) return makeError("{}: {}", where, m.error().message);
      matrix = &compressed.emplace(mw.id, m.take()).first->second;
    } else {
      KILN_RETURN_IF_ERROR(bind(indexOf(input)));
      auto it = compressed.find(input);
      if (it == compressed.end())
        return makeError("{}: quantize to {} takes a sparsify's result, got weight {} '{}'", where, scheme,
                         input, store.weights_[indexOf(input)].name);
      matrix = &it->second;
    }
    auto key = std::make_tuple(input, scheme, group);
    auto it = packed_sparse.find(key);
    if (it == packed_sparse.end()) {
      auto packed = packSparse24(*matrix, scheme, group);
      if (!packed.ok()) return makeError("{}: {}", where, packed.error().message);
      PackedSparse entry{packed.take()};
      entry.bytes = entry.weight.data.get();
      store.owned_.push_back(std::move(entry.weight.data));
      it = packed_sparse.emplace(key, std::move(entry)).first;
    }
    const PackedSparse24& packed = it->second.weight;
    bw.id = mw.id;
    bw.name = mw.name;
    bw.shape = mw.shape;
    if (mw.prepare->result == 1) return bindScales(mw, bw, where, packed.scales);
    bw.data = it->second.bytes;
    bw.size_bytes = packed.bytes;
    bw.format_type = packed.values_type;
    bw.sparse24 = true;
    bw.sparse_meta_offset = packed.meta_offset;
    return {};
  };

  auto bindQuantized = [&](const ManifestWeight& mw, BoundWeight& bw,
                           const std::string& where) -> Status {
    const WeightPrepare& prep = *mw.prepare;
    if (prep.inputs.size() != 1)
      return makeError("{}: quantize takes one input, got {}", where, prep.inputs.size());
    const int64_t input = prep.inputs[0];
    if (prep.scheme == "int8sp24" || prep.scheme == "int4sp24")
      return bindSparse(mw, bw, where, input, prep.scheme, prep.group);
    auto key = std::make_tuple(input, prep.scheme, prep.group);
    auto it = quantized.find(key);
    if (it == quantized.end()) {
      auto values = floatMatrix(input, where, "quantize", /*blocks_allowed=*/false);
      if (!values.ok()) return values.error();
      const BoundWeight& ib = store.weights_[indexOf(input)];
      auto q = quantizeWeight(prep.scheme, prep.group, values->data(), ib.shape[0], ib.shape[1]);
      if (!q.ok()) return makeError("{}: {}", where, q.error().message);
      Quantized entry{q.take()};
      entry.packed = entry.weight.packed.get();
      store.owned_.push_back(std::move(entry.weight.packed));
      it = quantized.emplace(key, std::move(entry)).first;
    }
    const QuantizedWeight& q = it->second.weight;
    bw.id = mw.id;
    bw.name = mw.name;
    bw.shape = mw.shape;
    if (prep.result == 1) return bindScales(mw, bw, where, q.scales);
    bw.data = it->second.packed;
    bw.size_bytes = q.packed_bytes;
    bw.format_type = q.packed_type;
    return {};
  };

  // Binds weight `i` (and, first, the weights it is prepared from).
  bind = [&](size_t i) -> Status {
    const ManifestWeight& mw = manifest.weights[i];
    BoundWeight& bw = store.weights_[i];
    if (state[i] == 2) return {};
    const std::string where = fmt::format("{}: weight {} '{}'", mpath, mw.id, mw.name);
    if (state[i] == 1) return makeError("{}: its preparation depends on itself", where);
    state[i] = 1;
    bw.id = mw.id;
    bw.name = mw.name;
    bw.shape = mw.shape;
    if (mw.prepare && mw.prepare->op == "quantize") {
      KILN_RETURN_IF_ERROR(bindQuantized(mw, bw, where));
      state[i] = 2;
      return {};
    }
    if (mw.prepare && mw.prepare->op == "sparsify") {
      KILN_RETURN_IF_ERROR(bindSparse(mw, bw, where, mw.prepare->inputs.at(0), "sp24", 0));
      state[i] = 2;
      return {};
    }
    auto type = parseManifestType(mw.type);
    if (!type) return makeError("{}: unknown type '{}'", where, mw.type);
    bw.format_type = *type;
    auto numel = elementCount(mw.shape);
    if (!numel.ok()) return makeError("{}: {}", where, numel.error().message);
    auto bytes = formats::bytesForElements(*type, *numel);
    if (!bytes.ok()) return makeError("{}: {}", where, bytes.error().message);

    if (mw.source) {
      const formats::TensorInfo* tensor = src.findTensor(*mw.source);
      if (!tensor)
        return makeError("{}: tensor '{}' is not in {}", where, *mw.source, source_path);
      if (tensor->type != *type)
        return makeError("{}: tensor '{}' has type {} in the model, the manifest expects {}",
                         where, *mw.source, lower(formats::elementTypeName(tensor->type)),
                         mw.type);
      if (tensor->shape != mw.shape)
        return makeError("{}: tensor '{}' has shape {} in the model, the manifest expects {}",
                         where, *mw.source, formats::shapeToString(tensor->shape),
                         formats::shapeToString(mw.shape));
      auto data = src.tensorData(*tensor);
      if (!data.ok()) return makeError("{}: {}", where, data.error().message);
      if (data->size() != *bytes)
        return makeError("{}: tensor '{}' holds {} bytes, expected {}", where, *mw.source,
                         data->size(), *bytes);
      bw.data = data->data();
      bw.size_bytes = data->size();
    } else if (mw.prepare->op == "concat_rows") {
      // Row-major [rows, ...inner] tensors of one type: the result's bytes are
      // the inputs' bytes back to back, as long as each row is whole blocks.
      if (mw.shape.empty()) return makeError("{}: concat_rows needs a result of rank >= 1", where);
      std::vector<int64_t> inner(mw.shape.begin() + 1, mw.shape.end());
      int64_t row_elems = *elementCount(inner);
      if (row_elems % formats::blockSize(*type) != 0)
        return makeError("{}: concat_rows of {} rows of {} elements is not whole {}-element "
                         "blocks",
                         where, mw.type, row_elems, formats::blockSize(*type));
      int64_t rows = 0;
      for (int64_t input : mw.prepare->inputs) {
        const ManifestWeight* in = manifest.findWeight(input);
        KILN_RETURN_IF_ERROR(bind(indexOf(input)));
        const BoundWeight& ib = store.weights_[indexOf(input)];
        if (ib.format_type != *type)
          return makeError("{}: concat_rows input {} '{}' has type {}, expected {}", where,
                           input, in->name, in->type, mw.type);
        // An input of the row shape itself is one row (an expert stacked
        // into [experts, ...]).
        const bool one_row = ib.shape == inner;
        if (!one_row && (ib.shape.empty() ||
                         !std::equal(ib.shape.begin() + 1, ib.shape.end(), inner.begin(), inner.end())))
          return makeError("{}: concat_rows input {} '{}' has shape {}, expected rows of shape {}",
                           where, input, in->name, formats::shapeToString(ib.shape),
                           formats::shapeToString(inner));
        rows += one_row ? 1 : ib.shape[0];
      }
      if (rows != mw.shape[0])
        return makeError("{}: concat_rows inputs have {} rows in all, the result has {}", where,
                         rows, mw.shape[0]);
      uint64_t at = 0;
      bw.parts.clear();
      for (int64_t input : mw.prepare->inputs) {
        const BoundWeight& ib = store.weights_[indexOf(input)];
        bw.parts.emplace_back(ib.data, ib.size_bytes);
        at += ib.size_bytes;
      }
      if (at != *bytes)
        return makeError("{}: concat_rows produced {} bytes, expected {}", where, at, *bytes);
      bw.data = nullptr;
      bw.size_bytes = *bytes;
    } else if (mw.prepare->op == "offset") {
      // f32(w) + value in f32, as gemma's norm computes 1 + w.float().
      const int64_t input = mw.prepare->inputs[0];
      KILN_RETURN_IF_ERROR(bind(indexOf(input)));
      BoundWeight& ib = store.weights_[indexOf(input)];
      store.join(ib);
      auto itype = kernelType(ib.format_type);
      if (*type != ElementType::F32 || !itype ||
          (*itype != WeightType::F32 && *itype != WeightType::F16 && *itype != WeightType::BF16))
        return makeError("{}: offset makes f32 from an f32, f16 or bf16 weight; input {} '{}' is {}, the result {}",
                         where, input, ib.name, lower(formats::elementTypeName(ib.format_type)), mw.type);
      if (ib.shape != mw.shape)
        return makeError("{}: offset input {} has shape {}, the result {}", where, input,
                         formats::shapeToString(ib.shape), formats::shapeToString(mw.shape));
      auto buffer = std::make_unique<uint8_t[]>(*bytes);
      float* out = reinterpret_cast<float*>(buffer.get());
      KILN_RETURN_IF_ERROR(dequantizeRow(*itype, ib.data, out, *numel));
      const float value = float(mw.prepare->value);
      for (int64_t e = 0; e < *numel; ++e) out[e] += value;
      bw.data = buffer.get();
      bw.size_bytes = *bytes;
      store.owned_.push_back(std::move(buffer));
    } else if (mw.prepare->op == "slice") {
      // A tensor-parallel rank's share: entries offset .. offset + size
      // along axis, each run of them whole blocks. One run (rows of a
      // row-major tensor) is a view of the input; several (columns) are
      // gathered into one buffer.
      const WeightPrepare& prep = *mw.prepare;
      const int64_t input = prep.inputs[0];
      KILN_RETURN_IF_ERROR(bind(indexOf(input)));
      BoundWeight& ib = store.weights_[indexOf(input)];
      store.join(ib);
      if (ib.format_type != *type || ib.sparse24)
        return makeError("{}: slice input {} '{}' is {}{}, expected {}", where, input, ib.name,
                         lower(formats::elementTypeName(ib.format_type)), ib.sparse24 ? " (2:4 sparse)" : "",
                         mw.type);
      const int64_t rank = int64_t(ib.shape.size());
      if (prep.axis < 0 || prep.axis >= rank || prep.offset < 0 || prep.size < 1 ||
          prep.offset + prep.size > ib.shape[size_t(prep.axis)])
        return makeError("{}: slice of entries {} .. {} along axis {} of input {} of shape {}", where,
                         prep.offset, prep.offset + prep.size, prep.axis, input, formats::shapeToString(ib.shape));
      std::vector<int64_t> expected = ib.shape;
      expected[size_t(prep.axis)] = prep.size;
      if (expected != mw.shape)
        return makeError("{}: slice of input {} gives shape {}, the manifest expects {}", where, input,
                         formats::shapeToString(expected), formats::shapeToString(mw.shape));
      int64_t outer = 1, inner = 1;
      for (int64_t d = 0; d < prep.axis; ++d) outer *= ib.shape[size_t(d)];
      for (int64_t d = prep.axis + 1; d < rank; ++d) inner *= ib.shape[size_t(d)];
      auto run = formats::bytesForElements(*type, prep.size * inner);
      auto skip = formats::bytesForElements(*type, prep.offset * inner);
      auto stride = formats::bytesForElements(*type, ib.shape[size_t(prep.axis)] * inner);
      if (!run.ok() || !skip.ok() || !stride.ok())
        return makeError("{}: slice of entries {} .. {} along axis {} is not whole {}-element blocks of {}", where,
                         prep.offset, prep.offset + prep.size, prep.axis, formats::blockSize(*type), mw.type);
      if (outer == 1) {
        bw.data = ib.data + *skip;
        bw.size_bytes = *run;
      } else {
        auto buffer = std::make_unique<uint8_t[]>(size_t(outer) * *run);
        for (int64_t o = 0; o < outer; ++o)
          std::memcpy(buffer.get() + o * *run, ib.data + o * *stride + *skip, *run);
        bw.data = buffer.get();
        bw.size_bytes = uint64_t(outer) * *run;
        store.owned_.push_back(std::move(buffer));
      }
    } else {
      return makeError("{}: prepare op '{}' (scheme {}) is not supported by the CPU backend "
                       "(supported: concat_rows, offset, quantize, sparsify, slice)",
                       where, mw.prepare->op, mw.prepare->scheme);
    }

    state[i] = 2;
    return {};
  };
  for (size_t i = 0; i < manifest.weights.size(); ++i) KILN_RETURN_IF_ERROR(bind(i));
  if (!options.defer_concat) store.materializeConcats();

  // Second pass, once every preparation has read its inputs' raw bytes: the
  // weights steps read, in the kernels' types.
  for (size_t i = 0; i < manifest.weights.size(); ++i) {
    const ManifestWeight& mw = manifest.weights[i];
    BoundWeight& bw = store.weights_[i];
    const std::string where = fmt::format("{}: weight {} '{}'", mpath, mw.id, mw.name);
    const int64_t numel = *elementCount(mw.shape);
    if (!used.count(mw.id)) continue;
    auto ktype = kernelType(bw.format_type);
    if (!ktype)
      return makeError("{}: type {} is not supported by the CPU backend (supported: f32, f16, "
                       "bf16, q4_0, q4_1, q8_0, q4_k, q5_k, q6_k)",
                       where, mw.type);
    if ((*ktype == WeightType::F16 || *ktype == WeightType::BF16) &&
        mw.shape.size() <= 1) {
      // Norm weights and biases: the kernels read them as f32.
      auto buffer = std::make_unique<uint8_t[]>(size_t(numel) * 4);
      KILN_RETURN_IF_ERROR(
          dequantizeRow(*ktype, bw.data, reinterpret_cast<float*>(buffer.get()), numel));
      bw.data = buffer.get();
      bw.size_bytes = uint64_t(numel) * 4;
      bw.format_type = ElementType::F32;
      *ktype = WeightType::F32;
      store.owned_.push_back(std::move(buffer));
    }
    bw.type = *ktype;
    bw.kernel_ready = true;
  }
  return store;
}

void WeightStore::materializeConcats() {
  for (BoundWeight& bw : weights_) join(bw);
}

Result<std::span<uint8_t>> WeightStore::writableData(int64_t id) {
  auto it = std::lower_bound(weights_.begin(), weights_.end(), id,
                             [](const BoundWeight& w, int64_t v) { return w.id < v; });
  if (it == weights_.end() || it->id != id) return makeError("weight {} is not in the store", id);
  BoundWeight& bw = *it;
  join(bw);
  if (!writable_.count(id)) {
    auto buffer = std::make_unique<uint8_t[]>(bw.size_bytes);
    std::memcpy(buffer.get(), bw.data, bw.size_bytes);
    bw.data = buffer.get();
    owned_.push_back(std::move(buffer));
    writable_.insert(id);
  }
  return std::span<uint8_t>(const_cast<uint8_t*>(bw.data), bw.size_bytes);
}

void WeightStore::join(BoundWeight& bw) {
  if (bw.data || bw.parts.empty()) return;
  auto buffer = std::make_unique<uint8_t[]>(bw.size_bytes);
  uint64_t at = 0;
  for (std::span<const uint8_t> part : bw.parts) {
    std::memcpy(buffer.get() + at, part.data(), part.size());
    at += part.size();
  }
  bw.data = buffer.get();
  bw.parts.clear();
  owned_.push_back(std::move(buffer));
}

}  // namespace kiln
