// Which weights go to the device in which form, and where. A weight may be
// wanted in several forms (WeightForm); every (weight, form) pair the steps
// ask for gets an aligned offset in one allocation. A weight bound in its
// wanted form is copied as it is (from the mapped checkpoint, or its
// deferred concat_rows parts); any other is converted on the host first,
// float types through f32. weight_upload.h does the copies. Which form a
// step's weight takes is the step binding's (bound_step.h: stepWeightForm).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "runtime/artifact/manifest.h"
#include "runtime/cuda/executor/device_memory.h"
#include "runtime/weights/weight_store.h"

namespace kiln::cuda {

// Converted to one element type, the bound bytes as they are
// (block-quantized embedding tables), or blocks repacked into the tiles the
// GEMM kernels read (runtime/numerics/packed_blocks.h), with the scale
// group the step's instance was made for. A 2:4 sparse weight takes the
// sparse kernels' forms (sparse24_image.h): the gemv's image, the GEMM's
// mma-order metadata and, for q8_0 / q4_0 kept values, those values in
// bf16; in kF32 / kBf16 / kF16 it is the dense matrix, expanded on the host.
enum class WeightForm { kF32, kBf16, kF16, kRaw, kPacked, kSparse24, kSparse24Mma, kSparse24Bf16Values };

// The form of an element type name ("f32", "bf16", "f16"; "q8_0", "q4_0",
// "q4_1": raw); another: "element type '...' has no CUDA kernel".
Result<WeightForm> weightFormOf(const std::string& type);

// The bytes `w` takes on the device in `form` (what upload() copies),
// built on the host: a conversion, a repacking, or w's bound bytes.
// `tile_group`: a packed weight's columns a scale.
Status weightImage(const BoundWeight& w, WeightForm form, int64_t tile_group, std::vector<uint8_t>& out);

class WeightLayout {
 public:
  // Gives weight args[arg] of `step` in `form` its offset (once per pair);
  // an error if the weight store has not bound it for kernels.
  Status add(const Step& step, size_t arg, const WeightStore& weights, WeightForm form);
  int64_t bytes() const { return bytes_; }
  // Allocates bytes() and copies every pair to its offset (converting where
  // needed); `progress`: a progress line on stderr. Leaves the context
  // current.
  Status upload(const DeviceContext& gpu, DeviceMemory& memory, const WeightStore& weights, bool progress);
  // The device address of `id` in `form`; 0 if no step asked for the pair.
  CUdeviceptr at(int64_t id, WeightForm form) const;

 private:
  std::map<std::pair<int64_t, WeightForm>, int64_t> offset_;  // -> byte offset
  std::map<int64_t, int64_t> tile_group_;  // packed weights: columns a scale (cuda_codegen::gemmTileGroup)
  int64_t bytes_ = 0;
  CUdeviceptr base_ = 0;
};

}  // namespace kiln::cuda
