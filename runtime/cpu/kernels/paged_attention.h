// Attention over a ragged batch whose keys/values live in the paged pool.
// Prefill chunks and decode tokens of many sequences run in one call.
#pragma once

#include <cstdint>

#include "runtime/cpu/kernels/paged_kv.h"
#include "runtime/support/error.h"

namespace kiln::cpu {

struct PagedAttentionArgs {
  const float* q = nullptr;  // [num_tokens, num_heads, head_dim] f32
  float* out = nullptr;      // [num_tokens, num_heads, head_dim] f32 (must not alias q)
  int64_t num_tokens = 0;
  int num_seqs = 0;
  int num_heads = 0;         // query heads; a multiple of pool.kv_heads (GQA)

  // query_start: [num_seqs + 1] i32, sequence b owns tokens
  //   [query_start[b], query_start[b+1]); query_start[num_seqs] == num_tokens
  const int32_t* query_start = nullptr;
  // kv_len: [num_seqs] i32 context length including this step's tokens (their
  //   K/V must already be appended); q_len_b <= kv_len[b].
  const int32_t* kv_len = nullptr;
  // block_table: [num_seqs, max_blocks_per_seq] i32 pool block ids; key j of
  //   sequence b is at slot block_table[b][j / page_size] * page_size + j % page_size.
  const int32_t* block_table = nullptr;
  int max_blocks_per_seq = 0;

  // k_pool, v_pool: [num_blocks, page_size, kv_heads, head_dim] of
  //   pool.element (f32, f16, bf16, int8, fp8 e4m3)
  const void* k_pool = nullptr;
  const void* v_pool = nullptr;
  // k_scales, v_scales: [num_blocks, kv_heads, page_size] f32, the scale of
  //   each (slot, kv head) row of an int8/fp8 pool; null for the float pools.
  const float* k_scales = nullptr;
  const float* v_scales = nullptr;
  KvPoolShape pool;

  float scale = 0.0f;  // logits = q·k * scale, usually 1/sqrt(head_dim)
  // > 0: the query at position p sees keys (p - sliding_window, p] only
  // (Mistral's window); 0: every key up to p. Not with tree_masks.
  int64_t sliding_window = 0;

  // Optional tree masks for speculative verify: tree_masks[b] is null (plain
  // causal) or [q_len_b, kv_len[b]] u8 where nonzero means "query i may see key
  // j". When given it replaces the causal rule for that sequence. Null array =
  // all causal.
  const uint8_t* const* tree_masks = nullptr;

  // Speculative verify's ancestor mask, the plan's tree_mask value (the CUDA
  // kernels' layout): [num_tokens, tree_stride] u8. Query t of sequence b
  // (q_len tokens, prefix = kv_len - q_len) sees every key j < prefix and
  // tree key j >= prefix iff tree_ancestors[t][j - prefix] != 0. Each such
  // query runs as a one-token decode over exactly the keys it sees, in key
  // order, so a node's output is the one plain decoding of its path gives.
  // Not with tree_masks or a window.
  const uint8_t* tree_ancestors = nullptr;
  int tree_stride = 0;
  // The (sequence, head) pairs to compute: sequences [seq_begin, seq_end)
  // and query heads [head_begin, head_end), -1 for the last; the rest of
  // `out` is left as it is (a megakernel task's tile, task_interpreter.h).
  int seq_begin = 0, seq_end = -1;
  int head_begin = 0, head_end = -1;
};

// Causal rule: query i of sequence b sits at absolute position
// p = kv_len[b] - q_len_b + i and attends keys 0..p (p - W + 1..p with a
// sliding window W: the keys before the sequence's first window are never
// read, and the rounding is that of llama.cpp's masked attention). Head h reads kv head
// h / (num_heads / kv_heads). f32, parallel over (sequence, head), rounded
// step by step as llama.cpp's (non-flash) attention: ggml's q·k dot, its
// softmax (vectorized expf, f64 sum), and V^T·p in the order llama.cpp uses
// for a batch of this sequence's size (>= 2 tokens or 1); see
// attendSequenceHead. A query that sees no key gets zeros. f16 and bf16
// pools are widened to f32 a (sequence, head) at a time, int8 and fp8 rows
// decoded with their own scales (code * scale) likewise; the arithmetic is
// the same.
Status pagedAttention(const PagedAttentionArgs& args);

}  // namespace kiln::cpu
