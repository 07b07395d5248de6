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

inline std::vector<double> attentionReference(const AttentionData& a, double scale, bool tree) {
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
