// The GGUF form of a written model (quantized_model.h): the source's
// header entries copied byte for byte, a few added, and every tensor in the
// source's order with its new type and bytes where the model changed it.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "models/quantize/quantized_model.h"

namespace kiln::quantize {
namespace {

using formats::ElementType;

class GgufOut {
 public:
  explicit GgufOut(std::ofstream& out) : out_(out) {}
  void u32(uint32_t v) { raw(&v, 4); }
  void u64(uint64_t v) { raw(&v, 8); }
  void str(const std::string& s) {
    u64(s.size());
    raw(s.data(), s.size());
  }
  void raw(const void* data, size_t n) {
    out_.write(static_cast<const char*>(data), std::streamsize(n));
    at_ += n;
  }
  void padTo(uint64_t alignment) {
    static const char zeros[256] = {};
    while (at_ % alignment != 0) raw(zeros, size_t(std::min<uint64_t>(256, alignment - at_ % alignment)));
  }
  uint64_t at() const { return at_; }

 private:
  std::ofstream& out_;
  uint64_t at_ = 0;
};

struct OutTensor {
  const formats::TensorInfo* info;
  ElementType type;
  std::vector<uint8_t> owned;        // new bytes, or empty
  std::span<const uint8_t> bytes;    // what is written
};

// A metadata entry the written model adds: its key, then its type and value.
struct AddedEntry {
  std::string key;
  std::function<void(GgufOut&)> write;
};

AddedEntry stringEntry(std::string key, std::string value) {
  return {std::move(key), [value = std::move(value)](GgufOut& out) {
            out.u32(8);  // string
            out.str(value);
          }};
}

// kiln.quantization.* for int4 linears, kiln.sparsity.* for pruned ones,
// nothing for a dequantized copy.
std::vector<AddedEntry> addedEntries(const QuantizedModel& model) {
  if (model.method == "sparsegpt")
    return {stringEntry("kiln.sparsity.method", model.method), stringEntry("kiln.sparsity.pattern", "2:4")};
  if (!model.int4()) return {};
  const uint32_t group = uint32_t(model.grid.group);
  const uint8_t sym = model.grid.sym ? 1 : 0;
  return {stringEntry("kiln.quantization.method", model.method),
          {"kiln.quantization.group_size",
           [group](GgufOut& out) {
             out.u32(4);  // uint32
             out.u32(group);
           }},
          {"kiln.quantization.sym", [sym](GgufOut& out) {
             out.u32(7);  // bool
             out.raw(&sym, 1);
           }}};
}

}  // namespace

Status writeQuantizedGguf(const formats::GgufFile& source, const QuantizedModel& model,
                          const std::string& path) {
  const formats::GgufFile* gguf = &source;
  const std::vector<AddedEntry> added = addedEntries(model);
  for (const AddedEntry& entry : added)
    if (gguf->find(entry.key))
      return makeError("{}: metadata '{}' is already there: the model was {} by kiln before",
                       source.path(), entry.key, model.int4() ? "quantized" : "pruned");

  std::vector<OutTensor> tensors;
  for (const formats::TensorInfo& t : gguf->tensors()) {
    OutTensor o{&t, t.type, {}, gguf->tensorData(t)};
    if (auto it = model.linears.find(t.name); it != model.linears.end()) {
      o.type = model.grid.sym ? ElementType::Q4_0 : ElementType::Q4_1;
      auto packed = formats::packInt4For(it->second, o.type, model.grid.group, t.name);
      if (!packed.ok()) return packed.error();
      o.owned = packed.take();
    } else if (auto f = model.floats.find(t.name); f != model.floats.end()) {
      o.type = ElementType::F32;
      o.owned.resize(f->second.size() * 4);
      std::memcpy(o.owned.data(), f->second.data(), o.owned.size());
    }
    if (!o.owned.empty()) o.bytes = o.owned;
    auto want = formats::bytesForElements(o.type, *formats::numElements(t.shape));
    if (!want.ok() || *want != o.bytes.size())
      return makeError("{}: tensor '{}' has {} bytes of {}, expected {}", path, t.name,
                       o.bytes.size(), formats::elementTypeName(o.type), want.ok() ? *want : 0);
    tensors.push_back(std::move(o));
  }

  const std::string part = path + ".part";
  std::ofstream file(part, std::ios::binary | std::ios::trunc);
  if (!file) return makeError("{}: cannot write", part);
  GgufOut out(file);
  const uint64_t alignment = gguf->alignment();
  out.u32(0x46554747);  // "GGUF"
  out.u32(3);
  out.u64(tensors.size());
  out.u64(gguf->metadataKeys().size() + added.size());
  const std::span<const uint8_t> entries = gguf->metadataBytes();
  out.raw(entries.data(), entries.size());
  for (const AddedEntry& entry : added) {
    out.str(entry.key);
    entry.write(out);
  }
  uint64_t offset = 0;
  for (const OutTensor& t : tensors) {
    out.str(t.info->name);
    out.u32(uint32_t(t.info->shape.size()));
    for (auto d = t.info->shape.rbegin(); d != t.info->shape.rend(); ++d) out.u64(uint64_t(*d));
    out.u32(*formats::ggmlIdFromElementType(t.type));
    out.u64(offset);
    offset = (offset + t.bytes.size() + alignment - 1) / alignment * alignment;
  }
  out.padTo(alignment);
  for (const OutTensor& t : tensors) {
    out.raw(t.bytes.data(), t.bytes.size());
    out.padTo(alignment);
  }
  file.close();
  if (!file) return makeError("{}: cannot write", part);
  std::error_code ec;
  std::filesystem::rename(part, path, ec);
  if (ec) return makeError("{}: cannot rename to {}: {}", part, path, ec.message());
  return {};
}

}  // namespace kiln::quantize
