#include "runtime/cpu/kernels/paged_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "runtime/cpu/kernels/ggml_vec.h"
#include "runtime/kv/kv_quant.h"
#include "runtime/numerics/quant.h"
#include "runtime/numerics/testing.h"

namespace kiln::cpu {
namespace {

// A ragged batch with contiguous per-sequence K/V (for the reference) and the
// same values scattered into a pool through shuffled block tables.
struct Batch {
  int heads = 0;
  KvPoolShape pool;
  std::vector<int32_t> query_start, kv_len, block_table;
  int max_blocks = 0;
  std::vector<std::vector<float>> keys, values;  // per sequence [kv_len, kvh, d]
  std::vector<float> q, k_pool, v_pool;
  std::vector<std::vector<uint8_t>> masks;       // per sequence [q_len, kv_len] or empty

  int64_t tokens() const { return query_start.back(); }
  int qLen(int b) const { return query_start[size_t(b) + 1] - query_start[size_t(b)]; }
};

Batch makeBatch(std::mt19937& rng, const std::vector<std::pair<int, int>>& q_and_kv_lens,
                int heads, int kv_heads, int head_dim, int page_size) {
  Batch batch;
  batch.heads = heads;
  batch.query_start = {0};
  int total_blocks = 0;
  for (auto [q_len, kv_len] : q_and_kv_lens) {
    batch.query_start.push_back(batch.query_start.back() + q_len);
    batch.kv_len.push_back(kv_len);
    const int blocks = (kv_len + page_size - 1) / page_size;
    batch.max_blocks = std::max(batch.max_blocks, blocks);
    total_blocks += blocks;
  }
  batch.max_blocks += 1;  // unused trailing entries must be ignored
  const int extra_blocks = 3;
  batch.pool = KvPoolShape{total_blocks + extra_blocks, page_size, kv_heads, head_dim};
  std::vector<int32_t> ids(size_t(batch.pool.num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  const int64_t elems = batch.pool.slotElems();
  batch.k_pool = testing::poisoned(size_t(batch.pool.slots() * elems));
  batch.v_pool = testing::poisoned(size_t(batch.pool.slots() * elems));
  batch.block_table.assign(q_and_kv_lens.size() * size_t(batch.max_blocks), -7);
  size_t next_id = 0;
  for (size_t b = 0; b < q_and_kv_lens.size(); ++b) {
    const int kv_len = batch.kv_len[b];
    batch.keys.push_back(testing::randomFloats(rng, size_t(kv_len * elems)));
    batch.values.push_back(testing::randomFloats(rng, size_t(kv_len * elems)));
    for (int j = 0; j < kv_len; ++j) {
      if (j % page_size == 0) batch.block_table[b * size_t(batch.max_blocks) + size_t(j / page_size)] = ids[next_id++];
      const int64_t block = batch.block_table[b * size_t(batch.max_blocks) + size_t(j / page_size)];
      const int64_t base = (block * page_size + j % page_size) * elems;
      std::copy_n(batch.keys[b].begin() + j * elems, elems, batch.k_pool.begin() + base);
      std::copy_n(batch.values[b].begin() + j * elems, elems, batch.v_pool.begin() + base);
    }
  }
  batch.q = testing::randomFloats(rng, size_t(batch.tokens() * heads * head_dim), -2.0f, 2.0f);
  batch.masks.resize(q_and_kv_lens.size());
  return batch;
}

PagedAttentionArgs argsFor(Batch& batch, std::vector<float>& out,
                           std::vector<const uint8_t*>& mask_ptrs) {
  PagedAttentionArgs args;
  args.q = batch.q.data();
  args.out = out.data();
  args.num_tokens = batch.tokens();
  args.num_seqs = int(batch.kv_len.size());
  args.num_heads = batch.heads;
  args.query_start = batch.query_start.data();
  args.kv_len = batch.kv_len.data();
  args.block_table = batch.block_table.data();
  args.max_blocks_per_seq = batch.max_blocks;
  args.k_pool = batch.k_pool.data();
  args.v_pool = batch.v_pool.data();
  args.pool = batch.pool;
  args.scale = 1.0f / std::sqrt(float(batch.pool.head_dim));
  bool any_mask = false;
  mask_ptrs.clear();
  for (auto& m : batch.masks) {
    mask_ptrs.push_back(m.empty() ? nullptr : m.data());
    any_mask |= !m.empty();
  }
  args.tree_masks = any_mask ? mask_ptrs.data() : nullptr;
  return args;
}

// Plain softmax(q·Kᵀ·scale)·V in float64 over the visible keys, with the
// batch's keys and values: [tokens, heads, head_dim].
std::vector<double> referenceAttention(const Batch& batch, float scale) {
  const int d = batch.pool.head_dim, kvh = batch.pool.kv_heads;
  std::vector<double> out(size_t(batch.tokens() * batch.heads * d));
  for (size_t b = 0; b < batch.kv_len.size(); ++b) {
    const int q_len = batch.qLen(int(b)), kv_len = batch.kv_len[b];
    for (int i = 0; i < q_len; ++i) {
      const int64_t token = batch.query_start[b] + i;
      for (int h = 0; h < batch.heads; ++h) {
        const int g = h / (batch.heads / kvh);
        const float* q = batch.q.data() + (token * batch.heads + h) * d;
        std::vector<double> scores;
        std::vector<int> keys;
        for (int j = 0; j < kv_len; ++j) {
          const bool visible = batch.masks[b].empty()
                                   ? j <= kv_len - q_len + i
                                   : batch.masks[b][size_t(i) * kv_len + j] != 0;
          if (!visible) continue;
          double s = 0.0;
          for (int e = 0; e < d; ++e) s += double(q[e]) * batch.keys[b][size_t((j * kvh + g) * d + e)];
          scores.push_back(s * scale);
          keys.push_back(j);
        }
        double max = -INFINITY, sum = 0.0;
        for (double s : scores) max = std::max(max, s);
        for (double& s : scores) sum += (s = std::exp(s - max));
        for (int e = 0; e < d; ++e) {
          double expected = 0.0;
          for (size_t n = 0; n < keys.size(); ++n)
            expected += scores[n] / sum * batch.values[b][size_t((keys[n] * kvh + g) * d + e)];
          out[size_t((token * batch.heads + h) * d + e)] = expected;
        }
      }
    }
  }
  return out;
}

void expectMatchesReference(const Batch& batch, const std::vector<float>& out, float scale) {
  const std::vector<double> expected = referenceAttention(batch, scale);
  for (size_t i = 0; i < expected.size(); ++i) ASSERT_NEAR(out[i], expected[i], 2e-5) << "output element " << i;
}

TEST(PagedAttentionTest, RaggedBatchPrefillChunksAndDecode) {
  std::mt19937 rng(70);
  struct Config { int heads, kv_heads, head_dim, page_size; };
  for (Config c : {Config{4, 2, 16, 4}, Config{3, 3, 7, 5}, Config{8, 1, 64, 16}, Config{2, 1, 33, 1}}) {
    // (q_len, kv_len): full prefill, chunked prefill continuing a context,
    // decode at page boundaries and not, and an idle sequence.
    Batch batch = makeBatch(rng, {{9, 9}, {5, 23}, {1, 17}, {1, 16}, {0, 4}, {1, 1}}, c.heads,
                            c.kv_heads, c.head_dim, c.page_size);
    std::vector<float> out = testing::poisoned(batch.q.size());
    std::vector<const uint8_t*> masks;
    PagedAttentionArgs args = argsFor(batch, out, masks);
    Status s = pagedAttention(args);
    ASSERT_TRUE(s.ok()) << s.error().message;
    expectMatchesReference(batch, out, args.scale);
  }
}

// f16 and bf16 pools: the kernel attends to the values the pool holds, the
// keys and values rounded to the pool's type (the reference takes those
// rounded values in float64).
TEST(PagedAttentionTest, HalfPrecisionPoolsAttendToTheirValues) {
  std::mt19937 rng(72);
  for (KvElement element : {KvElement::kF16, KvElement::kBf16}) {
    Batch batch = makeBatch(rng, {{6, 6}, {3, 21}, {1, 17}, {1, 1}}, 4, 2, 16, 4);
    auto round = [&](float x) {
      return element == KvElement::kF16 ? f16ToF32(f32ToF16(x)) : bf16ToF32(f32ToBf16(x));
    };
    for (auto& rows : {&batch.keys, &batch.values})
      for (std::vector<float>& seq : *rows)
        for (float& x : seq) x = round(x);
    auto half = [&](const std::vector<float>& pool) {
      std::vector<uint16_t> out(pool.size());
      for (size_t i = 0; i < pool.size(); ++i)
        out[i] = element == KvElement::kF16 ? f32ToF16(pool[i]) : f32ToBf16(pool[i]);
      return out;
    };
    const std::vector<uint16_t> k_half = half(batch.k_pool), v_half = half(batch.v_pool);
    std::vector<float> out = testing::poisoned(batch.q.size());
    std::vector<const uint8_t*> masks;
    PagedAttentionArgs args = argsFor(batch, out, masks);
    args.pool.element = element;
    args.k_pool = k_half.data();
    args.v_pool = v_half.data();
    ASSERT_TRUE(pagedAttention(args).ok());
    expectMatchesReference(batch, out, args.scale);
  }
}

// An int8 or fp8 pool filled from the batch through appendKvPaged (codes
// poisoned and scales NaN where no token goes), and the batch's keys and
// values replaced by what the pool holds: code * scale of each row.
struct ScaledPools {
  std::vector<uint8_t> k, v;
  std::vector<float> k_scales, v_scales;
};

ScaledPools appendScaled(Batch& batch, KvElement element) {
  const KvPoolShape shape{batch.pool.num_blocks, batch.pool.page_size, batch.pool.kv_heads, batch.pool.head_dim, element};
  const int64_t elems = shape.slotElems();
  const int d = shape.head_dim;
  ScaledPools pools{std::vector<uint8_t>(size_t(shape.slots() * elems), 0xff), {}, testing::poisoned(size_t(shape.slots() * shape.kv_heads)), {}};
  pools.v = pools.k;
  pools.v_scales = pools.k_scales;
  for (size_t b = 0; b < batch.kv_len.size(); ++b) {
    std::vector<int64_t> slots;
    for (int j = 0; j < batch.kv_len[b]; ++j)
      slots.push_back(int64_t(batch.block_table[b * size_t(batch.max_blocks) + size_t(j / shape.page_size)]) * shape.page_size + j % shape.page_size);
    EXPECT_TRUE(appendKvPaged(batch.keys[b].data(), batch.values[b].data(), int64_t(slots.size()), slots.data(), shape, pools.k.data(),
                              pools.v.data(), pools.k_scales.data(), pools.v_scales.data())
                    .ok());
    for (int j = 0; j < batch.kv_len[b]; ++j)
      for (int g = 0; g < shape.kv_heads; ++g) {
        const int64_t row = slots[size_t(j)] * shape.kv_heads + g;
        const size_t scale = size_t(kvScaleIndex(slots[size_t(j)], g, shape.page_size, shape.kv_heads));
        dequantizeKvRow(pools.k.data() + row * d, pools.k_scales[scale], d, element, &batch.keys[b][size_t((j * shape.kv_heads + g) * d)]);
        dequantizeKvRow(pools.v.data() + row * d, pools.v_scales[scale], d, element, &batch.values[b][size_t((j * shape.kv_heads + g) * d)]);
      }
  }
  return pools;
}

PagedAttentionArgs scaledArgs(Batch& batch, const ScaledPools& pools, KvElement element, std::vector<float>& out,
                              std::vector<const uint8_t*>& masks) {
  PagedAttentionArgs args = argsFor(batch, out, masks);
  args.pool.element = element;
  args.k_pool = pools.k.data();
  args.v_pool = pools.v.data();
  args.k_scales = pools.k_scales.data();
  args.v_scales = pools.v_scales.data();
  return args;
}

// Against float64 attention over the keys and values before quantization,
// within a bound derived from the quantization step: each key element is off
// by at most half a step (int8: scale / 2; e4m3: |x| / 16, or 2^-10 scale
// among the subnormals), so a score by at most
//   delta = scale_qk * sum_e |q_e| * err_e,
// the probabilities by a factor within e^(±2 delta), and the output by at
// most (e^(2 delta) - 1) * max|v| + the values' own half step.
TEST(PagedAttentionTest, ScaledPoolsStayWithinTheQuantizationBound) {
  std::mt19937 rng(75);
  for (KvElement element : {KvElement::kInt8, KvElement::kFp8E4M3}) {
    Batch batch = makeBatch(rng, {{7, 7}, {3, 21}, {1, 17}, {1, 1}}, 6, 2, 32, 4);
    const Batch original = batch;
    const ScaledPools pools = appendScaled(batch, element);
    std::vector<float> out = testing::poisoned(batch.q.size());
    std::vector<const uint8_t*> masks;
    const PagedAttentionArgs args = scaledArgs(batch, pools, element, out, masks);
    ASSERT_TRUE(pagedAttention(args).ok());
    // What the pool holds, attended in float64: only f32 rounding apart.
    expectMatchesReference(batch, out, args.scale);

    const std::vector<double> exact = referenceAttention(original, args.scale);
    const int d = batch.pool.head_dim, kvh = batch.pool.kv_heads;
    auto halfStep = [&](double x, double absmax) {
      const double scale = absmax / kvQuantMax(element);
      return element == KvElement::kInt8 ? scale / 2 : std::max(std::fabs(x) / 16, std::ldexp(scale, -10));
    };
    for (size_t b = 0; b < batch.kv_len.size(); ++b)
      for (int i = 0; i < batch.qLen(int(b)); ++i)
        for (int h = 0; h < batch.heads; ++h) {
          const int64_t token = batch.query_start[b] + i, g = h / (batch.heads / kvh);
          const float* q = batch.q.data() + (token * batch.heads + h) * d;
          double delta = 0, v_max = 0, v_err = 0;
          for (int j = 0; j < batch.kv_len[b]; ++j) {
            const float* k = &original.keys[b][size_t((j * kvh + g) * d)];
            const float* v = &original.values[b][size_t((j * kvh + g) * d)];
            double k_absmax = 0, v_absmax = 0, score_err = 0;
            for (int e = 0; e < d; ++e) {
              k_absmax = std::max(k_absmax, std::fabs(double(k[e])));
              v_absmax = std::max(v_absmax, std::fabs(double(v[e])));
            }
            for (int e = 0; e < d; ++e) {
              score_err += std::fabs(q[e]) * halfStep(k[e], k_absmax);
              v_err = std::max(v_err, halfStep(v[e], v_absmax));
            }
            delta = std::max(delta, score_err * args.scale);
            v_max = std::max(v_max, v_absmax);
          }
          const double bound = std::expm1(2 * delta) * v_max + v_err + 1e-5;
          for (int e = 0; e < d; ++e) {
            const size_t at = size_t((token * batch.heads + h) * d + e);
            ASSERT_LE(std::fabs(out[at] - exact[at]), bound) << kvElementName(element) << " token " << token << " head " << h;
          }
        }
  }
}

// Every (token, head) row at its own magnitude, spread over six orders for
// the values and four for the keys: a kernel that ignores the scales, or
// takes another token's, head's, or the other pool's, is off by orders of
// magnitude.
TEST(PagedAttentionTest, ScaledPoolsUseEachRowsOwnScale) {
  std::mt19937 rng(76);
  std::uniform_real_distribution<float> decades(-3.0f, 3.0f);
  for (KvElement element : {KvElement::kInt8, KvElement::kFp8E4M3}) {
    Batch batch = makeBatch(rng, {{5, 5}, {2, 19}, {1, 33}}, 4, 2, 16, 4);
    const int d = batch.pool.head_dim;
    double v_max = 0;
    for (size_t b = 0; b < batch.kv_len.size(); ++b)
      for (size_t row = 0; row < batch.keys[b].size() / size_t(d); ++row) {
        const float k_gain = std::pow(10.0f, decades(rng) * 2.0f / 3.0f - 1.0f);  // 1e-3 .. 1e1
        const float v_gain = std::pow(10.0f, decades(rng));                       // 1e-3 .. 1e3
        for (int e = 0; e < d; ++e) {
          batch.keys[b][row * size_t(d) + size_t(e)] *= k_gain;
          batch.values[b][row * size_t(d) + size_t(e)] *= v_gain;
          v_max = std::max(v_max, std::fabs(double(batch.values[b][row * size_t(d) + size_t(e)])));
        }
      }
    const ScaledPools pools = appendScaled(batch, element);
    std::vector<float> out = testing::poisoned(batch.q.size());
    std::vector<const uint8_t*> masks;
    ASSERT_TRUE(pagedAttention(scaledArgs(batch, pools, element, out, masks)).ok());
    const std::vector<double> expected = referenceAttention(batch, 1.0f / std::sqrt(float(d)));
    double worst = 0;
    for (size_t i = 0; i < expected.size(); ++i) worst = std::max(worst, std::fabs(out[i] - expected[i]));
    EXPECT_LE(worst, 1e-4 * v_max) << kvElementName(element);
  }
}

TEST(PagedAttentionTest, ScaledPoolsNeedTheirScales) {
  std::mt19937 rng(77);
  Batch batch = makeBatch(rng, {{2, 6}}, 2, 1, 4, 4);
  const ScaledPools pools = appendScaled(batch, KvElement::kInt8);
  std::vector<float> out = testing::poisoned(batch.q.size());
  std::vector<const uint8_t*> masks;
  PagedAttentionArgs args = scaledArgs(batch, pools, KvElement::kInt8, out, masks);
  args.v_scales = nullptr;
  Status s = pagedAttention(args);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message,
            "paged_attention: int8 pools need their K and V scales ([num_blocks, kv_heads, page_size] f32)");
  PagedAttentionArgs f32 = argsFor(batch, out, masks);
  f32.k_scales = pools.k_scales.data();
  s = pagedAttention(f32);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message, "paged_attention: f32 pools have no scales, but scales were given");
}

TEST(PagedAttentionTest, TreeMaskReplacesCausalRule) {
  std::mt19937 rng(71);
  // Sequence 0 verifies a 4-node draft tree after a 6-token prefix; sequence 1 is plain decode.
  Batch batch = makeBatch(rng, {{4, 10}, {1, 5}}, 4, 2, 8, 4);
  std::vector<uint8_t> mask(4 * 10, 0);
  const int parent[4] = {-1, 0, 0, 1};  // node 0 root, 1 and 2 children of 0, 3 child of 1
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 6; ++j) mask[size_t(i * 10 + j)] = 1;
    for (int n = i; n >= 0; n = parent[n]) mask[size_t(i * 10 + 6 + n)] = 1;
  }
  batch.masks[0] = mask;
  std::vector<float> out = testing::poisoned(batch.q.size());
  std::vector<const uint8_t*> masks;
  PagedAttentionArgs args = argsFor(batch, out, masks);
  ASSERT_TRUE(pagedAttention(args).ok());
  expectMatchesReference(batch, out, args.scale);
}

// llama.cpp's rounding, restated with ggml's primitives (ggml_vec.h): q·k by
// ggml_vec_dot_f32, scaled; softmax over the keys zero-padded to whole
// vectors; p scaled by f32(1/sum); V^T·p in tinyBLAS's order for sequences
// with >= 2 query tokens, ggml_vec_dot_f32's for one.
TEST(PagedAttentionTest, RoundsAsLlamaCppBitForBit) {
  std::mt19937 rng(73);
  Batch batch = makeBatch(rng, {{5, 40}, {1, 70}, {2, 2}}, 6, 2, 64, 16);
  std::vector<float> out = testing::poisoned(size_t(batch.tokens() * batch.heads * 64));
  std::vector<const uint8_t*> masks;
  PagedAttentionArgs args = argsFor(batch, out, masks);
  ASSERT_TRUE(pagedAttention(args).ok());
  const GgmlVec& vec = ggmlVec();
  const int d = 64, kvh = batch.pool.kv_heads;
  for (size_t b = 0; b < batch.kv_len.size(); ++b) {
    const int q_len = batch.qLen(int(b)), kv_len = batch.kv_len[b];
    for (int i = 0; i < q_len; ++i) {
      const int64_t token = batch.query_start[b] + i;
      const int visible = kv_len - q_len + i + 1;
      const int padded = (visible + vec.lanes - 1) / vec.lanes * vec.lanes;
      for (int h = 0; h < batch.heads; ++h) {
        const int g = h / (batch.heads / kvh);
        const float* q = batch.q.data() + (token * batch.heads + h) * d;
        std::vector<float> scores(static_cast<size_t>(padded), -INFINITY);
        std::vector<float> p(static_cast<size_t>(padded));
        std::vector<const float*> rows;
        float max = -INFINITY;
        for (int j = 0; j < visible; ++j) {
          scores[size_t(j)] = vec.dot(q, &batch.keys[b][size_t((j * kvh + g) * d)], d) * args.scale;
          max = std::max(max, scores[size_t(j)]);
          rows.push_back(&batch.values[b][size_t((j * kvh + g) * d)]);
        }
        const float inv = float(1.0 / vec.softMax(p.data(), scores.data(), padded, max));
        for (float& v : p) v *= inv;
        std::vector<float> expected(static_cast<size_t>(d));
        vec.weightedSum(p.data(), rows.data(), visible, d, q_len >= 2, expected.data());
        for (int e = 0; e < d; ++e)
          ASSERT_EQ(out[size_t((token * batch.heads + h) * d + e)], expected[size_t(e)])
              << "seq " << b << " query " << i << " head " << h << " dim " << e;
      }
    }
  }
}

// A sequence's output depends on its own tokens only, not on its batch.
TEST(PagedAttentionTest, SequencesAreBatchInvariant) {
  std::mt19937 rng(74);
  Batch both = makeBatch(rng, {{4, 30}, {1, 50}}, 4, 2, 64, 16);
  std::vector<float> out_both = testing::poisoned(size_t(both.tokens() * 4 * 64));
  std::vector<const uint8_t*> masks;
  PagedAttentionArgs args = argsFor(both, out_both, masks);
  ASSERT_TRUE(pagedAttention(args).ok());
  for (int b = 0; b < 2; ++b) {
    // The same sequence alone: its block-table row, its query rows.
    PagedAttentionArgs solo = args;
    std::vector<int32_t> query_start = {0, both.qLen(b)};
    std::vector<float> out = testing::poisoned(size_t(both.qLen(b) * 4 * 64));
    solo.q = both.q.data() + int64_t(both.query_start[size_t(b)]) * 4 * 64;
    solo.out = out.data();
    solo.num_tokens = both.qLen(b);
    solo.num_seqs = 1;
    solo.query_start = query_start.data();
    solo.kv_len = both.kv_len.data() + b;
    solo.block_table = both.block_table.data() + size_t(b) * both.max_blocks;
    ASSERT_TRUE(pagedAttention(solo).ok());
    EXPECT_TRUE(std::equal(out.begin(), out.end(),
                           out_both.begin() + int64_t(both.query_start[size_t(b)]) * 4 * 64))
        << "sequence " << b;
  }
}

TEST(PagedAttentionTest, ReportsBadBlockAndShapes) {
  std::mt19937 rng(72);
  Batch batch = makeBatch(rng, {{2, 6}}, 2, 1, 4, 4);
  std::vector<float> out = testing::poisoned(batch.q.size());
  std::vector<const uint8_t*> masks;
  batch.block_table[1] = 99;
  Status s = pagedAttention(argsFor(batch, out, masks));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("block_table[1] = 99"), std::string::npos) << s.error().message;

  Batch short_kv = makeBatch(rng, {{3, 3}}, 2, 1, 4, 4);
  short_kv.kv_len[0] = 2;
  s = pagedAttention(argsFor(short_kv, out, masks));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("kv_len 2"), std::string::npos) << s.error().message;

  Batch gqa = makeBatch(rng, {{1, 3}}, 3, 2, 4, 4);
  EXPECT_FALSE(pagedAttention(argsFor(gqa, out, masks)).ok());
}

}  // namespace
}  // namespace kiln::cpu
