// A GPTQ or AWQ checkpoint directory seen as an ordinary one: each packed
// linear layer (<prefix>.qweight, .qzeros, .scales, and for GPTQ .g_idx)
// appears as one tensor <prefix>.weight of shape [out, in] in a type the
// backends already run, converted from the packed tensors when its data is
// first asked for (int4_linear.h has the layouts and the arithmetic):
//   - GPTQ sym, no act-order, groups of whole 32-column blocks: q4_0, exact;
//   - AWQ, or GPTQ asym, same grouping: q4_1 (its f16 minimum rounds);
//   - act-order (desc_act) or groups not of whole 32-column blocks: f32,
//     exact, at 8x the memory of the packed form.
// The choice depends only on config.json and the tensor shapes, so the
// compiler (header only) and the runtime (with data) see the same type.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "models/formats/int4_linear.h"
#include "models/formats/safetensors_file.h"
#include "models/formats/tensor_info.h"
#include "runtime/support/error.h"

namespace kiln::formats {

// config.json's "quantization_config" for the 4-bit methods kiln reads.
struct Int4QuantConfig {
  enum class Method { kGptq, kAwq };
  Method method = Method::kGptq;
  int64_t group_size = 128;      // -1: one group per output row (per channel)
  bool desc_act = false;         // GPTQ act-order: g_idx is a column permutation's groups
  bool sym = true;               // GPTQ: every zero point is 8
  bool zeros_minus_one = true;   // GPTQ checkpoint_format "gptq" (v1); "gptq_v2": false
};

std::string_view int4MethodName(Int4QuantConfig::Method method);  // "gptq" | "awq"

// Reads "quantization_config" from config.json text; nullopt when the key is
// absent (a float checkpoint) or says compressed-tensors without
// quantization groups (a sparsity_config only, sparsity_config.h). Errors name `name`, the field and what kiln
// accepts: quant_method gptq or awq, bits 4, group_size -1 or positive, GPTQ
// checkpoint_format/format gptq or gptq_v2, AWQ version gemm with
// zero_point true.
Result<std::optional<Int4QuantConfig>> parseInt4QuantConfig(std::string_view config_json,
                                                            const std::string& name);

class Int4Checkpoint {
 public:
  // Finds every packed layer in `checkpoint` and checks its tensors' presence,
  // dtypes and shapes against each other and `config`; errors name the
  // tensor. `checkpoint` must outlive the result.
  static Result<Int4Checkpoint> open(const SafetensorsCheckpoint& checkpoint,
                                     const Int4QuantConfig& config);

  Int4Checkpoint(Int4Checkpoint&&) noexcept = default;
  Int4Checkpoint& operator=(Int4Checkpoint&&) noexcept = default;

  const Int4QuantConfig& config() const { return config_; }
  // The checkpoint's tensors without the packed ones, plus one <prefix>.weight
  // per packed layer.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* findTensor(std::string_view name) const;
  // A packed layer's converted bytes (made once, kept), or the checkpoint's
  // own bytes for any other tensor.
  Result<std::span<const uint8_t>> tensorData(const TensorInfo& tensor) const;
  // A packed layer's exact f32 values, [out, in], whatever type tensorData
  // gives it; for tests and tools.
  Result<std::vector<float>> dequantized(std::string_view weight_name) const;

 private:
  struct PackedLayer {
    std::string prefix;
    int64_t in_features = 0, out_features = 0, groups = 0, group_size = 0;
    const TensorInfo *qweight = nullptr, *qzeros = nullptr, *scales = nullptr,
                     *g_idx = nullptr;
  };
  Int4Checkpoint() = default;
  Result<std::vector<uint8_t>> convert(const PackedLayer& layer, ElementType type) const;
  Result<Int4Linear> unpack(const PackedLayer& layer) const;

  const SafetensorsCheckpoint* checkpoint_ = nullptr;
  Int4QuantConfig config_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;          // name -> tensors_
  std::map<std::string, PackedLayer, std::less<>> packed_;     // <prefix>.weight -> layer
  // Converted layers; filled lazily by the const tensorData (binding is
  // single-threaded), never erased, so returned spans stay valid.
  mutable std::map<std::string, std::unique_ptr<std::vector<uint8_t>>, std::less<>> converted_;
};

}  // namespace kiln::formats
