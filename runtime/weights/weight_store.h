// The weights of a compiled artifact, bound to bytes the CPU kernels can read.
// Opening maps the model the manifest names (formats::ModelSource, kWithData:
// nothing is copied), checks it is the file the artifact was compiled from
// (size and mtime), and binds every manifest weight by id:
//   - a checkpoint tensor: its mapped bytes, after checking type and shape;
//   - a prepared weight: built once here (concat_rows joins row-blocked
//     tensors byte-wise, valid for plain types and ggml block types;
//     offset adds a constant to a float weight in f32).
// Weights that steps read are then put in a form the kernels take: f32,
// f16, bf16, q4_0, q4_1, q8_0, q4_k, q5_k and q6_k matrices stay as they
// are; 1-D f16/bf16
// tensors (norm weights, biases) become f32, because the norm and bias paths
// read f32. Any other type is rejected with the tensor's name.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "models/formats/model_source.h"
#include "runtime/artifact/manifest.h"
#include "runtime/numerics/weight_type.h"
#include "runtime/support/error.h"

namespace kiln {

struct BoundWeight {
  int64_t id = 0;
  std::string name;
  formats::ElementType format_type = formats::ElementType::F32;  // type of `data`
  // The kernels' view of `data`; only meaningful when `kernel_ready`.
  WeightType type = WeightType::F32;
  bool kernel_ready = false;
  std::vector<int64_t> shape;  // outermost first; [n, k] for a GEMM weight
  const uint8_t* data = nullptr;
  uint64_t size_bytes = 0;
  // 2:4 sparse (a `sparsify` preparation, or `quantize` to int8sp24 /
  // int4sp24; docs/design/sparsity.md): `data` holds the kept values, [n,
  // k/2] in `format_type` (f32, q8_0 or q4_0 blocks), then from
  // `sparse_meta_offset` the metadata, [n, k/32] uint32. `shape` stays [n, k].
  bool sparse24 = false;
  uint64_t sparse_meta_offset = 0;
  // A deferred concat_rows (WeightStoreOptions::defer_concat): the row
  // blocks in order, and data == nullptr until materializeConcats().
  std::vector<std::span<const uint8_t>> parts;
};

struct WeightStoreOptions {
  // Reads the model from here instead of the manifest's model.source (a
  // moved checkout, tests).
  std::string source_path;
  // Compare the model's size and mtime with the manifest's.
  bool check_source_stamp = true;
  // Leave concat_rows results as their parts instead of joining them in host
  // memory: a GPU backend uploads each part to its offset, which saves a
  // host copy of most of the model (Llama-3-8B: 9 GB of QKV and gate/up).
  // materializeConcats() joins them for a backend that reads host memory.
  bool defer_concat = false;
};

// One file of a model as the manifest records it (model.source_files).
struct SourceFileStamp {
  std::string file;  // relative to a checkpoint directory; a lone file's own name
  uint64_t size = 0;
  int64_t mtime = 0;
  std::string sampled_hash;  // sampledContentHash (runtime/support/content_hash.h)
};

// The size and mtime (seconds) the manifest records for a model: a file's
// own, or for a checkpoint directory the sum of the sizes of its
// *.safetensors, config.json and model.safetensors.index.json and their
// latest mtime. Seconds are Unix time (stat's st_mtime). `files` has each
// of those files with its sampled content hash, which catches a file
// replaced by another of the same size and mtime.
struct SourceStamp {
  uint64_t size = 0;
  int64_t mtime = 0;
  std::vector<SourceFileStamp> files;  // in name order
};
Result<SourceStamp> sourceStamp(const std::string& path);

class WeightStore {
 public:
  static Result<WeightStore> open(const Manifest& manifest, const WeightStoreOptions& options = {});

  WeightStore(WeightStore&&) noexcept = default;
  WeightStore& operator=(WeightStore&&) noexcept = default;

  // nullptr for an id the manifest does not list.
  const BoundWeight* find(int64_t id) const;
  const std::vector<BoundWeight>& weights() const { return weights_; }
  const formats::ModelSource& source() const { return *source_; }
  // Joins deferred concat_rows weights in host memory (the CPU executor
  // reads `data`); a no-op when nothing was deferred.
  void materializeConcats();
  // Weight `id`'s bytes made writable: copied once into memory the store
  // owns (the model's own bytes are a read-only mapping), `data` pointing
  // there from then on. Calibration (models/quantize) rewrites a layer's
  // float weights with their quantized values while the model runs, so the
  // layers after it see what the quantized model will compute.
  Result<std::span<uint8_t>> writableData(int64_t id);

 private:
  WeightStore() = default;
  void join(BoundWeight& bw);  // a deferred concat_rows into one host buffer

  std::optional<formats::ModelSource> source_;
  std::vector<BoundWeight> weights_;  // sorted by id, as in the manifest
  // Bytes made at load (prepared or converted weights); never resized after
  // binding, so BoundWeight::data stays valid.
  std::vector<std::unique_ptr<uint8_t[]>> owned_;
  std::set<int64_t> writable_;  // ids whose data writableData copied
};

}  // namespace kiln
