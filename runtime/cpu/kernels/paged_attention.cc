#include "runtime/cpu/kernels/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/cpu/kernels/ggml_vec.h"
#include "runtime/kv/kv_quant.h"
#include "runtime/numerics/quant.h"
#include "runtime/support/thread_pool.h"

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
  KILN_RETURN_IF_ERROR(checkKvScales("paged_attention", p.element, a.k_scales, a.v_scales));
  if (a.sliding_window < 0 || (a.sliding_window > 0 && a.tree_masks))
    return makeError("paged_attention: sliding_window {} is invalid: expected >= 0, and 0 with tree masks",
                     a.sliding_window);
  if (a.tree_ancestors && (a.tree_masks || a.sliding_window > 0 || a.tree_stride <= 0))
    return makeError("paged_attention: tree_ancestors with tree_stride {} is invalid: expected a positive stride, "
                     "no tree_masks and no window",
                     a.tree_stride);
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
    if (a.tree_ancestors && q_len > a.tree_stride)
      return makeError("paged_attention: sequence {} brings a tree of {} nodes: the mask holds {}", b, q_len,
                       a.tree_stride);
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

// Speculative verify's queries of one (sequence, head) (tree_ancestors):
// each query gathers the keys it sees (the committed prefix, then its tree
// ancestors and itself, in key order) and is computed as a one-token decode
// over them, so its rounding is that of decoding its path token by token.
// `keys` / `values` hold every key's row; they are compacted in place per
// query into the tail scratch after kv_len.
void attendTreeQueries(const PagedAttentionArgs& a, int h, int32_t q_begin, int32_t q_len, int32_t kv_len,
                       std::vector<float>& scores, std::vector<float>& probs, std::vector<const float*>& values,
                       std::vector<const float*>& keys) {
  const GgmlVec& vec = ggmlVec();
  const int d = a.pool.head_dim;
  const int32_t prefix = kv_len - q_len;
  thread_local std::vector<const float*> seen_keys, seen_values;
  for (int32_t i = 0; i < q_len; ++i) {
    const int64_t token = q_begin + i;
    const float* q = a.q + (token * a.num_heads + h) * d;
    float* o = a.out + (token * a.num_heads + h) * d;
    const uint8_t* mask_row = a.tree_ancestors + token * a.tree_stride;
    seen_keys.assign(keys.begin(), keys.begin() + prefix);
    seen_values.assign(values.begin(), values.begin() + prefix);
    for (int32_t j = 0; j < q_len; ++j)
      if (mask_row[j]) {
        seen_keys.push_back(keys[size_t(prefix + j)]);
        seen_values.push_back(values[size_t(prefix + j)]);
      }
    const int32_t seen = int32_t(seen_keys.size());
    if (seen == 0) {
      std::fill(o, o + d, 0.0f);
      continue;
    }
    float max = -INFINITY;
    for (int32_t j = 0; j < seen; ++j) {
      scores[size_t(j)] = vec.dot(q, seen_keys[size_t(j)], d) * a.scale;
      max = std::max(max, scores[size_t(j)]);
    }
    const int64_t n = (int64_t(seen) + vec.lanes - 1) / vec.lanes * vec.lanes;
    std::fill(scores.begin() + seen, scores.begin() + n, -INFINITY);
    const double sum = vec.softMax(probs.data(), scores.data(), n, max);
    const float inv = float(1.0 / sum);
    for (int32_t j = 0; j < seen; ++j) probs[size_t(j)] *= inv;
    vec.weightedSum(probs.data(), seen_values.data(), seen, d, /*batch=*/false, o);
  }
}

// One (sequence, head): every query token of the sequence against its keys,
// rounded as llama.cpp's non-flash attention rounds (ggml_vec.h):
//   scores   kq = ggml_vec_dot_f32(q, k_j), then kq * scale
//   softmax  max; ggml_vec_soft_max_f32 over vectors aligned at key 0 (masked
//            and missing keys are exp(-inf) = 0); p_j = e_j * f32(1 / sum)
//   output   V^T · p, in tinyBLAS's order when the sequence brings >= 2
//            query tokens in this call (llama.cpp's prompt batches), else in
//            ggml_vec_dot_f32's (its single-token decode steps).
// The order depends only on this sequence's own token count, never on other
// sequences in the batch.
void attendSequenceHead(const PagedAttentionArgs& a, int b, int h, std::vector<float>& scores,
                        std::vector<float>& probs, std::vector<const float*>& values,
                        std::vector<const float*>& keys, std::vector<float>& widened) {
  const GgmlVec& vec = ggmlVec();
  const KvPoolShape& p = a.pool;
  const int d = p.head_dim;
  const int kv_head = h / (a.num_heads / p.kv_heads);
  const int32_t q_begin = a.query_start[b];
  const int32_t q_len = a.query_start[b + 1] - q_begin;
  const int32_t kv_len = a.kv_len[b];
  const int32_t* blocks = a.block_table + int64_t(b) * a.max_blocks_per_seq;
  const uint8_t* mask = a.tree_masks ? a.tree_masks[b] : nullptr;
  const int64_t slot_elems = p.slotElems();
  auto slotOf = [&](int32_t j) {
    return int64_t(blocks[j / p.page_size]) * p.page_size + j % p.page_size;
  };

  // Key and value rows of this head, in key order.
  const int64_t padded = (int64_t(kv_len) + vec.lanes - 1) / vec.lanes * vec.lanes;
  if (int64_t(scores.size()) < padded) {
    scores.resize(size_t(padded));
    probs.resize(size_t(padded));
  }
  values.resize(size_t(kv_len));
  keys.resize(size_t(kv_len));
  const bool f32 = p.element == KvElement::kF32;
  if (!f32) widened.resize(size_t(2) * kv_len * d);  // this head's keys, then its values, as f32
  // Row j of `pool` for this head: in the pool itself (f32), or widened
  // (f16, bf16), or decoded with the row's scale (int8, fp8).
  auto row = [&](const void* pool, const float* scales, int32_t j, int64_t widened_at) -> const float* {
    const int64_t slot = slotOf(j), at = slot * slot_elems + int64_t(kv_head) * d;
    if (f32) return static_cast<const float*>(pool) + at;
    float* out = widened.data() + widened_at;
    if (scales) {
      dequantizeKvRow(static_cast<const uint8_t*>(pool) + at, scales[kvScaleIndex(slot, kv_head, p.page_size, p.kv_heads)], d, p.element, out);
      return out;
    }
    const uint16_t* half = static_cast<const uint16_t*>(pool) + at;
    for (int e = 0; e < d; ++e) out[e] = p.element == KvElement::kF16 ? f16ToF32(half[e]) : bf16ToF32(half[e]);
    return out;
  };
  // First key any query of this call sees: earlier keys are outside every
  // window and never read (their rows stay unset; their scores are -inf).
  auto windowBegin = [&](int32_t i) -> int32_t {
    if (a.sliding_window <= 0) return 0;
    const int64_t begin = int64_t(kv_len) - q_len + i - a.sliding_window + 1;
    return begin > 0 ? int32_t(begin) : 0;
  };
  const int32_t first_key = windowBegin(0);
  for (int32_t j = first_key; j < kv_len; ++j) {
    keys[size_t(j)] = row(a.k_pool, a.k_scales, j, int64_t(j) * d);
    values[size_t(j)] = row(a.v_pool, a.v_scales, j, (int64_t(kv_len) + j) * d);
  }

  if (a.tree_ancestors) {
    attendTreeQueries(a, h, q_begin, q_len, kv_len, scores, probs, values, keys);
    return;
  }
  for (int32_t i = 0; i < q_len; ++i) {
    const int64_t token = q_begin + i;
    const float* q = a.q + (token * a.num_heads + h) * d;
    float* o = a.out + (token * a.num_heads + h) * d;
    const uint8_t* mask_row = mask ? mask + int64_t(i) * kv_len : nullptr;
    const int32_t key_end = mask ? kv_len : kv_len - q_len + i + 1;  // exclusive
    const int32_t key_begin = windowBegin(i);
    float max = -INFINITY;
    for (int32_t j = 0; j < key_end; ++j) {
      if (j < key_begin || (mask_row && !mask_row[j])) {
        scores[size_t(j)] = -INFINITY;
        continue;
      }
      scores[size_t(j)] = vec.dot(q, keys[size_t(j)], d) * a.scale;
      max = std::max(max, scores[size_t(j)]);
    }
    if (max == -INFINITY) {  // sees no key
      std::fill(o, o + d, 0.0f);
      continue;
    }
    const int64_t n = (int64_t(key_end) + vec.lanes - 1) / vec.lanes * vec.lanes;
    std::fill(scores.begin() + key_end, scores.begin() + n, -INFINITY);
    const double sum = vec.softMax(probs.data(), scores.data(), n, max);
    const float inv = float(1.0 / sum);
    for (int32_t j = 0; j < key_end; ++j) probs[size_t(j)] *= inv;
    if (key_begin > 0) {  // the window: V^T p over its keys only (the rest weigh 0)
      vec.weightedSum(probs.data() + key_begin, values.data() + key_begin, key_end - key_begin, d, q_len >= 2, o);
      continue;
    }
    vec.weightedSum(probs.data(), values.data(), key_end, d, q_len >= 2, o);
  }
}

}  // namespace

Status pagedAttention(const PagedAttentionArgs& args) {
  KILN_RETURN_IF_ERROR(checkArgs(args));
  const int seq_begin = args.seq_begin, seq_end = args.seq_end < 0 ? args.num_seqs : args.seq_end;
  const int head_begin = args.head_begin, head_end = args.head_end < 0 ? args.num_heads : args.head_end;
  if (seq_begin < 0 || seq_begin > seq_end || seq_end > args.num_seqs || head_begin < 0 || head_begin > head_end ||
      head_end > args.num_heads)
    return makeError("paged_attention: sequences [{}, {}) and heads [{}, {}) are not inside the batch's {} sequences "
                     "and {} heads",
                     seq_begin, seq_end, head_begin, head_end, args.num_seqs, args.num_heads);
  const int heads = head_end - head_begin;
  const int64_t items = int64_t(seq_end - seq_begin) * heads;
  parallelFor(items, 1, [&](int64_t w0, int64_t w1) {
    // [kv_len] scratch, grown to the longest context and then reused.
    thread_local std::vector<float> scores, probs, widened;
    thread_local std::vector<const float*> values, keys;
    for (int64_t w = w0; w < w1; ++w)
      attendSequenceHead(args, seq_begin + int(w / heads), head_begin + int(w % heads), scores, probs, values, keys,
                         widened);
  });
  return Status::success();
}

}  // namespace kiln::cpu
