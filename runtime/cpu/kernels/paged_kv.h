// Writing new keys/values into the paged KV pool. A pool holds one layer's K
// (or V) for every sequence, in fixed-size pages handed out by the block
// allocator; a token's place is its slot = block * page_size + offset.
#pragma once

#include <cstdint>

#include "runtime/kv/block_pool.h"
#include "runtime/support/error.h"

namespace kiln::cpu {

// Shape of one layer's K or V pool: [num_blocks, page_size, kv_heads, head_dim]
// of `element` (f32, f16, bf16, or int8/fp8 e4m3 with [num_blocks, kv_heads,
// page_size] f32 scales beside it, kvScaleIndex).
struct KvPoolShape {
  int64_t num_blocks = 0;
  int page_size = 0;
  int kv_heads = 0;
  int head_dim = 0;
  KvElement element = KvElement::kF32;

  int64_t slots() const { return num_blocks * page_size; }
  // Elements per token slot.
  int64_t slotElems() const { return int64_t(kv_heads) * head_dim; }
};

// k, v:         [tokens, kv_heads, head_dim] f32 (this step's new keys/values)
// slot_mapping: [tokens] i64; slot < 0 skips the token (padding), otherwise
//               it must be < num_blocks * page_size
// k_pool, v_pool: [num_blocks, page_size, kv_heads, head_dim] of pool.element,
//               written rounded to it (nearest even), or for int8/fp8 quantized
//               a (token, kv head) row at a time (kv_quant.h)
// k_scales, v_scales: [num_blocks, kv_heads, page_size] f32, each row's scale;
//               required for int8/fp8 pools, null for the float ones
// All slots are checked before anything is written.
Status appendKvPaged(const float* k, const float* v, int64_t tokens, const int64_t* slot_mapping,
                     const KvPoolShape& pool, void* k_pool, void* v_pool, float* k_scales = nullptr,
                     float* v_scales = nullptr);

// The scale pointers must be given exactly for the pools that have scales;
// `kernel` names the caller in the error.
Status checkKvScales(const char* kernel, KvElement element, const void* k_scales, const void* v_scales);

}  // namespace kiln::cpu
