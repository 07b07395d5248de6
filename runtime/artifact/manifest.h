// The compiled artifact's plan (manifest.json, docs/design/artifact.md) as
// plain structs. Loading checks everything a backend relies on without
// looking at weights: the format and version, that every id an entry names
// exists, arena offsets fit the budget, each step's kind is one the runtime
// executes, its args have the kinds and count that kind takes, and its
// params are the kind's (step_params.h), with the attention heads matching
// kv_cache. Errors name
// the file, the JSON path and what was expected:
//   "manifest.json: entries.forward.steps[12].args[1]: unknown weight id 999"
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "runtime/artifact/kernel_variant.h"
#include "runtime/artifact/megakernel.h"
#include "runtime/artifact/step_params.h"
#include "runtime/support/error.h"

namespace kiln {

inline constexpr int kManifestVersion = 2;

// A weight's load-time preparation. concat_rows joins row-blocked tensors
// along their first dimension; offset makes f32(input) + value (gemma's
// 1 + w norm weights); quantize is listed for completeness (the CPU
// weight store rejects it); slice keeps entries offset .. offset + size of
// its input along axis (a tensor-parallel rank's rows or columns).
struct WeightPrepare {
  std::string op;               // "concat_rows" | "offset" | "quantize" | "sparsify" | "slice"
  std::vector<int64_t> inputs;  // weight ids
  // quantize only: "int8" | "int4" | "fp8e4m3", or "int8sp24" | "int4sp24"
  // for a sparsify's kept values
  std::string scheme;
  int64_t group = 0;            // quantize only
  int64_t result = 0;           // quantize only: 0 data, 1 scales
  double value = 0;             // offset only: what is added
  std::string pattern;          // sparsify only: "2:4"
  std::string method;           // sparsify only: "magnitude" | "sparsegpt"
  int64_t axis = 0, offset = 0, size = 0;  // slice only
};

struct ManifestWeight {
  int64_t id = 0;
  std::string name;
  std::string type;  // lower-case element type: "f32", "bf16", "q4_1", ...
  std::vector<int64_t> shape;
  // Exactly one of: a checkpoint tensor name, or a preparation.
  std::optional<std::string> source;
  std::optional<WeightPrepare> prepare;
};

struct KvCacheConfig {
  int layers = 0;
  int page_size = 0;
  int kv_heads = 0;
  int head_dim = 0;
  std::string type;  // "f32", "f16", "bf16", "int8", "fp8e4m3"
  // How an int8/fp8e4m3 pool's rows are scaled: "token_head", one f32 per
  // (token slot, kv head), [num_blocks, kv_heads, page_size] beside each
  // pool; empty for the float types, whose values need none.
  std::string scales;
  // Each layer's attention window W (its paged_attention's sliding_window:
  // a query at position p reads keys (p - W, p]), 0 for full attention;
  // empty when no layer slides. Keys before kv_len - q_len - W + 1 of a
  // sequence are never read again by that layer: the blocks wholly before
  // them, in every layer, are what the scheduler may free.
  std::vector<int64_t> sliding_windows;

  // The layer's window (0: full attention).
  int64_t slidingWindow(int layer) const {
    return layer >= 0 && size_t(layer) < sliding_windows.size() ? sliding_windows[size_t(layer)] : 0;
  }
};

// The state-space layers' carried state (docs/design/state-space.md): one
// slot per running sequence in each layer's two pools, the conv's last K - 1
// inputs [K-1, C] in `conv_type` and the SSM state ([I, N] or [H, P, N]) in
// f32. Layers are numbered over the state-space layers alone; empty for
// attention-only models.
struct StateCacheLayer {
  std::vector<int64_t> conv;  // [K-1, C]
  std::vector<int64_t> ssm;   // [I, N] (mamba) | [H, P, N] (mamba2)
  int64_t conv_bytes = 0;     // one slot's, in conv_type
  int64_t ssm_bytes = 0;      // one slot's, f32
};

struct StateCacheConfig {
  std::string conv_type;  // "f32", "bf16", "f16"
  std::vector<StateCacheLayer> layers;

  // Bytes one sequence's slot takes over all layers.
  int64_t slotBytes() const {
    int64_t bytes = 0;
    for (const StateCacheLayer& l : layers) bytes += l.conv_bytes + l.ssm_bytes;
    return bytes;
  }
};

struct EntryInput {
  std::string name;
  std::string type;            // "i32"
  std::vector<int64_t> shape;  // -1 = dynamic
};

// kFixed: a static first dimension (no batch rows), e.g. a constant table.
enum class ValueRows { kTokens, kSequences, kFixed };

// An activation in the arena: `shape[0] == -1` rows (tokens N, or sequences B
// after gather_last_tokens) of `row_bytes` bytes each. Its storage starts at
// byte `offset * T_max` of the arena (offset is in bytes per budget token),
// or it is a view sharing `view_of`'s storage.
struct EntryValue {
  int64_t id = 0;
  std::string type;  // "f32"
  std::vector<int64_t> shape;
  ValueRows rows = ValueRows::kTokens;
  int64_t row_bytes = 0;
  int64_t offset = 0;
  std::optional<int64_t> view_of;
};

enum class PoolRole { kKey, kValue };
enum class StateRole { kConv, kSsm };

// One step argument: an entry input by name, a weight by id, a value by id,
// a layer's K or V pool, or a state-space layer's conv or SSM state pool.
struct StepArg {
  enum class Kind { kInput, kWeight, kValue, kPool, kState };
  Kind kind = Kind::kValue;
  std::string input;  // kInput
  int64_t id = 0;     // kWeight, kValue
  int layer = 0;      // kPool, kState
  PoolRole role = PoolRole::kKey;
  StateRole state_role = StateRole::kConv;  // kState
};

struct Step {
  StepKind kind = StepKind::kGemm;
  std::string instance;
  StepParams params;  // the kind's struct (step_params.h)
  std::vector<StepArg> args;
  std::vector<int64_t> results;  // value ids
  std::string path;               // "manifest.json: entries.forward.steps[3]" for errors
  // The kernels the CUDA backend may run for it, chosen by the compiler for
  // the plan's target (kernel_variant.h); empty for a CPU-only plan.
  std::vector<KernelVariant> variants;

  // The params as the kind's struct; the kind fixes which (parseStepParams).
  template <class P>
  const P& as() const {
    return std::get<P>(params);
  }
};

struct EntryOutput {
  std::string name;
  int64_t value = 0;
};

struct Entry {
  std::string name;
  std::vector<EntryInput> inputs;
  std::vector<EntryValue> values;
  int64_t bytes_per_token = 0;
  std::vector<Step> steps;
  std::vector<EntryOutput> outputs;
  // The entry as the megakernel's tasks (megakernel.h); absent unless
  // compiled with --megakernel.
  std::optional<MegakernelPlan> megakernel;

  const EntryValue* findValue(int64_t id) const;
  const EntryInput* findInput(std::string_view name) const;
};

// A file the weights are read from, as it was at compile time.
struct ManifestSourceFile {
  std::string file;          // relative to a checkpoint directory; a lone file's own name
  uint64_t size = 0;         // bytes
  int64_t mtime = 0;         // seconds since the epoch
  std::string sampled_hash;  // 16 hex digits (runtime/support/content_hash.h)
};

struct ModelInfo {
  std::string source;         // GGUF file or HF checkpoint directory
  std::string source_format;  // "gguf" | "safetensors"
  uint64_t source_size = 0;   // bytes, for cache validity
  int64_t source_mtime = 0;   // seconds since the epoch
  // Each weights file with its sampled content hash; empty in manifests
  // written before kiln-compile recorded them.
  std::vector<ManifestSourceFile> source_files;
  // The config fields the runtime reads; the rest stays in config_json.
  std::string architecture;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  std::string config_json;  // xfmr.config as written
};

// A multi-rank plan's place (docs/design/parallelism.md): rank =
// pp_stage · tensor_parallel + tp_rank, world_size = tensor_parallel ·
// pipeline_parallel. All 1/0 for a single-rank plan.
struct ParallelLayout {
  int tensor_parallel = 1;
  int pipeline_parallel = 1;
  int tp_rank = 0;
  int pp_stage = 0;
};

struct Manifest {
  std::string path;  // the manifest.json file it came from
  int version = 0;
  ModelInfo model;
  std::map<std::string, std::string> options;  // scalar options, printed as text
  std::string activation_type;                  // "f32"
  // What the kernel variants were chosen for: "sm_90a", "sm_80", ..., or
  // "cpu" (no variants: the CUDA backend does not run the plan).
  std::string target;
  int world_size = 1;
  int rank = 0;
  ParallelLayout parallel;
  std::vector<ManifestWeight> weights;  // sorted by id
  KvCacheConfig kv_cache;  // layers 0: no attention layers (a state-space model)
  StateCacheConfig state_cache;
  std::map<std::string, Entry> entries;

  const ManifestWeight* findWeight(int64_t id) const;
  const Entry* findEntry(std::string_view name) const;

  // Reads DIR/manifest.json (or a path to the file itself).
  static Result<Manifest> load(const std::string& artifact_dir_or_file);
  // Parses manifest text; `path` is used in error messages.
  static Result<Manifest> parse(std::string_view json_text, const std::string& path);
};

}  // namespace kiln
