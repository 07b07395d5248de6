#include "runtime/cuda/executor/weight_forms.h"

#include <algorithm>
#include <span>
#include <thread>
#include <vector>

#include "codegen/cuda/kernel_selection.h"  // gemmTileGroup
#include "runtime/cuda/executor/kiln_assign.h"
#include "runtime/cuda/executor/sparse24_image.h"
#include "runtime/cuda/executor/sparse24_layout.h"
#include "runtime/cuda/executor/weight_upload.h"
#include "runtime/numerics/packed_blocks.h"
#include "runtime/numerics/quant.h"

namespace kiln::cuda {

namespace {

int64_t elements(const BoundWeight& w) {
  int64_t n = 1;
  for (int64_t d : w.shape) n *= d;
  return n;
}

// True when the device form is the bound bytes themselves (no conversion).
bool uploadsAsBound(const BoundWeight& w, WeightForm form) {
  if (w.sparse24) return false;  // compressed on the host: every device form is built
  return form == WeightForm::kRaw || (form == WeightForm::kF32 && w.type == WeightType::F32) ||
         (form == WeightForm::kBf16 && w.type == WeightType::BF16) ||
         (form == WeightForm::kF16 && w.type == WeightType::F16);
}

bool sparse24Form(WeightForm form) {
  return form == WeightForm::kSparse24 || form == WeightForm::kSparse24Mma || form == WeightForm::kSparse24Bf16Values;
}

WeightType floatType(WeightForm form) {
  return form == WeightForm::kF32 ? WeightType::F32 : form == WeightForm::kBf16 ? WeightType::BF16 : WeightType::F16;
}

// A 2:4 sparse weight's device bytes in `form` (sparse24_image.h).
Status sparse24Image(const BoundWeight& w, WeightForm form, std::vector<uint8_t>& out) {
  std::vector<float> f;
  switch (form) {
    case WeightForm::kSparse24: {
      KILN_ASSIGN(image, sparse24GemvImage(w));
      out = std::move(image);
      return {};
    }
    case WeightForm::kSparse24Mma: out = sparse24MmaImage(w); return {};
    case WeightForm::kSparse24Bf16Values: {
      KILN_ASSIGN(values, sparse24KeptValues(w));
      f = std::move(values);
      break;
    }
    case WeightForm::kF32:
    case WeightForm::kBf16:
    case WeightForm::kF16: {
      KILN_ASSIGN(dense, sparse24Dense(w));
      f = std::move(dense);
      break;
    }
    default: return makeError("weight {} '{}' is 2:4 sparse: no raw or packed form", w.id, w.name);
  }
  const WeightType to = form == WeightForm::kSparse24Bf16Values ? WeightType::BF16 : floatType(form);
  out.resize(f.size() * (to == WeightType::F32 ? 4 : 2));
  return quantizeRow(to, f.data(), out.data(), int64_t(f.size()));
}

// The bytes of `w` in `form`, for a form that is not its bound bytes
// (uploadsAsBound is false): blocks repacked, or any type converted
// through f32.
Status convertWeight(const BoundWeight& w, WeightForm form, int64_t tile_group, std::vector<uint8_t>& out) {
  if (w.sparse24) return sparse24Image(w, form, out);
  if (sparse24Form(form)) return makeError("weight {} '{}' is not 2:4 sparse: no sparse form", w.id, w.name);
  const int64_t n = elements(w);
  if (form == WeightForm::kPacked) {
    if (w.shape.size() != 2)
      return makeError("weight {} '{}' has {} dimensions; packed GEMM weights are matrices", w.id, w.name,
                       w.shape.size());
    Status packed = packBlocks(w.type, w.data, w.shape[0], w.shape[1], tile_group, out);
    if (!packed.ok()) return makeError("weight {} '{}': {}", w.id, w.name, packed.error().message);
    return {};
  }
  std::vector<float> f(static_cast<size_t>(n));
  KILN_RETURN_IF_ERROR(dequantizeRow(w.type, w.data, f.data(), n));
  const WeightType to = floatType(form);
  out.resize(size_t(n) * (form == WeightForm::kF32 ? 4 : 2));
  return quantizeRow(to, f.data(), out.data(), n);
}

int64_t formBytes(const BoundWeight& w, WeightForm form, int64_t tile_group) {
  switch (form) {
    case WeightForm::kF32: return elements(w) * 4;
    case WeightForm::kBf16:
    case WeightForm::kF16: return elements(w) * 2;
    case WeightForm::kRaw: return int64_t(w.size_bytes);
    case WeightForm::kPacked:
      return w.shape.size() == 2 ? packedBlockBytes(w.type, w.shape[0], w.shape[1], tile_group) : 0;
    case WeightForm::kSparse24: return sparse24GemvImageBytes(w);
    case WeightForm::kSparse24Mma: return sparse24MmaMetadataWords(w.shape[0], w.shape[1]) * 4;
    case WeightForm::kSparse24Bf16Values: return elements(w);  // k/2 values of 2 bytes a row
  }
  return 0;
}

}  // namespace

Status weightImage(const BoundWeight& w, WeightForm form, int64_t tile_group, std::vector<uint8_t>& out) {
  if (!uploadsAsBound(w, form)) return convertWeight(w, form, tile_group, out);
  out.clear();
  if (w.data) out.assign(w.data, w.data + w.size_bytes);
  for (std::span<const uint8_t> part : w.parts) out.insert(out.end(), part.begin(), part.end());
  return {};
}

Result<WeightForm> weightFormOf(const std::string& type) {
  if (type == "f32") return WeightForm::kF32;
  if (type == "bf16") return WeightForm::kBf16;
  if (type == "f16") return WeightForm::kF16;
  if (type == "q8_0" || type == "q4_0" || type == "q4_1") return WeightForm::kRaw;
  return makeError("element type '{}' has no CUDA kernel", type);
}

Status WeightLayout::add(const Step& step, size_t arg, const WeightStore& weights, WeightForm form) {
  const StepArg& a = step.args[arg];
  const BoundWeight* w = weights.find(a.id);
  if (!w || !w->kernel_ready)
    return makeError("{} ({}): args[{}]: weight {} is not bound by the weight store", step.path,
                     stepKindName(step.kind), arg, a.id);
  auto key = std::make_pair(a.id, form);
  const int64_t tile_group =
      form == WeightForm::kPacked && step.kind == StepKind::kGemm ? cuda_codegen::gemmTileGroup(step.as<GemmParams>()) : 0;
  if (!offset_.count(key)) {
    offset_[key] = bytes_;
    if (form == WeightForm::kPacked) tile_group_[a.id] = tile_group;
    bytes_ = alignUp(bytes_ + formBytes(*w, form, tile_group));
  } else if (form == WeightForm::kPacked && tile_group_[a.id] != tile_group) {
    return makeError("{}: args[{}]: weight {} is packed with {}-column scale groups for another gemm, this one wants {}",
                     step.path, arg, a.id, tile_group_[a.id], tile_group);
  }
  return {};
}

Status WeightLayout::upload(const DeviceContext& gpu, DeviceMemory& memory, const WeightStore& weights,
                            bool progress) {
  KILN_ASSIGN(base, memory.alloc(bytes_, "the weights"));
  base_ = base;
  std::vector<HostToDeviceCopy> copies;
  std::vector<std::vector<uint8_t>> converted;
  for (const auto& [key, offset] : offset_) {
    const BoundWeight& w = *weights.find(key.first);
    const CUdeviceptr dst = base_ + CUdeviceptr(offset);
    if (uploadsAsBound(w, key.second)) {
      if (w.data) {
        copies.push_back({w.data, w.size_bytes, dst});
        continue;
      }
      uint64_t at = 0;
      for (std::span<const uint8_t> part : w.parts) {
        copies.push_back({part.data(), part.size(), dst + CUdeviceptr(at)});
        at += part.size();
      }
      continue;
    }
    BoundWeight whole = w;
    std::vector<uint8_t> joined;
    if (!w.data) {  // conversion reads one buffer
      for (std::span<const uint8_t> part : w.parts) joined.insert(joined.end(), part.begin(), part.end());
      whole.data = joined.data();
      whole.parts.clear();
    }
    converted.emplace_back();
    const int64_t tile_group = key.second == WeightForm::kPacked ? tile_group_.at(key.first) : 0;
    Status s = convertWeight(whole, key.second, tile_group, converted.back());
    if (!s.ok()) return s.error();
    copies.push_back({converted.back().data(), converted.back().size(), dst});
  }
  UploadOptions upload;
  upload.progress = progress;
  upload.threads = int(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
  KILN_RETURN_IF_ERROR(uploadToDevice(*gpu.d, gpu.x, gpu.context, copies, upload));
  return gpu.d->check(gpu.d->cuCtxSetCurrent(gpu.context), "cuCtxSetCurrent");
}

CUdeviceptr WeightLayout::at(int64_t id, WeightForm form) const {
  auto it = offset_.find({id, form});
  return it == offset_.end() ? 0 : base_ + it->second;
}

}  // namespace kiln::cuda
