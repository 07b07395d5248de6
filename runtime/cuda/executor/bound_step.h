// A manifest step bound to the device (BoundStep): every operand resolved to
// its address, its kernel instances looked up, and the fusions that fold it
// into a neighbouring gemm marked; a forward fills in only the row counts.
// Binding is where the executor reads the steps (their args, and with
// kernel_set.cc the only place it reads their params): the weight form each
// step asks for, its values in the arena, its weights, pools and inputs, and
// the checks of each kind's operands against the instances that run it.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "codegen/kernels/kernel_params.cuh"
#include "runtime/artifact/manifest.h"
#include "runtime/cuda/cuda_tuning.h"
#include "runtime/cuda/executor/device_memory.h"
#include "runtime/cuda/executor/kernel_set.h"
#include "runtime/cuda/executor/launch_shape.h"
#include "runtime/cuda/executor/weight_forms.h"
#include "runtime/weights/weight_store.h"

namespace kiln::cuda {

// A value on the device: rows of `width` elements of `elem` bytes.
struct DeviceValue {
  CUdeviceptr ptr = 0;
  int64_t width = 0;
  int elem = 2;
  bool per_sequence = false;
  bool valid = false;
  bool integer = false;  // i32 indices (moe_router's expert ids), no activation
};

// Rows of `v` in a batch of this shape: one per sequence or one per token.
inline int64_t rowsOf(const DeviceValue& v, const LaunchShape& shape) { return v.per_sequence ? shape.b : shape.n; }

// Whether `range` (a variant's rows, absent where the step has no such
// variant) holds a batch of `rows` rows.
inline bool covers(const std::optional<RowRange>& range, int64_t rows) { return range && range->contains(rows); }

// A skinny GEMM instance a gemm step runs for the row counts in `rows`.
struct GemvKernel {
  CUfunction fn = nullptr;  // null: the step has none
  std::string instance;     // its name (StepProfile's rows)
  RowRange rows;
  unsigned block = 0;
  int rows_per_block = 1;  // weight rows; a fused variant's come in pairs (gate/up, or rope's)
  int max_rows = 8;        // rows of x a block takes (grid.z walks further groups)
  // gemv_stream.cuh's persistent blocks: the matrix's tiles (grid: one
  // block per SM, at most one per tile) and the ring's dynamic shared memory.
  int tiles = 0;
  unsigned smem = 0;
};

// One step with every pointer resolved, and the row counts at which each of
// its chosen variants (kernel_set.h) runs; forward() fills only the row
// counts.
struct BoundStep {
  StepKind kind = StepKind::kGemm;
  std::string path;
  std::string instance;  // the step's own kernel (role step; StepProfile's rows)
  CUfunction fn = nullptr;
  unsigned block = 0;
  std::vector<DeviceValue> args;  // value operands by arg index (invalid for non-values)
  std::vector<DeviceValue> results;
  std::vector<CUdeviceptr> weights;  // by arg index (0 for non-weights)
  std::vector<int> inputs;           // by arg index (-1 for non-inputs): InputId
  std::vector<CUdeviceptr> pools;    // by arg index (0 for non-pools): a KV pool, or a state-space layer's state pool
  std::vector<CUdeviceptr> pool_scales;  // by arg index: an int8/fp8 pool's scales (0 otherwise)
  int64_t width = 0, k = 0;
  int heads = 0, kv_heads = 0, head_dim = 0;
  bool merged = false, writes_sum = false;
  bool qk_norm = false;  // rope_kv_append: per-head q/k RMSNorm weights as weight args after the pools
  bool scales = false;  // gemm: kiln's int8/int4 weights, with their scales as weight arg 2
  // paged_attention: the split-KV instance and its combine, for decode batches.
  // decode_attention merges its own partials (split_arrivals), so the
  // combine runs only after the CUDA-core paged_attention_split.
  bool split_merges_itself = false;
  CUfunction split_fn = nullptr, combine_fn = nullptr;
  unsigned split_block = 0, combine_block = 0;
  unsigned split_smem = 0;
  // ... and the tensor-core flash attention for batches whose longest
  // query is in flash_rows (prefill chunks).
  CUfunction flash_fn = nullptr;
  unsigned flash_block = 0, flash_smem = 0, flash_block_m = 0;  // flash_block_m: query rows per block
  std::string flash_kind;  // flash_attention_wgmma on Hopper, else flash_attention
  RowRange flash_rows;
  std::vector<int64_t> sizes;   // split
  // moe_router (k: top_k) and moe_ffn: its step kernel does gate/up over a
  // grid [ffn / 16, chosen experts, row groups], moe_down_fn the down
  // projections over [width / 16, ..] (kernel_params.cuh's moe grid),
  // combine_fn the sum of each token's experts; the
  // slots' f32 scratch (moe_act [rows · k, ffn], moe_partial [rows · k,
  // width]) is shared by every moe_ffn step (allocateMoeScratch).
  int64_t experts = 0, ffn = 0;
  CUfunction moe_down_fn = nullptr;
  unsigned moe_down_block = 0;
  CUdeviceptr moe_act = 0, moe_partial = 0;
  // ... and for batches in moe_grouped_rows, gate/up and down as grouped
  // tensor-core GEMMs (moe_grouped_mma.cuh; moe_step.h picks).
  CUfunction moe_grouped_gate_up_fn = nullptr, moe_grouped_down_fn = nullptr;
  unsigned moe_grouped_block = 0, moe_grouped_smem = 0;
  std::optional<RowRange> moe_grouped_rows;
  int64_t vocab = 0;            // embedding table rows
  // State-space steps: ssm_conv1d / selective_scan width = channels,
  // selective_scan / ssd_scan k = state size; ssd_scan heads, head_dim and
  // its δ limits; ssm_gated_norm width = features and its epsilon.
  float dt_min = 0, dt_max = 0, epsilon = 0;
  // gemm, skinny batches (skinnyKernel picks): the skinny instance and,
  // for one row, the single-row instance (gemv_max_rows 1: more blocks per
  // SM, more loads in flight) ...
  GemvKernel skinny, single;
  // ... which, in the fused variants, also do the step after it and write
  // its result (fused_y): the silu_mul, or the rope_kv_append (fused_rope:
  // its index, whose q (storage of its own), inputs and pools it writes).
  bool fused = false;
  CUdeviceptr fused_y = 0;
  int fused_rope = -1;
  // silu_mul, rope_kv_append: the rows at which the gemm before does it.
  std::optional<RowRange> absorbed_rows, absorbed_prefill_rows;
  // gemm with SwiGLU folded in on Hopper, batches in swiglu_rows:
  // gemm_swiglu_wgmma (one launch for the gate/up projection and silu_mul,
  // writing fused_y) and its weight's tensor map.
  CUfunction swiglu_fn = nullptr;
  unsigned swiglu_smem = 0;
  RowRange swiglu_rows;
  kernels::TensorMap swiglu_w_map{};
  // gemm: the residual_rms_norm step before it that its single-row
  // (streamed) instance folds in, whose inputs it reads and whose sum it
  // writes; that step skips the rows in its folded_rows.
  int folded_norm = -1;
  std::optional<RowRange> folded_rows;  // residual_rms_norm
  // gemm, cuBLASLt batches in residual_rows: the residual_rms_norm step
  // after it whose sum its epilogue writes (the norm's x + this product,
  // beta 1); its own output is then not written. That norm runs
  // norm_of_sum_fn over the sum at the rows in norm_of_sum_rows.
  int sum_norm = -1;
  std::optional<RowRange> residual_rows;
  // gemm of block-quantized weights, cuBLASLt batches in dequantize_rows:
  // dequantize_fn first expands the packed weight into `dequantized` (bf16
  // [n, k], scratch every such gemm shares), which cuBLASLt then reads.
  CUfunction dequantize_fn = nullptr;
  unsigned dequantize_block = 0;
  std::optional<RowRange> dequantize_rows;
  CUdeviceptr dequantized = 0;
  CUfunction norm_of_sum_fn = nullptr;
  unsigned norm_of_sum_block = 0;
  std::optional<RowRange> norm_of_sum_rows;
  // gemm of a 2:4 sparse weight: sparse24_gemv for decode-sized batches
  // (rows_per_block weight rows a block, max_rows rows of x) and the sparse
  // tensor-core GEMM above them (its tile: rows_per_block = kBlockN weight
  // rows, max_rows = kBlockM rows of x). The gemv reads the kept values of
  // the weight's gemv image (weights[1]) and its canonical metadata, the
  // GEMM bf16 kept values and the mma-order metadata (sparse24_image.h).
  GemvKernel sparse_gemv, sparse_gemm;
  CUdeviceptr sparse_metadata = 0, sparse_gemm_values = 0, sparse_gemm_metadata = 0;
};

// A gemm step's optional bias: weight arg 2, or 3 after the scales of
// kiln's int8/int4 weights (folded into their blocks; not read on the GPU).
inline CUdeviceptr gemmBias(const BoundStep& s) {
  const size_t arg = s.scales ? 3 : 2;
  return s.weights.size() > arg ? s.weights[arg] : 0;
}
inline bool hasBias(const BoundStep& s) { return gemmBias(s) != 0; }

// Whether the plan runs gemm `step` on the 2:4 sparse kernels (its variants
// list sparse_gemv or sparse_gemm); a sparse weight without them runs dense.
bool runsSparse24Kernels(const Step& step);

// The line the executor prints when `entry` has 2:4 sparse gemms its plan
// runs dense ("2:4 sparse weights run dense: <reason>"); empty otherwise.
std::string sparse24DenseNotice(const Manifest& manifest, const Entry& entry);

// The form weight args[arg] of `step` takes on the device: a gemm's matrix
// and bias `gemm_form` (a 2:4 sparse matrix: the sparse gemv's image where
// the plan runs the sparse kernels, else expanded to a dense one), a norm's
// weight its weight_type (f32 unless it says), an embedding table as its
// table_type names it. Another kind does not take weights: an error.
Result<WeightForm> stepWeightForm(const Step& step, size_t arg, WeightForm gemm_form);

// Every weight the entries' steps take (null entries skipped), each in its
// form; a sparse gemm's weight also in the sparse GEMM's forms.
Result<WeightLayout> layoutWeights(std::initializer_list<const Entry*> entries, const WeightStore& weights,
                                   WeightForm gemm_form);

// Moves the values the chosen variants keep apart from the arena
// (own_storage) into buffers of their own, each set into one buffer: every
// fused rope's q (each layer's is read by its attention before the next
// layer's gemm writes), and every sum the planner put where cuBLASLt could
// not write it beside its inputs (the compiler moves only sums whose lives
// do not overlap). Returns the bytes allocated.
Result<int64_t> moveFusedValues(DeviceMemory& memory, ActivationArena& arena, const Entry& entry, int64_t max_tokens,
                                const KernelSet& kernels);

// One bf16 buffer for the largest block-quantized weight cuBLASLt batches
// expand (BoundStep::dequantized; the gemms run one after another), set
// on every step of the lists that expands one. Returns the bytes allocated.
Result<int64_t> allocateExpandedWeights(DeviceMemory& memory, std::initializer_list<std::vector<BoundStep>*> lists);
// The moe_ffn steps' slot scratch for `max_tokens` tokens, one buffer all
// share (they run one after another); its bytes (0 without MoE steps).
Result<int64_t> allocateMoeScratch(DeviceMemory& memory, std::initializer_list<std::vector<BoundStep>*> lists,
                                   int64_t max_tokens);

// Where an entry's values, weights and pools are on the device.
struct EntryPlacement {
  const Entry& entry;
  int64_t max_tokens;
  const ActivationArena& arena;
  const WeightLayout& weights;
  const KvPools& pools;
  const StatePools* states = nullptr;  // the state-space layers' pools (null: the plan has none)

  // Value `id`, named at `where` of `path` in errors: a bf16 or f32 value
  // with batch rows, in the arena (or a buffer of its own).
  Result<DeviceValue> value(const std::string& path, int64_t id, const std::string& where) const;
};

// Binds every step of `placement.entry` to its chosen variants in the
// loaded `kernels`, checking its operands against them and the manifest
// (`weights` and `kv` give the shapes), then links the fusions: the steps a
// gemm does and the values it writes instead, checking that the variants
// of both sides agree on the rows. `d` encodes gemm_swiglu's weight maps.
Result<std::vector<BoundStep>> bindSteps(const Manifest& manifest, const EntryPlacement& placement,
                                         const WeightStore& weights, const KvPoolConfig& kv, const KernelSet& kernels,
                                         const CudaDriver& d);

}  // namespace kiln::cuda
