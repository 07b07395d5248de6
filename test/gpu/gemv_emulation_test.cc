// The skinny GEMM (codegen/kernels/gemv.cuh) run on the host, no GPU, on
// the emulated device of cuda_emulation.h (a fiber per CUDA thread;
// shuffles and barriers as rendezvous; shared memory NaN at every block's
// start), against float64: the 8-row and single-row tilings, K split over
// warps, weight rows past the matrix, several groups of x rows (grid.z),
// bias, the SwiGLU epilogue's gate/up pairs, and the merged qkv projection
// with rope and the KV append in its epilogue. Outputs start as NaN, and a
// poisoned tail past y (and every pool slot no token writes) must stay NaN. The same cases on the card are
// kernels_gpu_test's SkinnyGemm*; this one runs in CI.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "test/gpu/cuda_emulation.h"
#include "test/gpu/rope_reference.h"

// The kernel on the emulated device: after cuda_emulation.h, which supplies its intrinsics.
#include "codegen/kernels/gemv.cuh"

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

constexpr int kPoison = 8;  // bf16 elements past y that must stay NaN

template <class C>
void runCase(std::mt19937& rng, int rows, const std::string& what) {
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
  emu::launch({gx, 1, gz}, 256, [&p] { kk::gemv<C>(p); });
  ASSERT_TRUE(emu::failure.empty()) << what << ": " << emu::failure << " (block " << blockIdx.x << ", "
                                    << blockIdx.z << ")";

  std::vector<double> ref(size_t(rows) * out_cols);
  auto dot = [&](int m, int j) {
    double s = C::kBias ? bias[size_t(j)] : 0.0;
    for (int i = 0; i < k; ++i) s += double(x[size_t(m) * k + i]) * w[size_t(j) * k + i];
    return s;
  };
  for (int m = 0; m < rows; ++m)
    for (int j = 0; j < out_cols; ++j) {
      if (!C::kSiluMul) {
        ref[size_t(m) * out_cols + j] = dot(m, j);
        continue;
      }
      const double gate = dot(m, j), up = dot(m, out_cols + j);
      ref[size_t(m) * out_cols + j] = gate / (1.0 + std::exp(-gate)) * up;
    }
  std::vector<float> got;
  for (uint16_t bits : y) got.push_back(fromBf16(bits));
  for (size_t i = ref.size(); i < got.size(); ++i) EXPECT_TRUE(std::isnan(got[i])) << what << ": wrote past y at " << i;
  got.resize(ref.size());
  expectClose(got, ref, 5e-3, 1.0 / 64, what);
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
void runRopeCase(std::mt19937& rng, int rows, const std::string& what) {
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
  emu::launch({unsigned((n / 2 + pairs - 1) / pairs), 1, unsigned((rows + C::kMaxRows - 1) / C::kMaxRows)}, 256,
              [&p] { kk::gemv<C>(p); });
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

}  // namespace
}  // namespace kiln::gpu_test
