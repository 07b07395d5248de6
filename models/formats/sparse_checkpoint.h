// A compressed-tensors sparse checkpoint seen as an ordinary one: each
// bitmask-compressed layer appears as one dense tensor <module>.weight
// [out, in] in the dtype its values were stored in (F16, BF16, F32),
// decompressed when its data is first asked for exactly as the package's
// decompressor does it:
//   <module>.compressed  the kept values, row-major (sparse-24-bitmask:
//                        [out, in/2]; sparse-bitmask: flat [nnz])
//   <module>.bitmask     U8 [out, ceil(in/8)]: bit c % 8 (least significant
//                        first, numpy's bitorder "little") of byte c / 8 in
//                        row r says whether W[r, c] is kept; the i-th set bit
//                        in row-major order takes the i-th value, the rest
//                        are zero; bits past `in` are padding
//   <module>.shape       I64 [2, 1] (sparse-bitmask: [2]): out, in
//   <module>.row_offsets sparse-bitmask only, I64 [out]; not needed to decompress
// The dense shape comes from the headers (in = 2 * compressed columns, or
// 8 * bitmask columns for sparse-bitmask) so the compiler, reading headers
// only, and the runtime see the same tensor; .shape must agree when read.
//
// Every weight the config says is 2:4 (each compressed one under a 2:4
// structure; under format dense, each linear the targets cover) is checked
// when its data is read: at most two nonzeros in every group of four
// consecutive columns of a row, or an error naming the weight, the row and
// the columns.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "models/formats/safetensors_file.h"
#include "models/formats/sparsity_config.h"
#include "models/formats/tensor_info.h"
#include "runtime/support/error.h"

namespace kiln::formats {

class SparseCheckpoint {
 public:
  // Finds every compressed layer in `checkpoint` and checks its tensors'
  // presence, dtypes and shapes against each other; errors name the tensor.
  // `linear_weights` are the names of the model's linear weights
  // ("<module>.weight"): what the target "Linear" means. `checkpoint` must
  // outlive the result.
  static Result<SparseCheckpoint> open(const SafetensorsCheckpoint& checkpoint,
                                       const SparsityConfig& config,
                                       const std::vector<std::string>& linear_weights);

  SparseCheckpoint(SparseCheckpoint&&) noexcept = default;
  SparseCheckpoint& operator=(SparseCheckpoint&&) noexcept = default;

  const SparsityConfig& config() const { return config_; }
  // The checkpoint's tensors without the compressed parts, plus one
  // <module>.weight per compressed layer.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* findTensor(std::string_view name) const;
  // A compressed layer's dense bytes (made once, kept), or the checkpoint's
  // own bytes; a weight claimed 2:4 is checked first.
  Result<std::span<const uint8_t>> tensorData(const TensorInfo& tensor) const;
  // The weights the checkpoint claims are 2:4, by name.
  const std::set<std::string, std::less<>>& weights24() const { return weights24_; }

 private:
  struct CompressedLayer {
    std::string module;
    int64_t rows = 0, columns = 0;
    const TensorInfo *values = nullptr, *bitmask = nullptr, *shape = nullptr;
  };
  SparseCheckpoint() = default;
  Status findCompressedLayers();
  Result<std::vector<uint8_t>> decompress(const CompressedLayer& layer) const;
  Status check24(const TensorInfo& weight, std::span<const uint8_t> data) const;

  const SafetensorsCheckpoint* checkpoint_ = nullptr;
  SparsityConfig config_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;               // name -> tensors_
  std::map<std::string, CompressedLayer, std::less<>> compressed_;  // <module>.weight -> layer
  std::set<std::string, std::less<>> weights24_;
  // Decompressed layers and the stored weights already checked; filled
  // lazily by the const tensorData (binding is single-threaded), never
  // erased, so returned spans stay valid.
  mutable std::map<std::string, std::unique_ptr<std::vector<uint8_t>>, std::less<>> dense_;
  mutable std::set<std::string, std::less<>> checked_;
};

}  // namespace kiln::formats
