// The state-space kernels (codegen/kernels/ssm.cuh) run on the host, no
// GPU, on the emulated device of cuda_emulation.h, against a float64
// recurrence (transformers' Mamba-2 decode step, which its chunked prefill
// equals): a ragged batch of a 19-row prefill (three chunks of 8) and a
// one-row decode step continuing a non-zero state, in slots 2 and 0 of a
// three-slot pool whose slot 1 must stay untouched; then the same batch's
// prefill split over two launches. Outputs past the batch stay NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "test/gpu/cuda_emulation.h"

#include "codegen/kernels/ssm.cuh"

namespace kiln::gpu_test {
namespace {

namespace kk = kiln::kernels;

constexpr int kHeads = 4, kHeadDim = 8, kGroups = 2, kState = 8, kWidth = 4;
constexpr int kInner = kHeads * kHeadDim, kChannels = kInner + 2 * kGroups * kState;

struct ConvConfig {
  using X = float;
  using W = float;
  using Out = float;
  static constexpr int kChannels = gpu_test::kChannels, kWidth = gpu_test::kWidth, kThreads = 32;
  static constexpr bool kSilu = true;
};
struct ScanConfig {
  using X = float;
  using P = float;
  using Out = float;
  static constexpr int kHeads = gpu_test::kHeads, kHeadDim = gpu_test::kHeadDim, kGroups = gpu_test::kGroups,
                       kState = gpu_test::kState, kChunk = 8, kThreads = 64;
};
struct NormConfig {
  using X = float;
  using W = float;
  using Out = float;
  static constexpr int kFeatures = kInner, kGroup = kInner / 2, kThreads = 64;
};

std::vector<float> randoms(std::mt19937& rng, size_t n, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

double softplus(double v) { return v > 20 ? v : std::log1p(std::exp(v)); }
double silu(double v) { return v / (1.0 + std::exp(-v)); }

struct Batch {
  std::vector<int> query_start, slots;
};

// Runs conv then scan over `rows` rows of `proj` ([rows, z | xBC | dt]).
void launch(const Batch& batch, const std::vector<float>& proj, int row0, int rows, const std::vector<float>& conv_w,
            const std::vector<float>& conv_b, const std::vector<float>& head_params, std::vector<float>& conv_pool,
            std::vector<float>& ssm_pool, std::vector<float>& conv_out, std::vector<float>& y, float dt_max) {
  constexpr int F = kInner + kChannels + kHeads;
  const float* at = proj.data() + size_t(row0) * F;
  kk::SsmConvParams c{at + kInner, conv_w.data(), conv_b.data(), conv_out.data() + size_t(row0) * kChannels,
                      conv_pool.data(), batch.query_start.data(), batch.slots.data(), F,
                      int(batch.slots.size())};
  emu::launch({unsigned((kChannels + 31) / 32), unsigned(batch.slots.size()), 1}, 32,
              [&c] { kk::ssm_conv1d<ConvConfig>(c); });
  ASSERT_TRUE(emu::failure.empty()) << emu::failure;
  const float* co = conv_out.data() + size_t(row0) * kChannels;
  kk::SsdScanParams s{co, co + kInner, co + kInner + kGroups * kState, at + kInner + kChannels,
                      head_params.data(), head_params.data() + kHeads, head_params.data() + 2 * kHeads,
                      y.data() + size_t(row0) * kInner, ssm_pool.data(), batch.query_start.data(),
                      batch.slots.data(), kChannels, kChannels, F, int(batch.slots.size()), 0.0f, dt_max};
  emu::launch({unsigned(kHeads), unsigned(batch.slots.size()), 1}, 64, [&s] { kk::ssd_scan<ScanConfig>(s); });
  ASSERT_TRUE(emu::failure.empty()) << emu::failure;
  (void)rows;
}

TEST(SsmEmulation, RaggedPrefillAndDecodeMatchFloat64Recurrence) {
  std::mt19937 rng(29);
  constexpr int F = kInner + kChannels + kHeads;
  constexpr int kPrefill = 19, kRows = kPrefill + 1, kSlots = 3;
  const std::vector<float> proj = randoms(rng, size_t(kRows + 2) * F, 1.0f);
  const std::vector<float> conv_w = randoms(rng, size_t(kChannels) * kWidth, 0.5f);
  const std::vector<float> conv_b = randoms(rng, kChannels, 0.1f);
  std::vector<float> head_params = randoms(rng, 3 * kHeads, 0.5f);  // dt_bias, A_log, D
  const float nan = std::nanf("");
  const size_t conv_slot = size_t(kWidth - 1) * kChannels, ssm_slot = size_t(kHeads) * kHeadDim * kState;

  for (float dt_max : {INFINITY, 0.2f}) {
    for (int split : {0, 11}) {  // 0: one launch; 11: the prefill's rows 0-10, then 11-18 with the decode row
      // Sequence 0 (prefill) in slot 2 from zero; sequence 1 (decode) in slot 0 from a random state.
      std::vector<float> conv_pool(conv_slot * kSlots, 0.0f), ssm_pool(ssm_slot * kSlots, 0.0f);
      std::vector<float> init_conv = randoms(rng, conv_slot, 1.0f), init_ssm = randoms(rng, ssm_slot, 1.0f);
      std::copy(init_conv.begin(), init_conv.end(), conv_pool.begin());
      std::copy(init_ssm.begin(), init_ssm.end(), ssm_pool.begin());
      const std::vector<float> untouched_conv(conv_pool.begin() + long(conv_slot), conv_pool.begin() + long(2 * conv_slot));
      std::vector<float> conv_out(size_t(kRows + 2) * kChannels, nan), y(size_t(kRows + 2) * kInner, nan);
      if (split == 0) {
        launch({{0, kPrefill, kRows}, {2, 0}}, proj, 0, kRows, conv_w, conv_b, head_params, conv_pool, ssm_pool,
               conv_out, y, dt_max);
      } else {
        // First launch: the prefill's first 11 rows. Second: its other 8 rows and the decode row, as rows 11..19.
        launch({{0, split}, {2}}, proj, 0, split, conv_w, conv_b, head_params, conv_pool, ssm_pool, conv_out, y,
               dt_max);
        launch({{0, kPrefill - split, kRows - split}, {2, 0}}, proj, split, kRows - split, conv_w, conv_b,
               head_params, conv_pool, ssm_pool, conv_out, y, dt_max);
      }
      if (HasFatalFailure()) return;
      const std::string what = "split " + std::to_string(split) + " dt_max " + std::to_string(dt_max);

      // float64: each sequence's conv and scan from its starting state.
      for (int seq = 0; seq < 2; ++seq) {
        const int begin = seq == 0 ? 0 : kPrefill, end = seq == 0 ? kPrefill : kRows;
        std::vector<double> window(conv_slot, 0.0), s(ssm_slot, 0.0);
        if (seq == 1) {
          window.assign(init_conv.begin(), init_conv.end());
          s.assign(init_ssm.begin(), init_ssm.end());
        }
        for (int t = begin; t < end; ++t) {
          const float* row = proj.data() + size_t(t) * F;
          std::vector<double> u(kChannels);
          for (int c = 0; c < kChannels; ++c) {
            double acc = conv_b[size_t(c)] + double(conv_w[size_t(c) * kWidth + kWidth - 1]) * row[kInner + c];
            for (int k = 0; k < kWidth - 1; ++k) acc += double(conv_w[size_t(c) * kWidth + k]) * window[size_t(k) * kChannels + c];
            for (int k = 0; k + 1 < kWidth - 1; ++k) window[size_t(k) * kChannels + c] = window[size_t(k + 1) * kChannels + c];
            window[size_t(kWidth - 2) * kChannels + c] = row[kInner + c];
            u[size_t(c)] = silu(acc);
            ASSERT_NEAR(conv_out[size_t(t) * kChannels + c], u[size_t(c)], 1e-5) << what << " row " << t;
          }
          for (int h = 0; h < kHeads; ++h) {
            const int g = h / (kHeads / kGroups);
            const double delta =
                std::min(softplus(double(row[kInner + kChannels + h]) + head_params[size_t(h)]), double(dt_max));
            const double decay = std::exp(-delta * std::exp(double(head_params[size_t(kHeads + h)])));
            for (int p = 0; p < kHeadDim; ++p) {
              const double x = u[size_t(h * kHeadDim + p)];
              double acc = 0;
              for (int n = 0; n < kState; ++n) {
                double& sn = s[size_t((h * kHeadDim + p) * kState + n)];
                sn = decay * sn + delta * x * u[size_t(kInner + g * kState + n)];
                acc += sn * u[size_t(kInner + kGroups * kState + g * kState + n)];
              }
              const double want = acc + head_params[size_t(2 * kHeads + h)] * x;
              ASSERT_NEAR(y[size_t(t) * kInner + h * kHeadDim + p], want, 1e-4 * (1 + std::fabs(want)))
                  << what << " row " << t << " head " << h;
            }
          }
        }
        const size_t slot = seq == 0 ? 2 : 0;
        for (size_t i = 0; i < ssm_slot; ++i)
          ASSERT_NEAR(ssm_pool[slot * ssm_slot + i], s[i], 1e-4 * (1 + std::fabs(s[i]))) << what << " seq " << seq;
        for (size_t i = 0; i < conv_slot; ++i) ASSERT_NEAR(conv_pool[slot * conv_slot + i], window[i], 1e-6) << what;
      }
      EXPECT_EQ(std::vector<float>(conv_pool.begin() + long(conv_slot), conv_pool.begin() + long(2 * conv_slot)),
                untouched_conv)
          << what << ": another sequence's slot was written";
      for (size_t i = size_t(kRows) * kInner; i < y.size(); ++i) EXPECT_TRUE(std::isnan(y[i])) << what;
    }
  }
}

// Mamba's selective scan: a 13-row prefill from zero in slot 1 and a decode
// row continuing a random state in slot 0, against the float64 recurrence
// (MambaMixer.slow_forward's), then the next decode row of both.
struct SelectiveConfig {
  using X = float;
  using P = float;
  using Out = float;
  static constexpr int kChannels = 12, kState = 8, kThreads = 32;
};

TEST(SsmEmulation, SelectiveScanRaggedBatchMatchesFloat64) {
  std::mt19937 rng(31);
  constexpr int C = SelectiveConfig::kChannels, N = SelectiveConfig::kState, R = 3, W = R + 2 * N;
  const std::vector<float> a_log = randoms(rng, size_t(C) * N, 0.5f), d = randoms(rng, C, 1.0f);
  std::vector<float> pool(size_t(2) * C * N, 0.0f);
  const std::vector<float> init = randoms(rng, size_t(C) * N, 1.0f);
  std::copy(init.begin(), init.end(), pool.begin());
  std::vector<double> ref_state[2] = {std::vector<double>(init.begin(), init.end()), std::vector<double>(size_t(C) * N, 0.0)};
  for (int launch_i = 0; launch_i < 2; ++launch_i) {
    const int rows0 = launch_i == 0 ? 13 : 1, rows = rows0 + 1;
    const std::vector<float> x = randoms(rng, size_t(rows) * C, 1.0f), dt = randoms(rng, size_t(rows) * C, 1.0f);
    const std::vector<float> dbc = randoms(rng, size_t(rows) * W, 1.0f);  // x_proj's [dt_rank | B | C]
    std::vector<float> y(size_t(rows + 1) * C, std::nanf(""));
    const std::vector<int> qs = {0, rows0, rows}, slots = {1, 0};
    kk::SelectiveScanParams p{x.data(), dt.data(), dbc.data() + R, dbc.data() + R + N, a_log.data(), d.data(),
                              y.data(), pool.data(), qs.data(), slots.data(), C, C, W, 2};
    emu::launch({unsigned((C * N + 31) / 32), 2, 1}, 32, [&p] { kk::selective_scan<SelectiveConfig>(p); });
    ASSERT_TRUE(emu::failure.empty()) << emu::failure;
    for (int seq = 0; seq < 2; ++seq) {
      std::vector<double>& s = ref_state[seq == 0 ? 1 : 0];  // sequence 0 lives in slot 1
      for (int t = seq == 0 ? 0 : rows0; t < (seq == 0 ? rows0 : rows); ++t)
        for (int ch = 0; ch < C; ++ch) {
          const double delta = softplus(dt[size_t(t) * C + ch]), xt = x[size_t(t) * C + ch];
          double acc = 0;
          for (int n = 0; n < N; ++n) {
            double& sn = s[size_t(ch) * N + n];
            sn = std::exp(-delta * std::exp(double(a_log[size_t(ch) * N + n]))) * sn + delta * xt * dbc[size_t(t) * W + R + n];
            acc += sn * dbc[size_t(t) * W + R + N + n];
          }
          ASSERT_NEAR(y[size_t(t) * C + ch], acc + d[size_t(ch)] * xt, 1e-4 * (1 + std::fabs(acc)))
              << "launch " << launch_i << " row " << t << " channel " << ch;
        }
    }
    for (int slot = 0; slot < 2; ++slot)
      for (size_t i = 0; i < size_t(C) * N; ++i)
        ASSERT_NEAR(pool[size_t(slot) * C * N + i], ref_state[slot][i], 1e-4 * (1 + std::fabs(ref_state[slot][i])));
    for (int ch = 0; ch < C; ++ch) EXPECT_TRUE(std::isnan(y[size_t(rows) * C + ch]));
  }
}

TEST(SsmEmulation, GatedNormPerGroup) {
  std::mt19937 rng(30);
  constexpr int kRowsN = 3, kGateStride = 80;
  std::vector<float> x = randoms(rng, size_t(kRowsN) * kInner, 1.0f), gate = randoms(rng, size_t(kRowsN) * kGateStride, 1.0f);
  std::vector<float> w = randoms(rng, kInner, 1.0f), out(size_t(kRowsN + 1) * kInner, std::nanf(""));
  kk::SsmGatedNormParams p{x.data(), gate.data(), w.data(), out.data(), kGateStride, kRowsN, 1e-5f};
  emu::launch({unsigned(kRowsN + 1), 1, 1}, 64, [&p] { kk::ssm_gated_norm<NormConfig>(p); });
  ASSERT_TRUE(emu::failure.empty()) << emu::failure;
  constexpr int G = NormConfig::kGroup;
  for (int r = 0; r < kRowsN; ++r)
    for (int g0 = 0; g0 < kInner; g0 += G) {
      double ss = 0;
      for (int f = g0; f < g0 + G; ++f) {
        const double u = x[size_t(r) * kInner + f] * silu(gate[size_t(r) * kGateStride + f]);
        ss += u * u;
      }
      const double inv = 1.0 / std::sqrt(ss / G + 1e-5);
      for (int f = g0; f < g0 + G; ++f)
        ASSERT_NEAR(out[size_t(r) * kInner + f],
                    x[size_t(r) * kInner + f] * silu(gate[size_t(r) * kGateStride + f]) * inv * w[size_t(f)], 1e-5);
    }
  for (int f = 0; f < kInner; ++f) EXPECT_TRUE(std::isnan(out[size_t(kRowsN) * kInner + f]));
}

}  // namespace
}  // namespace kiln::gpu_test
