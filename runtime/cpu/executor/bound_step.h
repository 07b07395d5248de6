// A step of the CPU executor with its operands resolved against the arena,
// weights and pools (executor.cc binds them once, at creation); shared by
// the step-by-step executor and the megakernel task interpreter
// (task_interpreter.cc), which runs the same kernels on a step's tiles.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/artifact/manifest.h"
#include "runtime/backend/batch.h"
#include "runtime/cpu/executor/executor.h"
#include "runtime/cpu/kernels/moe.h"
#include "runtime/cpu/kernels/rope.h"
#include "runtime/weights/weight_store.h"

namespace kiln::cpu {

// The entry inputs the executor provides, by manifest name.
enum class InputId {
  kTokens, kPositions, kSlotMapping, kBlockTables, kQueryStart, kKvLens, kParents, kBasePositions, kStateSlots
};

inline const int32_t* inputData(const BatchInputs& in, InputId id) {
  switch (id) {
    case InputId::kTokens: return in.tokens.data();
    case InputId::kPositions: return in.positions.data();
    case InputId::kSlotMapping: return in.slot_mapping.data();
    case InputId::kBlockTables: return in.block_tables.data();
    case InputId::kQueryStart: return in.query_start.data();
    case InputId::kKvLens: return in.kv_lens.data();
    case InputId::kParents: return in.parents.data();
    case InputId::kBasePositions: return in.base_positions.data();
    case InputId::kStateSlots: return in.state_slots.data();
  }
  return nullptr;
}

// A resolved step argument or result.
struct Operand {
  StepArg::Kind kind = StepArg::Kind::kValue;
  // kValue: rows of `width` elements at `data`; rows are the batch's
  // tokens, or its sequences when `per_sequence`. Activations are f32;
  // speculative verify's index values i32 or i8 (`element_bytes`).
  float* data = nullptr;
  int64_t width = 0;
  int element_bytes = 4;
  bool integer = false;
  bool per_sequence = false;
  int64_t storage_begin = 0, storage_end = 0;  // arena bytes, for alias checks
  int64_t value_id = -1;                       // kValue: the value owning its storage (a view's source)
  const BoundWeight* weight = nullptr;         // kWeight
  void* pool = nullptr;                        // kPool
  float* pool_scales = nullptr;                // kPool of int8/fp8: its scales (kvScaleIndex)
  InputId input = InputId::kTokens;            // kInput
  int state_layer = 0;                         // kState: the state-space layer
  StateRole state_role = StateRole::kConv;     // kState
};

struct CpuExecutor::BoundStep {
  StepKind kind = StepKind::kGemm;
  std::string path;
  std::vector<Operand> args;
  std::vector<Operand> results;
  // Kernel parameters (those the kind uses).
  int64_t width = 0;  // hidden / n / ffn / elementwise width
  int64_t k = 0;
  float epsilon = 0.0f;
  bool writes_sum = false;
  bool merged = false;
  bool gelu_tanh = false;     // silu_mul: GeGLU's activation instead of SiLU
  float embed_scale = 1.0f;   // embedding: rows times this
  int heads = 0, kv_heads = 0, head_dim = 0;
  float scale = 0.0f;
  int64_t sliding_window = 0;  // paged_attention: 0 = full causal
  bool qk_norm = false;        // rope_kv_append: per-head RMSNorm of q and k (args after the pools)
  RopeParams rope;
  std::vector<int64_t> sizes;
  // moe_router, moe_ffn
  int64_t experts = 0, top_k = 0;
  bool normalize = false;
  ExpertWeights expert_weights;
  // State-space steps (width: channels or features)
  bool silu = false;
  int64_t conv_width = 0, groups = 0, state_size = 0, chunk_size = 0, group_size = 0;
  float dt_min = 0.0f, dt_max = 0.0f;
};

}  // namespace kiln::cpu
