// The kernels that write and read int8 and fp8 e4m3 KV pools (a scale per
// (token slot, kv head), kv_quant.cuh) run on the host, no GPU, on the
// emulated device of cuda_emulation.h: rope_kv_append quantizing its rows,
// and paged_attention and decode_attention reading codes and scales. The
// rows are spread over orders of magnitude (each (token, head) its own
// gain), so a kernel that ignores the scales, or takes another token's,
// head's or pool's, is far off; outputs start poisoned (NaN, 0xee codes) and
// are checked against float64.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "runtime/kv/kv_quant.h"
#include "test/gpu/attention_reference.h"
#include "test/gpu/cuda_emulation.h"
#include "test/gpu/rope_reference.h"

// paged_attention.cuh and rope_kv_append.cuh keep a block's data in static
// __shared__ arrays. On the emulated device a block's threads are fibers of
// one OS thread and blocks run one after another, so a function-static array
// is the block's shared memory.
#undef __shared__
#define __shared__ static

namespace kiln::kernels {
// common.cuh's, which paged_attention uses and cuda_emulation.h lacks.
inline float warp_max(float x) {
  for (int o = 16; o > 0; o /= 2) x = std::fmax(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
// split_kv.cuh's device-only merge: attention_combine names it, this test
// never runs attention_combine (its partials are merged on the host).
float merge_split_partials(const float* partial_out, const float* partial_lse, long long row, int num_splits,
                           int head_dim, int d);
}  // namespace kiln::kernels

#include "codegen/kernels/decode_attention.cuh"
#include "codegen/kernels/paged_attention.cuh"
#include "codegen/kernels/rope_kv_append.cuh"

namespace kiln::gpu_test {
namespace {

namespace kk = kiln::kernels;

template <class Kv>
constexpr KvElement kElement = std::is_same_v<Kv, kk::KvInt8> ? KvElement::kInt8 : KvElement::kFp8E4M3;

// ------------------------------------------------------------ attention

// An int8/fp8 pool behind a's block tables: codes [slots, Hkv, D] (0xff where
// no key lives) and scales [blocks, Hkv, page] (NaN there).
struct ScaledPool {
  std::vector<uint8_t> k, v;
  std::vector<float> k_scales, v_scales;
};

// Gives every (slot, kv head) row of a's keys and values its own gain (keys
// 10^[-1.5, 0.5], values 10^[-3, 3]), quantizes them as rope_kv_append would
// (runtime/kv/kv_quant.h, the CPU side of the same rules), and leaves in
// a.kpool / a.vpool what the pool holds: code * scale.
ScaledPool quantizePools(AttentionData& a, KvElement element, std::mt19937& rng) {
  const int D = a.D, Hkv = a.Hkv, page = a.page;
  const size_t slots = size_t(a.blocks) * page;
  ScaledPool pool{std::vector<uint8_t>(slots * Hkv * D, 0xff), {}, std::vector<float>(slots * Hkv, NAN), {}};
  pool.v = pool.k;
  pool.v_scales = pool.k_scales;
  std::uniform_real_distribution<float> k_decades(-1.5f, 0.5f), v_decades(-3.0f, 3.0f);
  for (size_t b = 0; b < a.kv_lens.size(); ++b)
    for (int j = 0; j < a.kv_lens[b]; ++j) {
      const int64_t slot = int64_t(a.block_tables[b * a.max_blocks + j / page]) * page + j % page;
      for (int h = 0; h < Hkv; ++h) {
        const size_t row = (size_t(slot) * Hkv + h) * D;
        const size_t at = size_t(kvScaleIndex(slot, h, page, Hkv));
        const float k_gain = std::pow(10.0f, k_decades(rng)), v_gain = std::pow(10.0f, v_decades(rng));
        for (int d = 0; d < D; ++d) {
          a.kpool[row + d] *= k_gain;
          a.vpool[row + d] *= v_gain;
        }
        pool.k_scales[at] = quantizeKvRow(&a.kpool[row], D, element, &pool.k[row]);
        pool.v_scales[at] = quantizeKvRow(&a.vpool[row], D, element, &pool.v[row]);
        dequantizeKvRow(&pool.k[row], pool.k_scales[at], D, element, &a.kpool[row]);
        dequantizeKvRow(&pool.v[row], pool.v_scales[at], D, element, &a.vpool[row]);
      }
    }
  return pool;
}

// Each output element's natural size: sum_j p_j max|v_j| of its (token,
// head), from the float64 probabilities; the tolerance is relative to it.
std::vector<double> outputMagnitudes(const AttentionData& a, double scale, int window = 0) {
  const int G = a.H / a.Hkv;
  std::vector<double> mag(size_t(a.N) * a.H * a.D, 0.0);
  for (size_t b = 0; b < a.kv_lens.size(); ++b) {
    const int q_len = a.query_start[b + 1] - a.query_start[b], prefix = a.kv_lens[b] - q_len;
    for (int i = 0; i < q_len; ++i)
      for (int h = 0; h < a.H; ++h) {
        const int t = a.query_start[b] + i;
        std::vector<double> s, vmax;
        for (int j = window > 0 ? std::max(0, prefix + i - window + 1) : 0; j <= prefix + i; ++j) {
          const size_t slot = size_t(a.block_tables[b * a.max_blocks + j / a.page]) * a.page + j % a.page;
          const size_t row = (slot * a.Hkv + h / G) * a.D;
          double dot = 0, m = 0;
          for (int d = 0; d < a.D; ++d) {
            dot += double(a.q[(size_t(t) * a.H + h) * a.D + d]) * a.kpool[row + d];
            m = std::max(m, std::fabs(double(a.vpool[row + d])));
          }
          s.push_back(dot * scale);
          vmax.push_back(m);
        }
        const double mx = *std::max_element(s.begin(), s.end());
        double l = 0, weighted = 0;
        for (size_t j = 0; j < s.size(); ++j) l += std::exp(s[j] - mx);
        for (size_t j = 0; j < s.size(); ++j) weighted += std::exp(s[j] - mx) / l * vmax[j];
        for (int d = 0; d < a.D; ++d) mag[(size_t(t) * a.H + h) * a.D + d] = weighted;
      }
  }
  return mag;
}

void expectNear(const std::vector<float>& got, const std::vector<double>& want, const std::vector<double>& mag,
                double rtol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(got[i] - want[i]) / (mag[i] + 1e-30);
    if (!(err <= rtol) && bad++ < 5) ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", expected " << want[i];
    if (std::isfinite(err)) worst = std::max(worst, err);
  }
  EXPECT_EQ(bad, 0u) << what;
  std::printf("  %-52s %8zu elements, max error %.3g of the output's size\n", what.c_str(), got.size(), worst);
}

// attention_combine's merge on the host.
std::vector<float> combine(const std::vector<float>& po, const std::vector<float>& plse, int rows, int splits, int D) {
  std::vector<float> out(size_t(rows) * D);
  for (int row = 0; row < rows; ++row) {
    float m = -INFINITY;
    for (int z = 0; z < splits; ++z) m = std::fmax(m, plse[size_t(row) * splits + z]);
    for (int d = 0; d < D; ++d) {
      double num = 0, den = 0;
      for (int z = 0; z < splits && m != -INFINITY; ++z) {
        const float lse = plse[size_t(row) * splits + z];
        if (lse == -INFINITY) continue;
        num += std::exp(lse - m) * po[(size_t(row) * splits + z) * D + d];
        den += std::exp(lse - m);
      }
      out[size_t(row) * D + d] = den > 0 ? float(num / den) : 0.0f;
    }
  }
  return out;
}

template <class Kv_, int H_, int Hkv_, int D_, bool Split_>
struct PagedConfig {
  using Kv = Kv_;
  using Q = kk::bf16;
  using Out = float;
  static constexpr int kHeads = H_, kKvHeads = Hkv_, kHeadDim = D_, kPageSize = 16, kThreads = 128;
  static constexpr float kScale = D_ == 64 ? 0.125f : 0.0883883476f;
  static constexpr bool kTreeMask = false, kSplit = Split_;
};

template <class Kv_, int H_, int Hkv_, int D_>
struct DecodeConfig {
  using Kv = Kv_;
  static constexpr int kHeads = H_, kKvHeads = Hkv_, kHeadDim = D_, kPageSize = 16;
  static constexpr float kScale = D_ == 64 ? 0.125f : 0.0883883476f;
  // What instance_source gives int8/fp8 pools: a chunk a lane, 4 keys, 2 stages.
  static constexpr int kChunks = 1, kKeys = kk::decode::kScaledKeys, kStages = 2;
  static constexpr int kThreads = kk::decode::kThreads;
};

// A Config with a sliding window of W keys (attention_window.cuh).
template <class C, int W>
struct Windowed : C {
  static constexpr int kWindow = W;
};

// One attention kernel (`decode`: decode_attention, else paged_attention;
// `splits` > 1: partials merged on the host) over a scaled pool.
template <class C, bool kDecode>
void runAttention(const Batch& batch, int splits, const std::string& what) {
  std::mt19937 rng(41);
  AttentionData a = makeAttention(rng, C::kHeads, C::kKvHeads, C::kHeadDim, batch, false, C::kPageSize);
  const ScaledPool pool = quantizePools(a, kElement<typename C::Kv>, rng);
  const int B = int(batch.q_len.size()), H = C::kHeads, D = C::kHeadDim;
  std::vector<float> out(size_t(a.N) * H * D, NAN), po(size_t(a.N) * H * splits * D, NAN),
      plse(size_t(a.N) * H * splits, NAN);
  kk::PagedAttentionParams p{a.qb.data(), pool.k.data(), pool.v.data(), a.block_tables.data(), a.query_start.data(),
                             a.kv_lens.data(), nullptr, out.data(), po.data(), plse.data(), a.N, B, a.max_blocks, 0,
                             splits, nullptr};
  p.k_scales = pool.k_scales.data();
  p.v_scales = pool.v_scales.data();
  emu::readable = {{pool.k.data(), pool.k.size()},
                   {pool.v.data(), pool.v.size()},
                   {reinterpret_cast<const unsigned char*>(pool.k_scales.data()), pool.k_scales.size() * 4},
                   {reinterpret_cast<const unsigned char*>(pool.v_scales.data()), pool.v_scales.size() * 4}};
  emu::eager_copies = false;
  emu::launch({unsigned(a.N), unsigned(C::kKvHeads), unsigned(splits)}, C::kThreads, [&p] {
    if constexpr (kDecode) kk::decode_attention<C>(p);
    else kk::paged_attention<C>(p);
  });
  ASSERT_TRUE(emu::failure.empty()) << what << ": " << emu::failure;
  const bool partials = kDecode || splits > 1;
  const std::vector<float> got = partials ? combine(po, plse, a.N * H, splits, D) : out;
  const double scale = C::kScale;
  constexpr int kWindow = kk::AttentionWindow<C>::value;
  expectNear(got, attentionReference(a, scale, false, kWindow), outputMagnitudes(a, scale, kWindow), 1e-4, what);
}

const Batch kDecodeBatch{{1, 1, 1, 1, 1, 1}, {1, 15, 16, 17, 100, 700}};
const Batch kMixedBatch{{1, 5, 1, 3}, {300, 40, 1, 3}};

TEST(KvQuantEmulation, PagedAttentionReadsCodesAndScales) {
  runAttention<PagedConfig<kk::KvInt8, 6, 2, 64, false>, false>(kMixedBatch, 1, "paged_attention int8 hd64 6/2");
  runAttention<PagedConfig<kk::KvE4M3, 6, 2, 64, false>, false>(kMixedBatch, 1, "paged_attention fp8 hd64 6/2");
  runAttention<PagedConfig<kk::KvInt8, 8, 2, 128, true>, false>(kDecodeBatch, 5, "paged_attention_split int8 hd128");
  runAttention<PagedConfig<kk::KvE4M3, 4, 1, 128, true>, false>(kMixedBatch, 3, "paged_attention_split fp8 hd128");
}

// Sliding windows over scaled pools: the CUDA-core kernels start at the
// window (decode_attention at its stream's keys, whose scales share a
// 16-byte chunk, masking the keys before it).
TEST(KvQuantEmulation, SlidingWindowOverCodesAndScales) {
  runAttention<Windowed<PagedConfig<kk::KvInt8, 6, 2, 64, false>, 9>, false>(kMixedBatch, 1,
                                                                            "paged_attention int8 window 9");
  runAttention<Windowed<PagedConfig<kk::KvE4M3, 8, 2, 128, true>, 150>, false>(kDecodeBatch, 5,
                                                                              "paged_attention_split fp8 window 150");
  runAttention<Windowed<DecodeConfig<kk::KvInt8, 4, 1, 128>, 30>, true>(kDecodeBatch, 7,
                                                                       "decode_attention int8 window 30 splits 7");
  runAttention<Windowed<DecodeConfig<kk::KvE4M3, 6, 2, 64>, 5>, true>(kMixedBatch, 3,
                                                                     "decode_attention fp8 window 5 q_len > 1");
}

TEST(KvQuantEmulation, DecodeAttentionReadsCodesAndScales) {
  for (int splits : {1, 7}) {
    const std::string s = " splits " + std::to_string(splits);
    runAttention<DecodeConfig<kk::KvInt8, 4, 1, 128>, true>(kDecodeBatch, splits, "decode_attention int8 hd128 4/1" + s);
    runAttention<DecodeConfig<kk::KvE4M3, 6, 2, 64>, true>(kDecodeBatch, splits, "decode_attention fp8 hd64 6/2" + s);
  }
  runAttention<DecodeConfig<kk::KvInt8, 6, 2, 64>, true>(kMixedBatch, 3, "decode_attention int8 causal q_len > 1");
  runAttention<DecodeConfig<kk::KvE4M3, 2, 1, 128>, true>(kMixedBatch, 2, "decode_attention fp8 hd128 2/1");
}

// ------------------------------------------------------------ append

template <class Kv_, int H_, int Hkv_, int D_, bool Merged_, bool Interleaved_>
struct RopeConfig {
  using Kv = Kv_;
  using X = kk::bf16;
  using QOut = float;
  static constexpr int kHeads = H_, kKvHeads = Hkv_, kHeadDim = D_, kPageSize = 16, kThreads = 128;
  static constexpr bool kMergedQkv = Merged_, kInterleaved = Interleaved_;
  static constexpr float kTheta = 10000.0f, kFactor = 8.0f, kLowFreqFactor = 1.0f, kHighFreqFactor = 4.0f;
  static constexpr int kScaling = 0, kOriginalMaxPosition = 8192;
};

// rope_kv_append into a scaled pool: q as the float64 rope; each written
// (slot, head) row's scale absmax / qmax of the float64 row (within the
// f32 rope's 1e-4), its codes within one quantization step of it (int8: the scale; e4m3: an eighth of
// the value, or 2^-9 scale among the subnormals); the slot a token skips
// keeps its poison.
template <class C>
void runAppend(const std::string& what) {
  constexpr int H = C::kHeads, Hkv = C::kKvHeads, D = C::kHeadDim, page = C::kPageSize, W = (H + 2 * Hkv) * D;
  const KvElement element = kElement<typename C::Kv>;
  const RopeCase rc{H, Hkv, D, C::kMergedQkv, C::kInterleaved, "none", 10000.0};
  std::mt19937 rng(43);
  const int N = 6, blocks = 2;
  const std::vector<int> positions{0, 3, 17, 100, 5, 60}, slots{7, 30, -1, 0, 16, 21};
  // Rows of merged qkv, each head at its own gain (10^[-2, 2]).
  std::vector<float> qkv;
  std::vector<uint16_t> qkv_bits = randomBf16(rng, size_t(N) * W, 1.0f, &qkv);
  std::uniform_real_distribution<float> decades(-2.0f, 2.0f);
  for (int t = 0; t < N; ++t)
    for (int h = 0; h < H + 2 * Hkv; ++h) {
      const float gain = std::pow(2.0f, std::round(decades(rng) * 3.32f));  // powers of two stay exact in bf16
      for (int d = 0; d < D; ++d) {
        float& x = qkv[size_t(t) * W + h * D + d];
        x *= gain;
        qkv_bits[size_t(t) * W + h * D + d] = toBf16(x);
      }
    }
  // Unmerged: q, k and v apart.
  std::vector<uint16_t> q_bits, k_bits, v_bits;
  for (int t = 0; t < N; ++t) {
    const uint16_t* row = &qkv_bits[size_t(t) * W];
    q_bits.insert(q_bits.end(), row, row + H * D);
    k_bits.insert(k_bits.end(), row + H * D, row + (H + Hkv) * D);
    v_bits.insert(v_bits.end(), row + (H + Hkv) * D, row + W);
  }
  const size_t pool_elems = size_t(blocks) * page * Hkv * D;
  std::vector<uint8_t> k_pool(pool_elems, 0xee), v_pool(pool_elems, 0xee);
  std::vector<float> k_scales(size_t(blocks) * page * Hkv, NAN), v_scales(k_scales), q_out(size_t(N) * H * D, NAN);
  kk::RopeKvAppendParams p{};
  p.qkv = qkv_bits.data();
  p.q = q_bits.data();
  p.k = k_bits.data();
  p.v = v_bits.data();
  p.positions = positions.data();
  p.slot_mapping = slots.data();
  p.k_pool = k_pool.data();
  p.v_pool = v_pool.data();
  p.q_out = q_out.data();
  p.num_tokens = N;
  p.num_slots = (long long)blocks * page;
  p.k_scales = k_scales.data();
  p.v_scales = v_scales.data();
  emu::launch({unsigned(N), unsigned(kk::ropeKvAppendHeadGroups(H, Hkv)), 1}, C::kThreads,
              [&p] { kk::rope_kv_append<C>(p); });
  ASSERT_TRUE(emu::failure.empty()) << what << ": " << emu::failure;

  const std::vector<double> qkv64(qkv.begin(), qkv.end());
  const RopeReference ref = ropeReference(rc, qkv64, positions, slots, pool_elems);
  // f32 angles and sines against float64: within 1e-4 of the row's size.
  expectClose(q_out, ref.q, 1e-3, 1e-4, what + " q");
  const double qmax = kvQuantMax(element);
  size_t bad = 0, rows = 0;
  for (int slot = 0; slot < blocks * page; ++slot)
    for (int h = 0; h < Hkv; ++h)
      for (auto [codes, scales, want] : {std::tuple{&k_pool, &k_scales, &ref.k_pool}, std::tuple{&v_pool, &v_scales, &ref.v_pool}}) {
        const size_t row = (size_t(slot) * Hkv + h) * D;
        const float scale = (*scales)[size_t(kvScaleIndex(slot, h, page, Hkv))];
        if (std::isnan((*want)[row])) {  // no token writes this slot
          bool untouched = std::isnan(scale);
          for (int d = 0; d < D; ++d) untouched &= (*codes)[row + d] == 0xee;
          if (!untouched && bad++ < 5) ADD_FAILURE() << what << ": slot " << slot << " head " << h << " was written";
          continue;
        }
        ++rows;
        double absmax = 0;
        for (int d = 0; d < D; ++d) absmax = std::max(absmax, std::fabs((*want)[row + d]));
        if (!(std::fabs(scale - absmax / qmax) <= 1e-4 * absmax / qmax) && bad++ < 5)
          ADD_FAILURE() << what << ": slot " << slot << " head " << h << " scale " << scale << ", expected "
                        << absmax / qmax;
        std::vector<float> back(D);
        dequantizeKvRow(&(*codes)[row], scale, D, element, back.data());
        for (int d = 0; d < D; ++d) {
          const double x = (*want)[row + d];
          const double step = element == KvElement::kInt8 ? scale : std::max(std::fabs(x) / 8, std::ldexp(double(scale), -9));
          if (!(std::fabs(back[d] - x) <= step + 1e-4 * absmax) && bad++ < 5)
            ADD_FAILURE() << what << ": slot " << slot << " head " << h << " dim " << d << " decodes to " << back[d]
                          << ", expected " << x;
        }
      }
  EXPECT_EQ(bad, 0u) << what;
  EXPECT_EQ(rows, size_t(2 * Hkv * 5)) << what << ": the five tokens with a slot";
  std::printf("  %-52s %zu rows checked, the skipped slot untouched\n", what.c_str(), rows);
}

TEST(KvQuantEmulation, RopeKvAppendQuantizesEachRow) {
  runAppend<RopeConfig<kk::KvInt8, 9, 3, 64, true, false>>("rope_kv_append int8 hd64 merged half");
  runAppend<RopeConfig<kk::KvE4M3, 9, 3, 64, true, true>>("rope_kv_append fp8 hd64 merged interleaved");
  runAppend<RopeConfig<kk::KvE4M3, 32, 8, 128, true, false>>("rope_kv_append fp8 hd128 32/8 (three head groups)");
  runAppend<RopeConfig<kk::KvInt8, 4, 2, 40, false, false>>("rope_kv_append int8 hd40 q/k/v apart (a pair a thread)");
}

}  // namespace
}  // namespace kiln::gpu_test
