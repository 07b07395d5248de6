// The skinny GEMM (codegen/kernels/gemv.cuh) run on the host, no GPU, on
// the emulated device of cuda_emulation.h (a fiber per CUDA thread;
// shuffles and barriers as rendezvous; shared memory NaN at every block's
// start), against float64: the 8-row and single-row tilings, K split over
// warps, weight rows past the matrix, several groups of x rows (grid.z),
// bias, the SwiGLU epilogue's gate/up pairs, and the merged qkv projection
// with rope and the KV append in its epilogue. Outputs start as NaN, and a
// poisoned tail past y (and every pool slot no token writes) must stay NaN. The same cases on the card are
// kernels_gpu_test's SkinnyGemm*; this one runs in CI. The streamed
// single-row kernel (gemv_stream.cuh) runs the same cases on few blocks, so
// each walks several tiles and its 8-stage ring wraps, and with a
// residual_rms_norm folded in front (kernels_gpu_test's SkinnyGemmNormFold).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "runtime/numerics/quant.h"
#include "test/gpu/cuda_emulation.h"
#include "test/gpu/rope_reference.h"

// The kernels on the emulated device: after cuda_emulation.h, which supplies their intrinsics.
#include "codegen/kernels/gemv.cuh"
#include "codegen/kernels/gemv_stream.cuh"

namespace kiln::gpu_test {
namespace {

namespace kk = kiln::kernels;

template <int N, int K, int MaxRows, int Split, int RowsPerWarp, int Unroll, bool Bias, bool SiluMul>
struct GemvConfig {
  using Weight = kk::bf16;
  static constexpr int kN = N, kK = K, kMaxRows = MaxRows, kRowsPerWarp = RowsPerWarp;
  static constexpr int kRowsPerBlock = 8 / Split * RowsPerWarp, kSplitK = Split, kUnroll = Unroll;
  static constexpr bool kBias = Bias, kSiluMul = SiluMul, kRope = false;
};

// gemv_stream.cuh's Config over one of the above (kMaxRows 1): 4 rows a
// tile, 8 stages, the instance's tile count and shared memory.
template <class Base>
struct StreamConfig : Base {
  static constexpr int kRowsPerBlock = 4, kStages = 8;
  static constexpr int kTiles = Base::kSiluMul || Base::kRope ? (Base::kN / 2 + 1) / 2 : (Base::kN + 3) / 4;
  static constexpr int kSmemBytes = kk::GemvStreamLayout<4, 8>::kBytes;
  static constexpr bool kNormFold = false;
  static_assert(Base::kMaxRows == 1, "one row of x");
};
template <class C>
constexpr bool kStreamed = requires { C::kTiles; };

// Launches gemv.cuh's grid, or gemv_stream.cuh's on `stream_blocks`
// persistent blocks (its source of bulk copies, W, made readable).
template <class C, class P>
void launchGemv(P& p, unsigned gx, unsigned gz, unsigned stream_blocks, const void* w, size_t w_bytes) {
  if constexpr (kStreamed<C>) {
    emu::readable = {{static_cast<const unsigned char*>(w), w_bytes}};
    emu::launch({stream_blocks, 1, 1}, 288, [&p] { kk::gemv_stream<C>(p); });
  } else {
    emu::launch({gx, 1, gz}, 256, [&p] { kk::gemv<C>(p); });
  }
}

constexpr int kPoison = 8;  // bf16 elements past y that must stay NaN

// y (bf16, kPoison NaN elements past its end) against float64 `ref`.
void expectOutputs(const std::vector<uint16_t>& y, const std::vector<double>& ref, const std::string& what) {
  std::vector<float> got;
  for (uint16_t bits : y) got.push_back(fromBf16(bits));
  for (size_t i = ref.size(); i < got.size(); ++i) EXPECT_TRUE(std::isnan(got[i])) << what << ": wrote past y at " << i;
  got.resize(ref.size());
  expectClose(got, ref, 5e-3, 1.0 / 64, what);
}

template <class C>
void runCase(std::mt19937& rng, int rows, const std::string& what, unsigned stream_blocks = 0) {
  constexpr int n = C::kN, k = C::kK, out_cols = C::kSiluMul ? n / 2 : n;
  std::vector<float> x, w, bias;
  const std::vector<uint16_t> xb = randomBf16(rng, size_t(rows) * k, 1.0f, &x);
  const std::vector<uint16_t> wb = randomBf16(rng, size_t(n) * k, 0.05f, &w);
  const std::vector<uint16_t> bb = randomBf16(rng, size_t(n), 1.0f, &bias);
  std::vector<uint16_t> y(size_t(rows) * out_cols + kPoison, 0xffff);  // NaN
  kk::GemvParams p{xb.data(), wb.data(), C::kBias ? bb.data() : nullptr, y.data(), rows};
  const int per_block = C::kSiluMul ? C::kRowsPerBlock / 2 : C::kRowsPerBlock;
  const unsigned gx = unsigned((out_cols + per_block - 1) / per_block);
  const unsigned gz = unsigned((rows + C::kMaxRows - 1) / C::kMaxRows);
  launchGemv<C>(p, gx, gz, stream_blocks, wb.data(), wb.size() * 2);
  ASSERT_TRUE(emu::failure.empty()) << what << ": " << emu::failure << " (block " << blockIdx.x << ", "
                                    << blockIdx.z << ")";

  expectOutputs(y, skinnyGemmReference(x, w, C::kBias ? &bias : nullptr, rows, n, k, C::kSiluMul), what);
}

TEST(GemvEmulation, PlainTilings) {
  std::mt19937 rng(11);
  // K long enough that every warp of a split has vectors, with a partial last step.
  // 8 rows a block: 2 warps over K, 2 rows a warp; n 40 leaves part of the last block past the matrix.
  using Eight = GemvConfig<40, 1536, 8, 2, 2, 2, true, false>;
  runCase<Eight>(rng, 3, "8-row tiling, 3 rows of x, bias");
  runCase<Eight>(rng, 9, "8-row tiling, 9 rows of x (two groups)");
  // Single row, K over all 8 warps, 4 loads in flight (the single-row instances' kind).
  runCase<GemvConfig<24, 3072, 1, 8, 1, 4, false, false>>(rng, 1, "single row, K over 8 warps");
  // One warp per row group, no split, K not a multiple of a warp's step.
  runCase<GemvConfig<16, 200, 8, 1, 1, 4, false, false>>(rng, 2, "no split, k 200");
}

TEST(GemvEmulation, SwiGluPairs) {
  std::mt19937 rng(12);
  // Gate row j and up row F + j in one block: 4 rows a block, 2 pairs.
  runCase<GemvConfig<40, 2560, 8, 4, 2, 2, true, true>>(rng, 5, "gate/up pairs, 5 rows, bias");
  // The single-row fused tiling (K over 4 warps, one pair a block).
  runCase<GemvConfig<12, 4096, 1, 4, 1, 4, false, true>>(rng, 1, "gate/up single row");
}

// The merged qkv projection with rope_kv_append's epilogue (GemvRopeParams):
// q rotated into its own rows, k rotated and v into the pools at each row's
// slot (one row with none), as RopeKvAppend checks it.
template <int H, int Hkv, int D, int K, int MaxRows, int Split, int RowsPerWarp, bool Bias, bool Interleaved,
          int Scaling, class KvT>
struct RopeGemvConfig {
  using Weight = kk::bf16;
  using Kv = KvT;
  static constexpr int kN = (H + 2 * Hkv) * D, kK = K, kMaxRows = MaxRows, kRowsPerWarp = RowsPerWarp;
  static constexpr int kRowsPerBlock = 8 / Split * RowsPerWarp, kSplitK = Split, kUnroll = 4;
  static constexpr bool kBias = Bias, kSiluMul = false, kRope = true;
  static constexpr int kHeads = H, kKvHeads = Hkv, kHeadDim = D, kPageSize = 16;
  static constexpr bool kMergedQkv = true, kInterleaved = Interleaved;
  static constexpr float kTheta = Scaling == kk::kRopeLlama3 ? 500000.0f : 10000.0f;
  static constexpr int kScaling = Scaling;
  static constexpr float kFactor = 8.0f, kLowFreqFactor = 1.0f, kHighFreqFactor = 4.0f;
  static constexpr int kOriginalMaxPosition = 8192;
};

template <class C>
void runRopeCase(std::mt19937& rng, int rows, const std::string& what, unsigned stream_blocks = 0) {
  constexpr int H = C::kHeads, Hkv = C::kKvHeads, D = C::kHeadDim, n = C::kN, k = C::kK;
  constexpr bool f32_pool = sizeof(typename C::Kv) == 4;
  const RopeCase rope{H, Hkv, D, true, C::kInterleaved, C::kScaling == kk::kRopeLlama3 ? "llama3" : "none",
                      double(C::kTheta)};
  const int slots = 64;
  std::vector<int> positions = {4999, 0, 7, 130, 2047, 1, 9, 33}, slot_of = {12, 5, -1, 40, 63, 0, 17, 30};
  positions.resize(size_t(rows));
  slot_of.resize(size_t(rows));
  std::vector<float> x, w, bias;
  const std::vector<uint16_t> xb = randomBf16(rng, size_t(rows) * k, 1.0f, &x);
  const std::vector<uint16_t> wb = randomBf16(rng, size_t(n) * k, 0.05f, &w);
  const std::vector<uint16_t> bb = randomBf16(rng, size_t(n), 1.0f, &bias);
  const size_t pool_elems = size_t(slots) * Hkv * D;
  std::vector<uint16_t> q(size_t(rows) * H * D, 0xffff);
  std::vector<typename C::Kv> k_pool(pool_elems), v_pool(pool_elems);
  std::memset(k_pool.data(), 0xff, pool_elems * sizeof(typename C::Kv));  // NaN in bf16 and f32
  std::memset(v_pool.data(), 0xff, pool_elems * sizeof(typename C::Kv));
  kk::GemvRopeParams p{{xb.data(), wb.data(), C::kBias ? bb.data() : nullptr, q.data(), rows},
                       positions.data(), slot_of.data(), k_pool.data(), v_pool.data(), slots};
  const int pairs = C::kRowsPerBlock / 2;
  launchGemv<C>(p, unsigned((n / 2 + pairs - 1) / pairs), unsigned((rows + C::kMaxRows - 1) / C::kMaxRows),
                stream_blocks, wb.data(), wb.size() * 2);
  ASSERT_TRUE(emu::failure.empty()) << what << ": " << emu::failure;
  std::vector<double> qkv(size_t(rows) * n);
  for (int m = 0; m < rows; ++m)
    for (int j = 0; j < n; ++j) {
      double s = C::kBias ? bias[size_t(j)] : 0.0;
      for (int i = 0; i < k; ++i) s += double(x[size_t(m) * k + i]) * w[size_t(j) * k + i];
      qkv[size_t(m) * n + j] = s;
    }
  auto values = [&](const std::vector<typename C::Kv>& pool) {
    std::vector<float> out;
    for (const auto& e : pool) {
      if constexpr (f32_pool) out.push_back(e);
      else out.push_back(fromBf16(e.bits));
    }
    return out;
  };
  std::vector<float> qf;
  for (uint16_t bits : q) qf.push_back(fromBf16(bits));
  checkRope(rope, ropeReference(rope, qkv, positions, slot_of, pool_elems), qf, values(k_pool), values(v_pool), what);
}

TEST(GemvEmulation, RopeEpilogue) {
  std::mt19937 rng(14);
  // Llama-3's layout (half-split pairs, llama3 scaling) at a small size, bf16 pool: 8-row and single-row tilings.
  using Half8 = RopeGemvConfig<4, 2, 32, 1024, 8, 4, 2, false, false, kk::kRopeLlama3, kk::bf16>;
  runRopeCase<Half8>(rng, 3, "gemm+rope 4/2/32 half llama3, 3 rows, bf16 pool");
  using Half1 = RopeGemvConfig<4, 2, 32, 1024, 1, 4, 1, false, false, kk::kRopeLlama3, kk::bf16>;
  runRopeCase<Half1>(rng, 1, "gemm+rope 4/2/32 half llama3, single row, bf16 pool");
  // SmolLM2's (interleaved pairs, bias) into an f32 pool.
  using Interleaved = RopeGemvConfig<3, 1, 16, 512, 8, 2, 2, true, true, kk::kRopeNone, float>;
  runRopeCase<Interleaved>(rng, 5, "gemm+rope 3/1/16 interleaved, bias, 5 rows, f32 pool");
}

// gemv_stream.cuh: tiles of 4 rows (2 pairs), stages of 2048 columns.
TEST(GemvEmulation, Streamed) {
  std::mt19937 rng(15);
  // n 42: 11 tiles, the last half past the matrix; 2 blocks take 5 and 6
  // tiles of 2 stages each (22 stages through 8: the ring wraps).
  runCase<StreamConfig<GemvConfig<42, 4096, 1, 8, 1, 4, true, false>>>(rng, 1, "streamed, n 42 k 4096, bias", 2);
  // One block walks all 10 tiles of one stage; and one block a tile.
  runCase<StreamConfig<GemvConfig<40, 2048, 1, 8, 1, 4, false, false>>>(rng, 1, "streamed, n 40, one block", 1);
  runCase<StreamConfig<GemvConfig<40, 2048, 1, 8, 1, 4, false, false>>>(rng, 1, "streamed, n 40, a block a tile", 10);
  // SwiGLU pairs: n 26 is 13 pairs, 7 tiles, the last with one pair.
  runCase<StreamConfig<GemvConfig<26, 2048, 1, 4, 1, 4, true, true>>>(rng, 1, "streamed gate/up, 13 pairs, bias", 3);
  // rope: Llama-3's layout at head_dim 32 (n 256, 64 tiles), SmolLM2's interleaved with bias into f32.
  using Half = RopeGemvConfig<4, 2, 32, 2048, 1, 4, 1, false, false, kk::kRopeLlama3, kk::bf16>;
  runRopeCase<StreamConfig<Half>>(rng, 1, "streamed gemm+rope 4/2/32 half llama3, bf16 pool", 5);
  using Interleaved = RopeGemvConfig<3, 1, 16, 2048, 1, 4, 1, true, true, kk::kRopeNone, float>;
  runRopeCase<StreamConfig<Interleaved>>(rng, 1, "streamed gemm+rope 3/1/16 interleaved, bias, f32 pool", 4);
}

// The residual_rms_norm before the gemm folded in (kNormFold): the f32
// stream plus the bf16 branch, normalized with the f32 weight and rounded
// to bf16 as the norm writes it, then the gemm, against float64; block 0
// alone writes the sum, which must be all of it.
template <class Base>
struct NormFoldConfig : StreamConfig<Base> {
  static constexpr bool kNormFold = true, kNormWritesSum = true;
  using NormX = float;
  using NormResidual = kk::bf16;
  using NormSum = float;
  using NormWeight = float;
  static constexpr float kNormEpsilon = 1e-5f;
};

template <class C>
void runNormFoldCase(std::mt19937& rng, unsigned blocks, const std::string& what) {
  constexpr int n = C::kN, k = C::kK, out_cols = C::kSiluMul ? n / 2 : n;
  const size_t kn = static_cast<size_t>(k);
  std::vector<float> residual, w, g(kn), stream(kn), sum(kn, NAN);
  std::normal_distribution<float> big(0.0f, 3.0f), near_one(1.0f, 0.2f);
  for (float& v : stream) v = big(rng);
  for (float& v : g) v = near_one(rng);
  const std::vector<uint16_t> rb = randomBf16(rng, kn, 2.0f, &residual);
  const std::vector<uint16_t> wb = randomBf16(rng, size_t(n) * k, 0.05f, &w);
  std::vector<uint16_t> y(size_t(out_cols) + kPoison, 0xffff);
  kk::GemvParams p{nullptr, wb.data(), nullptr, y.data(), 1};
  p.norm_x = stream.data();
  p.norm_residual = rb.data();
  p.norm_weight = g.data();
  p.norm_sum = sum.data();
  launchGemv<C>(p, 0, 0, blocks, wb.data(), wb.size() * 2);
  ASSERT_TRUE(emu::failure.empty()) << what << ": " << emu::failure << " (block " << blockIdx.x << ")";
  const FoldedNormReference norm = foldedNormReference(stream, residual, g, double(C::kNormEpsilon));
  const std::vector<double> ref = skinnyGemmReference(norm.normed, w, nullptr, 1, n, k, C::kSiluMul);
  expectClose(sum, norm.sum, 0, 0, what + ", sum");
  expectOutputs(y, ref, what);
}

TEST(GemvEmulation, StreamedAfterFoldedNorm) {
  std::mt19937 rng(16);
  runNormFoldCase<NormFoldConfig<GemvConfig<24, 4096, 1, 8, 1, 4, false, false>>>(rng, 4, "folded norm, n 24 k 4096");
  runNormFoldCase<NormFoldConfig<GemvConfig<20, 2048, 1, 4, 1, 4, false, true>>>(rng, 2,
                                                                                 "folded norm, gate/up 10 pairs");
}

}  // namespace
}  // namespace kiln::gpu_test
