// Paged-attention test data and its float64 reference, shared by the GPU
// correctness test and the host emulations of flash_attention and
// decode_attention: a ragged batch of sequences whose keys and values sit in
// a bf16 pool behind a shuffled block table, and attention computed from the
// same bf16 values in double. Also the decode_attention tilings that the GPU
// test checks and kiln_attention_bench times.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "test/gpu/gpu_harness.h"

namespace kiln::gpu_test {

struct Batch {
  std::vector<int> q_len, kv_len;  // per sequence
};

struct AttentionData {
  int H = 0, Hkv = 0, D = 0, page = 16, blocks = 0, max_blocks = 0;
  std::vector<int> query_start, kv_lens, block_tables;
  std::vector<float> q, kpool, vpool;
  std::vector<uint16_t> qb, kb, vb;
  std::vector<uint8_t> tree;  // [N, tree_stride]
  int tree_stride = 0;
  int N = 0;
};

inline AttentionData makeAttention(std::mt19937& rng, int H, int Hkv, int D, const Batch& batch, bool tree,
                                   int page = 16) {
  AttentionData a;
  a.page = page;
  a.H = H;
  a.Hkv = Hkv;
  a.D = D;
  const int B = int(batch.q_len.size());
  a.query_start = {0};
  a.max_blocks = 0;
  for (int b = 0; b < B; ++b) {
    a.query_start.push_back(a.query_start.back() + batch.q_len[b]);
    a.max_blocks = std::max(a.max_blocks, (batch.kv_len[b] + a.page - 1) / a.page);
  }
  a.N = a.query_start.back();
  a.kv_lens = batch.kv_len;
  a.blocks = B * a.max_blocks + 3;
  std::vector<int> perm(a.blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  a.block_tables.assign(size_t(B) * a.max_blocks, 0);
  for (int i = 0; i < B * a.max_blocks; ++i) a.block_tables[i] = perm[i];
  a.qb = randomBf16(rng, size_t(a.N) * H * D, 1.0f, &a.q);
  a.kb = randomBf16(rng, size_t(a.blocks) * a.page * Hkv * D, 1.0f, &a.kpool);
  a.vb = randomBf16(rng, size_t(a.blocks) * a.page * Hkv * D, 1.0f, &a.vpool);
  if (tree) {
    a.tree_stride = *std::max_element(batch.q_len.begin(), batch.q_len.end());
    a.tree.assign(size_t(a.N) * a.tree_stride, 0);
    std::bernoulli_distribution coin(0.5);
    for (int b = 0; b < B; ++b)
      for (int i = 0; i < batch.q_len[b]; ++i)
        for (int j = 0; j <= i; ++j)  // ancestors come first; itself always
          a.tree[size_t(a.query_start[b] + i) * a.tree_stride + j] = (j == i || coin(rng)) ? 1 : 0;
  }
  return a;
}

// window > 0: query at position p sees keys (p - window, p] only (sliding window).
inline std::vector<double> attentionReference(const AttentionData& a, double scale, bool tree, int window = 0) {
  const int B = int(a.kv_lens.size()), G = a.H / a.Hkv;
  std::vector<double> out(size_t(a.N) * a.H * a.D, 0.0);
  for (int b = 0; b < B; ++b) {
    const int q_len = a.query_start[b + 1] - a.query_start[b], prefix = a.kv_lens[b] - q_len;
    for (int i = 0; i < q_len; ++i) {
      const int t = a.query_start[b] + i;
      for (int h = 0; h < a.H; ++h) {
        const int kvh = h / G;
        std::vector<double> s;
        std::vector<size_t> rows;
        for (int j = 0; j < a.kv_lens[b]; ++j) {
          bool visible = tree ? (j < prefix || a.tree[size_t(t) * a.tree_stride + (j - prefix)] != 0) : j <= prefix + i;
          if (window > 0 && j <= prefix + i - window) visible = false;
          if (!visible) continue;
          const size_t slot = size_t(a.block_tables[size_t(b) * a.max_blocks + j / a.page]) * a.page + j % a.page;
          const size_t row = (slot * a.Hkv + kvh) * a.D;
          double dot = 0;
          for (int d = 0; d < a.D; ++d) dot += double(a.q[(size_t(t) * a.H + h) * a.D + d]) * a.kpool[row + d];
          s.push_back(dot * scale);
          rows.push_back(row);
        }
        if (s.empty()) continue;
        const double m = *std::max_element(s.begin(), s.end());
        double l = 0;
        for (double& v : s) l += (v = std::exp(v - m));
        for (size_t j = 0; j < s.size(); ++j)
          for (int d = 0; d < a.D; ++d) out[(size_t(t) * a.H + h) * a.D + d] += s[j] / l * a.vpool[rows[j] + d];
      }
    }
  }
  return out;
}

// Sliding windows: the pool blocks of `a` wholly before the window of their
// sequence's first query (keys (p - window, p] with p = kv_len - q_len), which
// a windowed kernel must never read: the runtime may free and reuse them.
inline std::vector<int> blocksBeforeWindows(const AttentionData& a, int window) {
  std::vector<int> out;
  if (window <= 0) return out;
  for (size_t b = 0; b < a.kv_lens.size(); ++b) {
    const int q_len = a.query_start[b + 1] - a.query_start[b];
    const int first = std::max(0, a.kv_lens[b] - q_len - window + 1);  // first key of the first window
    for (int i = 0; i < first / a.page; ++i) out.push_back(a.block_tables[b * size_t(a.max_blocks) + i]);
  }
  return out;
}

// Sets every element of those blocks to NaN in the f32 and bf16 pools (a
// kernel that reads and weighs one, even by 0, gives NaN), and returns the
// byte ranges of a pool of `elem_bytes` elements at `pool` that stay
// readable: the others (cuda_emulation.h's emu::readable, for cp.async).
inline std::vector<std::pair<const unsigned char*, size_t>> poisonBlocksBeforeWindows(AttentionData& a, int window,
                                                                                      const void* k_pool,
                                                                                      const void* v_pool,
                                                                                      size_t elem_bytes) {
  const std::vector<int> poisoned = blocksBeforeWindows(a, window);
  const size_t block_elems = size_t(a.page) * a.Hkv * a.D;
  for (int blk : poisoned)
    for (size_t e = 0; e < block_elems; ++e) {
      const size_t at = size_t(blk) * block_elems + e;
      a.kpool[at] = a.vpool[at] = NAN;
      a.kb[at] = a.vb[at] = 0x7fc0;
    }
  std::vector<std::pair<const unsigned char*, size_t>> ranges;
  for (const void* pool : {k_pool, v_pool})
    for (int blk = 0; blk < a.blocks; ++blk)
      if (std::find(poisoned.begin(), poisoned.end(), blk) == poisoned.end())
        ranges.push_back({static_cast<const unsigned char*>(pool) + size_t(blk) * block_elems * elem_bytes,
                          block_elems * elem_bytes});
  return ranges;
}

// decode_attention's params over the defaults (attentionParams of
// runtime/cuda/kernel_test_cases.h): the tensor-core form's ring depths, the
// CUDA-core form and its tilings.
inline const std::vector<nlohmann::json>& decodeAttentionTilings() {
  using nlohmann::json;
  static const std::vector<json> tilings = {json::object(),
                                            {{"stages", 2}},
                                            {{"stages", 4}},
                                            {{"mma", false}},
                                            {{"mma", false}, {"chunks", 1}, {"keys", 4}, {"stages", 3}},
                                            {{"mma", false}, {"chunks", 2}, {"keys", 1}, {"stages", 6}},
                                            {{"mma", false}, {"chunks", 1}, {"keys", 2}, {"stages", 4}}};
  return tilings;
}

}  // namespace kiln::gpu_test
