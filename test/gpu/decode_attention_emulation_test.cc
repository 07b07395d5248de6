// decode_attention's kernel bodies (the CUDA-core and the tensor-core form)
// run on the host, no GPU, on the emulated device of cuda_emulation.h (a
// fiber per CUDA thread; shuffles, barriers, ldmatrix and mma as rendezvous;
// lazy or eager cp.async with bounds-checked sources; NaN shared memory), so
// a missing wait or barrier, a slot read by the wrong thread or a wrong
// gather shows up as a wrong or NaN output. The partials go through the same
// merge as attention_combine and are compared with the float64 reference of
// kernels_gpu_test; untouched partial rows (never expected here) would be NaN.
// Each case runs again with the fused merge (split_arrivals), whose output
// is checked against the same reference.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "test/gpu/attention_reference.h"
#include "test/gpu/cuda_emulation.h"

// The kernel on the emulated device: after cuda_emulation.h, which supplies its intrinsics.
#include "codegen/kernels/decode_attention.cuh"

// ------------------------------------------------------------ the test

namespace kiln::gpu_test {
namespace {

namespace kk = kiln::kernels;

template <int H_, int Hkv_, int D_, class Kv_ = kk::bf16, int Chunks_ = kk::decode::default_chunks(H_ / Hkv_),
          int Keys_ = 4 / Chunks_, int Stages_ = kk::decode::kDefaultStages, int Page_ = 16>
struct Config {
  using Kv = Kv_;
  static constexpr int kHeads = H_, kKvHeads = Hkv_, kHeadDim = D_, kPageSize = Page_;
  static constexpr float kScale = D_ == 64 ? 0.125f : 0.0883883476f;
  static constexpr int kChunks = Chunks_, kKeys = Keys_, kStages = Stages_;
};

template <int H_, int Hkv_, int D_, int Stages_ = kk::decode::kMmaDefaultStages, int Page_ = 16>
struct MmaConfig {
  static constexpr bool kMma = true;
  static constexpr int kHeads = H_, kKvHeads = Hkv_, kHeadDim = D_, kPageSize = Page_, kStages = Stages_;
  static constexpr float kScale = D_ == 64 ? 0.125f : 0.0883883476f;
  static constexpr int kSmemBytes = kk::decode::mma_smem_bytes(D_, Stages_);
};
// A Config with a sliding window of W keys (attention_window.cuh).
template <class C, int W>
struct Windowed : C {
  static constexpr int kWindow = W;
};
template <class C, class = void>
struct IsMma : std::false_type {};
template <class C>
struct IsMma<C, std::void_t<decltype(C::kMma)>> : std::true_type {};

// attention_combine's merge (paged_attention.cuh) on the host, in float.
std::vector<float> combine(const std::vector<float>& po, const std::vector<float>& plse, int rows, int splits, int D) {
  std::vector<float> out(size_t(rows) * D);
  for (int row = 0; row < rows; ++row) {
    const float* lse = &plse[size_t(row) * splits];
    float m = -INFINITY;
    for (int z = 0; z < splits; ++z) m = std::fmax(m, lse[z]);
    for (int d = 0; d < D; ++d) {
      float num = 0, den = 0;
      if (m != -INFINITY)
        for (int z = 0; z < splits; ++z) {
          if (lse[z] == -INFINITY) continue;
          const float w = std::exp(lse[z] - m);
          num += w * po[(size_t(row) * splits + z) * D + d];
          den += w;
        }
      out[size_t(row) * D + d] = den > 0 ? num / den : 0.0f;
    }
  }
  return out;
}

template <class C>
void runCase(const Batch& batch, int splits, bool eager, float q_scale, const std::string& what) {
  std::mt19937 rng(7);
  AttentionData a = makeAttention(rng, C::kHeads, C::kKvHeads, C::kHeadDim, batch, false, C::kPageSize);
  for (size_t i = 0; i < a.q.size(); ++i) {  // x8 is exact in bf16
    a.q[i] *= q_scale;
    a.qb[i] = toBf16(a.q[i]);
  }
  const int B = int(batch.q_len.size()), H = C::kHeads, D = C::kHeadDim;
  constexpr bool kMma = IsMma<C>::value;
  constexpr bool kF32 = [] {
    if constexpr (kMma) return false;
    else return sizeof(typename C::Kv) == 4;
  }();
  const void* k_pool = kF32 ? static_cast<const void*>(a.kpool.data()) : a.kb.data();
  const void* v_pool = kF32 ? static_cast<const void*>(a.vpool.data()) : a.vb.data();
  const size_t pool_bytes = a.kb.size() * (kF32 ? 4 : 2);
  // A window: the blocks wholly before each sequence's windows are NaN and
  // outside the readable memory, so reading one fails the case.
  constexpr int kWindow = kk::AttentionWindow<C>::value;
  std::vector<emu::Range> readable{{static_cast<const unsigned char*>(k_pool), pool_bytes},
                                   {static_cast<const unsigned char*>(v_pool), pool_bytes}};
  if (kWindow > 0) {
    readable.clear();
    for (auto [begin, bytes] : poisonBlocksBeforeWindows(a, kWindow, k_pool, v_pool, kF32 ? 4 : 2))
      readable.push_back({begin, bytes});
  }
  // Partials with 64 guard elements on each side, all NaN.
  std::vector<float> po(size_t(a.N) * H * splits * D + 128, NAN), plse(size_t(a.N) * H * splits + 128, NAN);
  kk::PagedAttentionParams p{a.qb.data(), k_pool, v_pool, a.block_tables.data(), a.query_start.data(),
                             a.kv_lens.data(), nullptr, nullptr, po.data() + 64, plse.data() + 64, a.N, B,
                             a.max_blocks, 0, splits, nullptr};
  emu::readable = readable;
  emu::eager_copies = eager;
  emu::launch({unsigned(a.N), unsigned(C::kKvHeads), unsigned(splits)}, kk::decode::kThreads, [&p] {
    if constexpr (kMma) kk::decode_attention_mma<C>(p);
    else kk::decode_attention<C>(p);
  });
  ASSERT_TRUE(emu::failure.empty()) << what << ": " << emu::failure << " (block " << blockIdx.x << ", "
                                    << blockIdx.y << ", " << blockIdx.z << ")";
  EXPECT_EQ(emu::bank_conflicts, 0) << what << ": ldmatrix phases with bank conflicts";
  for (int i = 0; i < 64; ++i) {
    EXPECT_TRUE(std::isnan(po[i]) && std::isnan(po[po.size() - 1 - i])) << what << ": write outside partial_out";
    EXPECT_TRUE(std::isnan(plse[i]) && std::isnan(plse[plse.size() - 1 - i])) << what << ": write outside partial_lse";
  }
  std::vector<float> body_out(po.begin() + 64, po.end() - 64), body_lse(plse.begin() + 64, plse.end() - 64);
  size_t unwritten = 0;
  for (float v : body_out) unwritten += std::isnan(v);
  for (float v : body_lse) unwritten += std::isnan(v);
  EXPECT_EQ(unwritten, 0u) << what << ": partials left unwritten";
  const std::vector<double> ref = attentionReference(a, double(C::kScale), false, kWindow);
  expectClose(combine(body_out, body_lse, a.N * H, splits, D), ref, 4e-3, 1.0 / 64, what);

  // The fused merge (split_arrivals): the last block of each (token, kv
  // head) merges into out, or with one split the block writes out itself.
  // The emulation runs blocks in launch order, so the last split arrives last.
  std::vector<uint16_t> out(size_t(a.N) * H * D + 128, 0x7fc0);  // NaN, with guards
  std::vector<unsigned> arrivals(size_t(a.N) * C::kKvHeads, 0u);
  std::fill(po.begin(), po.end(), NAN);
  std::fill(plse.begin(), plse.end(), NAN);
  p.out = out.data() + 64;
  p.split_arrivals = arrivals.data();
  emu::launch({unsigned(a.N), unsigned(C::kKvHeads), unsigned(splits)}, kk::decode::kThreads, [&p] {
    if constexpr (kMma) kk::decode_attention_mma<C>(p);
    else kk::decode_attention<C>(p);
  });
  ASSERT_TRUE(emu::failure.empty()) << what << ", fused merge: " << emu::failure;
  for (int i = 0; i < 64; ++i)
    EXPECT_TRUE(out[i] == 0x7fc0 && out[out.size() - 1 - i] == 0x7fc0) << what << ": write outside out";
  EXPECT_EQ(arrivals, std::vector<unsigned>(arrivals.size(), 0u)) << what << ": counters not reset";
  if (splits == 1) {
    EXPECT_TRUE(std::isnan(po[64]) && std::isnan(plse[64])) << what << ": one split wrote partials";
  }
  std::vector<float> fused(size_t(a.N) * H * D);
  for (size_t i = 0; i < fused.size(); ++i) fused[i] = fromBf16(out[64 + i]);
  expectClose(fused, ref, 4e-3, 1.0 / 64, what + ", fused merge");
}

// Decode batches over contexts on and off the page and tile boundaries (1,
// 15, 16, 17, a few tiles, a thousand keys) and a prefill chunk after a
// cached prefix (causal q_len > 1), behind a shuffled block table.
const Batch kDecode{{1, 1, 1, 1, 1, 1}, {1, 15, 16, 17, 100, 1000}};
const Batch kMixed{{1, 5, 1, 3}, {300, 40, 1, 3}};

TEST(DecodeAttentionEmulation, Llama3GroupHd128) {
  using C = Config<4, 1, 128>;  // 2 chunks per lane, 2 keys per stream, 3 stages
  for (int splits : {1, 7, 32}) runCase<C>(kDecode, splits, false, 1.0f, "hd128 4/1 splits " + std::to_string(splits));
  runCase<C>(kMixed, 4, false, 1.0f, "hd128 4/1 causal q_len > 1, splits 4");
  runCase<C>(kDecode, 7, true, 8.0f, "hd128 4/1 splits 7, eager cp.async, q x8");
}
TEST(DecodeAttentionEmulation, SmolLm2GroupHd64) {
  using C = Config<6, 2, 64>;  // group 3
  for (int splits : {1, 7, 32}) runCase<C>(kDecode, splits, false, 1.0f, "hd64 6/2 splits " + std::to_string(splits));
  runCase<C>(kMixed, 3, false, 8.0f, "hd64 6/2 causal q_len > 1, splits 3, q x8");
}
TEST(DecodeAttentionEmulation, OneChunkPerLane) {
  runCase<Config<4, 1, 128, kk::bf16, 1, 4>>(kDecode, 7, false, 1.0f, "hd128 4/1 chunks 1 keys 4");
  runCase<Config<2, 1, 64, kk::bf16, 1, 1, 2>>(kDecode, 5, false, 8.0f, "hd64 2/1 chunks 1 keys 1 stages 2, q x8");
}
TEST(DecodeAttentionEmulation, LargeGroupsSplitTheHeads) {
  runCase<Config<16, 1, 64>>(kDecode, 3, false, 1.0f, "hd64 16/1 (two head halves)");
  runCase<Config<9, 1, 128>>(kMixed, 2, false, 1.0f, "hd128 9/1 (halves of 5 and 4 heads)");
  runCase<Config<8, 1, 128>>(kMixed, 2, false, 8.0f, "hd128 8/1, q x8");
}
TEST(DecodeAttentionEmulation, F32PoolsAndPageSizes) {
  runCase<Config<4, 2, 128, float>>(kDecode, 7, false, 1.0f, "hd128 f32 pool");
  runCase<Config<4, 2, 64, float>>(kMixed, 2, false, 1.0f, "hd64 f32 pool");
  runCase<Config<4, 1, 128, kk::bf16, 2, 2, 3, 8>>(kDecode, 7, false, 1.0f, "hd128 page 8");
  runCase<Config<4, 1, 64, kk::bf16, 1, 4, 3, 32>>(kDecode, 7, false, 1.0f, "hd64 page 32 chunks 1 keys 4");
}

TEST(DecodeAttentionEmulation, TensorCoresLlama3Group) {
  using C = MmaConfig<4, 1, 128>;
  for (int splits : {1, 7, 32})
    runCase<C>(kDecode, splits, false, 1.0f, "mma hd128 4/1 splits " + std::to_string(splits));
  runCase<C>(kMixed, 4, false, 1.0f, "mma hd128 4/1 causal q_len > 1, splits 4");
  runCase<C>(kDecode, 7, true, 8.0f, "mma hd128 4/1 splits 7, eager cp.async, q x8");
}
TEST(DecodeAttentionEmulation, TensorCoresOtherShapes) {
  runCase<MmaConfig<6, 2, 64>>(kDecode, 7, false, 1.0f, "mma hd64 6/2 splits 7");
  runCase<MmaConfig<6, 2, 64>>(kMixed, 3, false, 8.0f, "mma hd64 6/2 causal q_len > 1, q x8");
  runCase<MmaConfig<16, 1, 128>>(kMixed, 2, false, 1.0f, "mma hd128 16/1 (all 16 rows)");
  runCase<MmaConfig<9, 1, 64, 2>>(kDecode, 5, false, 8.0f, "mma hd64 9/1 stages 2, q x8");
  runCase<MmaConfig<1, 1, 128, 4, 32>>(kDecode, 3, false, 1.0f, "mma hd128 1/1 stages 4 page 32");
}

// Sliding windows (Mistral's): each query sees its last W keys; the pages
// wholly before a sequence's window are poisoned and unreadable, so a read
// of one fails. Windows shorter than a page, than a stream's keys apart
// from the page start, longer than the context, across splits.
TEST(DecodeAttentionEmulation, SlidingWindowCudaCores) {
  runCase<Windowed<Config<4, 1, 128>, 50>>(kDecode, 7, false, 1.0f, "hd128 4/1 window 50 splits 7");
  runCase<Windowed<Config<4, 1, 128>, 50>>(kDecode, 1, true, 8.0f, "hd128 4/1 window 50, eager, q x8");
  runCase<Windowed<Config<4, 1, 128, kk::bf16, 1, 4>, 7>>(kDecode, 3, false, 1.0f, "hd128 keys 4 window 7");
  runCase<Windowed<Config<6, 2, 64>, 33>>(kMixed, 3, false, 1.0f, "hd64 6/2 causal q_len > 1 window 33");
  runCase<Windowed<Config<4, 2, 64, float>, 2000>>(kDecode, 7, false, 1.0f, "hd64 f32 window past the context");
}
TEST(DecodeAttentionEmulation, SlidingWindowTensorCores) {
  runCase<Windowed<MmaConfig<4, 1, 128>, 50>>(kDecode, 7, false, 1.0f, "mma hd128 4/1 window 50 splits 7");
  runCase<Windowed<MmaConfig<4, 1, 128>, 16>>(kDecode, 1, true, 8.0f, "mma hd128 window 16, eager, q x8");
  runCase<Windowed<MmaConfig<6, 2, 64>, 100>>(kMixed, 3, false, 1.0f, "mma hd64 6/2 causal q_len > 1 window 100");
  runCase<Windowed<MmaConfig<1, 1, 128, 4, 32>, 37>>(kDecode, 3, false, 1.0f, "mma hd128 page 32 window 37");
}

}  // namespace
}  // namespace kiln::gpu_test
