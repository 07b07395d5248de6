// rope_kv_append with Qwen3's per-head q/k RMSNorm (kQkNorm) run on the
// host, no GPU, on the emulated device of cuda_emulation.h, against
// float64: each q and k head normalized over head_dim with its weight
// (x / sqrt(mean(x²) + eps) · w), then rotated; v copied as it is. Merged
// and separate q/k/v, both pair styles, head_dim 128 (8 elements a thread)
// and 40 (a pair a thread), heads at gains from 2^-7 to 2^7 (the norm
// removes them), bf16 and f32 pools.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "test/gpu/cuda_emulation.h"
#include "test/gpu/rope_reference.h"

// rope_kv_append.cuh keeps a block's sines and norms in static __shared__
// arrays; the emulated block's threads are fibers of one OS thread and
// blocks run one after another, so function-static arrays are the block's
// shared memory (as in kv_quant_emulation_test.cc).
#undef __shared__
#define __shared__ static

// The kernel on the emulated device: after cuda_emulation.h, which supplies its intrinsics.
#include "codegen/kernels/rope_kv_append.cuh"

namespace kiln::gpu_test {
namespace {

namespace kk = kiln::kernels;

template <class Kv_, int H_, int Hkv_, int D_, bool Merged_, bool Interleaved_>
struct Config {
  using Kv = Kv_;
  using X = kk::bf16;
  using QOut = float;
  static constexpr int kHeads = H_, kKvHeads = Hkv_, kHeadDim = D_, kPageSize = 16, kThreads = 128;
  static constexpr bool kMergedQkv = Merged_, kInterleaved = Interleaved_;
  static constexpr float kTheta = 1000000.0f, kFactor = 8.0f, kLowFreqFactor = 1.0f, kHighFreqFactor = 4.0f;
  static constexpr int kScaling = 0, kOriginalMaxPosition = 8192;
  static constexpr bool kQkNorm = true;
  static constexpr float kQkNormEpsilon = 1e-6f;
};

template <class C>
void runCase(const std::string& what) {
  constexpr int H = C::kHeads, Hkv = C::kKvHeads, D = C::kHeadDim, page = C::kPageSize, W = (H + 2 * Hkv) * D;
  constexpr bool kF32Pool = sizeof(typename C::Kv) == 4;
  const RopeCase rc{H, Hkv, D, C::kMergedQkv, C::kInterleaved, "none", 1000000.0};
  std::mt19937 rng(47);
  const int N = 6, blocks = 2;
  const std::vector<int> positions{0, 3, 17, 100, 5, 60}, slots{7, 30, -1, 0, 16, 21};
  std::vector<float> qkv;
  std::vector<uint16_t> qkv_bits = randomBf16(rng, size_t(N) * W, 1.0f, &qkv);
  std::uniform_int_distribution<int> octaves(-7, 7);
  for (int t = 0; t < N; ++t)
    for (int h = 0; h < H + 2 * Hkv; ++h) {
      const float gain = std::ldexp(1.0f, octaves(rng));  // exact in bf16
      for (int d = 0; d < D; ++d) {
        float& x = qkv[size_t(t) * W + h * D + d];
        x *= gain;
        qkv_bits[size_t(t) * W + h * D + d] = toBf16(x);
      }
    }
  std::vector<float> q_norm(D), k_norm(D);
  std::normal_distribution<float> around_one(1.0f, 0.2f);
  for (int d = 0; d < D; ++d) q_norm[d] = around_one(rng), k_norm[d] = around_one(rng);
  std::vector<uint16_t> q_bits, k_bits, v_bits;
  for (int t = 0; t < N; ++t) {
    const uint16_t* row = &qkv_bits[size_t(t) * W];
    q_bits.insert(q_bits.end(), row, row + H * D);
    k_bits.insert(k_bits.end(), row + H * D, row + (H + Hkv) * D);
    v_bits.insert(v_bits.end(), row + (H + Hkv) * D, row + W);
  }
  const size_t pool_elems = size_t(blocks) * page * Hkv * D;
  std::vector<float> k_pool32(pool_elems, NAN), v_pool32(pool_elems, NAN), q_out(size_t(N) * H * D, NAN);
  std::vector<uint16_t> k_pool16(pool_elems, 0x7fc0), v_pool16(pool_elems, 0x7fc0);
  kk::RopeKvAppendParams p{};
  p.qkv = qkv_bits.data();
  p.q = q_bits.data();
  p.k = k_bits.data();
  p.v = v_bits.data();
  p.positions = positions.data();
  p.slot_mapping = slots.data();
  p.k_pool = kF32Pool ? static_cast<void*>(k_pool32.data()) : k_pool16.data();
  p.v_pool = kF32Pool ? static_cast<void*>(v_pool32.data()) : v_pool16.data();
  p.q_out = q_out.data();
  p.num_tokens = N;
  p.num_slots = (long long)blocks * page;
  p.q_norm = q_norm.data();
  p.k_norm = k_norm.data();
  emu::launch({unsigned(N), unsigned(kk::ropeKvAppendHeadGroups(H, Hkv)), 1}, C::kThreads,
              [&p] { kk::rope_kv_append<C>(p); });
  ASSERT_TRUE(emu::failure.empty()) << what << ": " << emu::failure;

  // float64: normalize each q and k head with its weight, then rope_kv_append's reference.
  std::vector<double> normed(qkv.begin(), qkv.end());
  for (int t = 0; t < N; ++t)
    for (int h = 0; h < H + Hkv; ++h) {
      double* x = &normed[size_t(t) * W + h * D];
      double ss = 0;
      for (int d = 0; d < D; ++d) ss += x[d] * x[d];
      const double inv = 1.0 / std::sqrt(ss / D + 1e-6);
      for (int d = 0; d < D; ++d) x[d] *= inv * (h < H ? q_norm[d] : k_norm[d]);
    }
  const RopeReference ref = ropeReference(rc, normed, positions, slots, pool_elems);
  expectClose(q_out, ref.q, 2e-3, 1e-4, what + " q");
  std::vector<float> k_got(pool_elems), v_got(pool_elems);
  for (size_t i = 0; i < pool_elems; ++i) {
    k_got[i] = kF32Pool ? k_pool32[i] : fromBf16(k_pool16[i]);
    v_got[i] = kF32Pool ? v_pool32[i] : fromBf16(v_pool16[i]);
  }
  // Slots no token writes stay NaN in both; bf16 pools round once (2^-8 relative).
  size_t bad = 0;
  for (size_t i = 0; i < pool_elems; ++i)
    for (auto [got, want] : {std::pair{k_got[i], ref.k_pool[i]}, std::pair{v_got[i], ref.v_pool[i]}}) {
      const bool ok = std::isnan(want) ? std::isnan(got)
                                       : std::fabs(got - want) <= (kF32Pool ? 1e-4 : 8e-3) * std::max(1.0, std::fabs(want));
      if (!ok && bad++ < 5) ADD_FAILURE() << what << ": pool element " << i << " is " << got << ", expected " << want;
    }
  EXPECT_EQ(bad, 0u) << what;
}

TEST(RopeQkNormEmulation, Qwen3Shapes) {
  runCase<Config<kk::bf16, 32, 8, 128, true, false>>("bf16 pool 32/8 hd128 merged half (three head groups)");
  runCase<Config<float, 16, 8, 128, false, false>>("f32 pool 16/8 hd128 q/k/v apart");
  runCase<Config<kk::bf16, 4, 2, 128, true, true>>("bf16 pool 4/2 hd128 interleaved");
  runCase<Config<float, 4, 2, 40, true, false>>("f32 pool 4/2 hd40 (a pair a thread)");
}

}  // namespace
}  // namespace kiln::gpu_test
