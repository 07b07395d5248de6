// How the CUDA executor shapes one forward launch: the launch parameters a
// captured graph depends on, the split-KV partition count of a decode batch
// and the block-table stride of a decode graph. Pure functions of the batch
// and the device, kept apart so they are tested without a GPU.
#pragma once

#include <algorithm>
#include <cstdint>
#include <tuple>

namespace kiln::cuda {

// Decode batches run decode_attention over key partitions (split-KV) and
// merge them with attention_combine: at most kMaxSplits partitions, and at
// most kSplitRows (token, partition) rows of partials in all, the scratch
// the executor allocates (capped by the token budget).
constexpr int kMaxSplits = 64;
constexpr int64_t kSplitRows = 4096;

// What one forward launch depends on besides the device-side inputs: a CUDA
// graph captured for one shape replays for every batch of that shape.
struct LaunchShape {
  int64_t n = 0, b = 0;  // tokens, sequences
  int max_blocks = 0;    // row stride of block_tables on the device
  int splits = 0;        // split-KV partitions of a decode batch; 0: not split (prefill)
  int max_q_len = 1;     // longest sequence's tokens in this batch
  bool greedy = false;   // ends in the argmax (tokens back) instead of logits back
  bool operator<(const LaunchShape& o) const {
    return std::tie(n, b, max_blocks, splits, max_q_len, greedy) <
           std::tie(o.n, o.b, o.max_blocks, o.splits, o.max_q_len, o.greedy);
  }
};

// Split-KV partitions for a decode batch, or 0 for the unsplit kernel. The
// unsplit paged_attention walks a block's keys in 128-key chunks with one
// (token, kv head) per block: fine for a few dozen keys, far slower than
// decode_attention (tensor cores, pipelined copies, split-KV) past them. So:
// past 64 keys, decode_attention with about two blocks per SM (its
// residency at head_dim 128) and at least kMinSplitKeys keys per partition,
// a power of two so a growing context re-captures its graph only when the
// count doubles. A partition costs its block a merge at the end (three
// round trips to L2, split_kv.cuh) that one partition does without, so up
// to kOneSplitKeys keys take one (docs/performance.md has the timings).
constexpr int kOneSplitKeys = 256, kMinSplitKeys = 128;
inline int decodeSplits(int64_t b, int kv_heads, int max_kv_len, int sms) {
  if (max_kv_len <= 64) return 0;
  if (max_kv_len <= kOneSplitKeys) return 1;
  const int64_t blocks = std::max<int64_t>(b * kv_heads, 1);
  const int64_t want = std::min<int64_t>({2 * int64_t(sms) / blocks, max_kv_len / kMinSplitKeys, kMaxSplits});
  int splits = 1;
  while (splits * 2 <= want) splits *= 2;
  return splits;
}

// The block-table row stride a decode graph is captured for: the next power
// of two of the batch's own (at least 16), so a growing context re-captures
// only when it doubles.
inline int graphStride(int max_blocks, int64_t num_blocks) {
  int stride = 16;
  while (stride < max_blocks) stride *= 2;
  return int(std::min<int64_t>(stride, std::max<int64_t>(num_blocks, max_blocks)));
}

}  // namespace kiln::cuda
