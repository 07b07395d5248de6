#include "runtime/cpu/kernels/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/cpu/kernels/thread_pool.h"

namespace kiln::cpu {
namespace {

constexpr int kMaxHeadDim = 1024;

Status checkArgs(const PagedAttentionArgs& a) {
  const KvPoolShape& p = a.pool;
  if (a.num_tokens < 0 || a.num_seqs < 0 || a.num_heads <= 0 || p.kv_heads <= 0 ||
      p.head_dim <= 0 || p.head_dim > kMaxHeadDim || p.page_size <= 0 || p.num_blocks <= 0)
    return makeError("paged_attention: shape tokens={} seqs={} heads={} pool=[{}, {}, {}, {}] is "
                     "invalid (head_dim at most {})",
                     a.num_tokens, a.num_seqs, a.num_heads, p.num_blocks, p.page_size, p.kv_heads,
                     p.head_dim, kMaxHeadDim);
  if (a.num_heads % p.kv_heads != 0)
    return makeError("paged_attention: num_heads {} is invalid: expected a multiple of kv_heads {}",
                     a.num_heads, p.kv_heads);
  if (a.num_seqs == 0) return Status::success();
  if (a.query_start[0] != 0 || a.query_start[a.num_seqs] != a.num_tokens)
    return makeError("paged_attention: query_start runs from {} to {}: expected 0 to num_tokens {}",
                     a.query_start[0], a.query_start[a.num_seqs], a.num_tokens);
  for (int b = 0; b < a.num_seqs; ++b) {
    const int32_t q_len = a.query_start[b + 1] - a.query_start[b];
    if (q_len < 0)
      return makeError("paged_attention: query_start is not monotone at sequence {}", b);
    if (a.kv_len[b] < q_len)
      return makeError("paged_attention: sequence {} kv_len {} is invalid: expected >= its {} "
                       "query tokens",
                       b, a.kv_len[b], q_len);
    const int64_t blocks = (int64_t(a.kv_len[b]) + p.page_size - 1) / p.page_size;
    if (blocks > a.max_blocks_per_seq)
      return makeError("paged_attention: sequence {} kv_len {} needs {} blocks: the block table "
                       "has {} per sequence",
                       b, a.kv_len[b], blocks, a.max_blocks_per_seq);
    for (int64_t i = 0; i < blocks; ++i) {
      const int32_t block = a.block_table[int64_t(b) * a.max_blocks_per_seq + i];
      if (block < 0 || block >= p.num_blocks)
        return makeError("paged_attention: sequence {} block_table[{}] = {} is out of range: "
                         "expected 0 <= block < {}",
                         b, i, block, p.num_blocks);
    }
  }
  return Status::success();
}

// q·k with eight independent partial sums: a single running sum is one long
// dependent add chain the compiler may not reorder (no -ffast-math).
inline float dot(const float* a, const float* b, int n) {
  float partial[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int e = 0;
  for (; e + 8 <= n; e += 8)
    for (int l = 0; l < 8; ++l) partial[l] += a[e + l] * b[e + l];
  float sum = ((partial[0] + partial[1]) + (partial[2] + partial[3])) +
              ((partial[4] + partial[5]) + (partial[6] + partial[7]));
  for (; e < n; ++e) sum += a[e] * b[e];
  return sum;
}

// One (sequence, head): every query token of the sequence against its keys,
// a page at a time: scores of the page first, one rescale of the running sums
// per page when the maximum grows, then the weighted V accumulation.
// Cloned for AVX2 (256-bit dot and axpy), resolved once at load time.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx2", "default")))
#endif
void attendSequenceHead(const PagedAttentionArgs& a, int b, int h, float* scores) {
  const KvPoolShape& p = a.pool;
  const int d = p.head_dim;
  const int kv_head = h / (a.num_heads / p.kv_heads);
  const int32_t q_begin = a.query_start[b];
  const int32_t q_len = a.query_start[b + 1] - q_begin;
  const int32_t kv_len = a.kv_len[b];
  const int32_t* blocks = a.block_table + int64_t(b) * a.max_blocks_per_seq;
  const uint8_t* mask = a.tree_masks ? a.tree_masks[b] : nullptr;
  const int64_t slot_elems = p.slotElems();
  float acc[kMaxHeadDim];

  for (int32_t i = 0; i < q_len; ++i) {
    const int64_t token = q_begin + i;
    const float* q = a.q + (token * a.num_heads + h) * d;
    const uint8_t* mask_row = mask ? mask + int64_t(i) * kv_len : nullptr;
    const int32_t key_end = mask ? kv_len : kv_len - q_len + i + 1;  // exclusive
    float running_max = -INFINITY, denom = 0.0f;
    std::fill(acc, acc + d, 0.0f);
    for (int32_t page_start = 0; page_start < key_end; page_start += p.page_size) {
      const int32_t count = std::min(p.page_size, key_end - page_start);
      const int64_t base_slot = int64_t(blocks[page_start / p.page_size]) * p.page_size;
      const float* k_page = a.k_pool + base_slot * slot_elems + int64_t(kv_head) * d;
      const float* v_page = a.v_pool + base_slot * slot_elems + int64_t(kv_head) * d;
      float page_max = -INFINITY;
      for (int32_t j = 0; j < count; ++j) {
        if (mask_row && !mask_row[page_start + j]) {
          scores[j] = -INFINITY;
          continue;
        }
        scores[j] = dot(q, k_page + j * slot_elems, d) * a.scale;
        page_max = std::max(page_max, scores[j]);
      }
      if (page_max == -INFINITY) continue;  // whole page masked out
      if (page_max > running_max) {
        // New maximum: rescale what was accumulated under the old one.
        const float correction = std::exp(running_max - page_max);
        denom *= correction;
        for (int e = 0; e < d; ++e) acc[e] *= correction;
        running_max = page_max;
      }
      for (int32_t j = 0; j < count; ++j) {
        if (scores[j] == -INFINITY) continue;
        const float weight = std::exp(scores[j] - running_max);
        denom += weight;
        const float* v = v_page + j * slot_elems;
        for (int e = 0; e < d; ++e) acc[e] += weight * v[e];
      }
    }
    float* o = a.out + (token * a.num_heads + h) * d;
    const float inv = denom > 0.0f ? 1.0f / denom : 0.0f;
    for (int e = 0; e < d; ++e) o[e] = acc[e] * inv;
  }
}

}  // namespace

Status pagedAttention(const PagedAttentionArgs& args) {
  KILN_RETURN_IF_ERROR(checkArgs(args));
  const int64_t items = int64_t(args.num_seqs) * args.num_heads;
  parallelFor(items, 1, [&](int64_t w0, int64_t w1) {
    thread_local std::vector<float> scores;  // [page_size], reused across calls
    if (scores.size() < size_t(args.pool.page_size)) scores.resize(size_t(args.pool.page_size));
    for (int64_t w = w0; w < w1; ++w)
      attendSequenceHead(args, int(w / args.num_heads), int(w % args.num_heads), scores.data());
  });
  return Status::success();
}

}  // namespace kiln::cpu
