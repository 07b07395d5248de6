#include "runtime/cpu/kernels/ssm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace kiln::cpu {
namespace {

std::vector<float> randoms(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

double siluD(double v) { return v / (1.0 + std::exp(-v)); }
double softplusD(double v) { return v > 20 ? v : std::log1p(std::exp(v)); }

TEST(CausalConv1d, MatchesDirectSumAndCarriesInputsAcrossCalls) {
  std::mt19937 rng(1);
  const int64_t rows = 11, channels = 5, width = 4;
  auto input = randoms(size_t(rows * channels), rng);
  auto weight = randoms(size_t(channels * width), rng);
  auto bias = randoms(size_t(channels), rng);
  std::vector<float> state(size_t((width - 1) * channels), 0.0f), out(size_t(rows * channels));
  causalConv1d(input.data(), rows, channels, channels, weight.data(), width, bias.data(), true, state.data(),
               out.data(), channels);
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t c = 0; c < channels; ++c) {
      double acc = bias[size_t(c)];
      for (int64_t k = 0; k < width; ++k) {
        int64_t src = t + k - (width - 1);  // zeros before the first token
        if (src >= 0) acc += double(weight[size_t(c * width + k)]) * input[size_t(src * channels + c)];
      }
      EXPECT_NEAR(out[size_t(t * channels + c)], siluD(acc), 1e-5) << t << "," << c;
    }
  for (int64_t j = 0; j < width - 1; ++j)
    for (int64_t c = 0; c < channels; ++c)
      EXPECT_EQ(state[size_t(j * channels + c)], input[size_t((rows - width + 1 + j) * channels + c)]);

  // One token at a time (and a strided input) ends the same.
  std::vector<float> state2(state.size(), 0.0f), out2(out.size());
  for (int64_t t = 0; t < rows; ++t)
    causalConv1d(input.data() + t * channels, 1, channels, channels, weight.data(), width, bias.data(), true,
                 state2.data(), out2.data() + t * channels, channels);
  EXPECT_EQ(out2, out);
  EXPECT_EQ(state2, state);
  // Two rows only (fewer than width - 1 + 1): the state keeps older carried inputs.
  std::vector<float> state3(state.size(), 0.0f), out3(out.size());
  causalConv1d(input.data(), 9, channels, channels, weight.data(), width, bias.data(), true, state3.data(),
               out3.data(), channels);
  causalConv1d(input.data() + 9 * channels, 2, channels, channels, weight.data(), width, bias.data(), true,
               state3.data(), out3.data() + 9 * channels, channels);
  EXPECT_EQ(out3, out);
  EXPECT_EQ(state3, state);
}

TEST(SelectiveScan, MatchesFloat64RecurrenceAndSplits) {
  std::mt19937 rng(2);
  const int64_t rows = 17, channels = 6, n = 4;
  auto x = randoms(size_t(rows * channels), rng), dt = randoms(size_t(rows * channels), rng);
  auto b = randoms(size_t(rows * n), rng), c = randoms(size_t(rows * n), rng);
  auto a_log = randoms(size_t(channels * n), rng, 0.5f), d = randoms(size_t(channels), rng);
  SelectiveScanArgs args{x.data(), dt.data(), b.data(), c.data(), a_log.data(), d.data(), rows, channels, n,
                         channels, channels, n};
  std::vector<float> state(size_t(channels * n), 0.0f), y(size_t(rows * channels));
  selectiveScan(args, state.data(), y.data());
  std::vector<double> s(size_t(channels * n), 0.0);
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t ch = 0; ch < channels; ++ch) {
      double delta = softplusD(dt[size_t(t * channels + ch)]), xt = x[size_t(t * channels + ch)], acc = 0;
      for (int64_t j = 0; j < n; ++j) {
        double& sj = s[size_t(ch * n + j)];
        sj = std::exp(-delta * std::exp(double(a_log[size_t(ch * n + j)]))) * sj + delta * xt * b[size_t(t * n + j)];
        acc += sj * c[size_t(t * n + j)];
      }
      EXPECT_NEAR(y[size_t(t * channels + ch)], acc + d[size_t(ch)] * xt, 1e-5);
    }
  // Split 7 + 10: same outputs and state.
  std::vector<float> state2(state.size(), 0.0f), y2(y.size());
  SelectiveScanArgs first = args;
  first.rows = 7;
  selectiveScan(first, state2.data(), y2.data());
  SelectiveScanArgs rest = args;
  rest.rows = 10;
  rest.x += 7 * channels;
  rest.dt += 7 * channels;
  rest.b += 7 * n;
  rest.c += 7 * n;
  selectiveScan(rest, state2.data(), y2.data() + 7 * channels);
  EXPECT_EQ(y2, y);
  EXPECT_EQ(state2, state);
}

struct SsdCase {
  int64_t rows = 0, heads = 0, head_dim = 0, groups = 0, n = 0;
  std::vector<float> x, dt, b, c, dt_bias, a_log, d;
  SsdScanArgs args(int64_t chunk, float dt_max = INFINITY) const {
    SsdScanArgs a;
    a.x = x.data();
    a.dt = dt.data();
    a.b = b.data();
    a.c = c.data();
    a.dt_bias = dt_bias.data();
    a.a_log = a_log.data();
    a.d = d.data();
    a.rows = rows;
    a.heads = heads;
    a.head_dim = head_dim;
    a.groups = groups;
    a.state_size = n;
    a.x_stride = heads * head_dim;
    a.dt_stride = heads;
    a.bc_stride = groups * n;
    a.chunk_size = chunk;
    a.dt_min = 0.0f;
    a.dt_max = dt_max;
    return a;
  }
};

SsdCase ssdCase(int64_t rows) {
  std::mt19937 rng(3);
  SsdCase k;
  k.rows = rows;
  k.heads = 4;
  k.head_dim = 3;
  k.groups = 2;
  k.n = 5;
  k.x = randoms(size_t(rows * 12), rng);
  k.dt = randoms(size_t(rows * 4), rng);
  k.b = randoms(size_t(rows * 10), rng);
  k.c = randoms(size_t(rows * 10), rng);
  k.dt_bias = randoms(4, rng, 0.5f);
  k.a_log = randoms(4, rng, 0.5f);
  k.d = randoms(4, rng);
  return k;
}

// The float64 recurrence transformers' decode step runs (Mamba2Mixer.torch_forward, cached).
std::vector<double> ssdReference(const SsdCase& k, double dt_max, std::vector<double>& s) {
  const int64_t H = k.heads, P = k.head_dim, N = k.n, per = H / k.groups;
  std::vector<double> y(size_t(k.rows * H * P));
  for (int64_t t = 0; t < k.rows; ++t)
    for (int64_t h = 0; h < H; ++h) {
      double delta = std::min(softplusD(double(k.dt[size_t(t * H + h)]) + k.dt_bias[size_t(h)]), dt_max);
      double decay = std::exp(-delta * std::exp(double(k.a_log[size_t(h)])));
      int64_t g = h / per;
      for (int64_t p = 0; p < P; ++p) {
        double xt = k.x[size_t(t * H * P + h * P + p)], acc = 0;
        for (int64_t j = 0; j < N; ++j) {
          double& sj = s[size_t((h * P + p) * N + j)];
          sj = decay * sj + delta * xt * k.b[size_t(t * k.groups * N + g * N + j)];
          acc += sj * k.c[size_t(t * k.groups * N + g * N + j)];
        }
        y[size_t(t * H * P + h * P + p)] = acc + k.d[size_t(h)] * xt;
      }
    }
  return y;
}

TEST(SsdScan, ChunkedFormMatchesFloat64RecurrenceForEveryChunkSize) {
  const SsdCase k = ssdCase(23);
  std::vector<double> sRef(size_t(4 * 3 * 5), 0.0);
  std::vector<double> yRef = ssdReference(k, INFINITY, sRef);
  for (int64_t chunk : {1, 3, 8, 23, 64}) {
    SsdScanArgs a = k.args(chunk);
    std::vector<float> state(sRef.size(), 0.0f), y(yRef.size()), scratch(size_t(ssdScratchFloats(a)));
    ssdScan(a, state.data(), y.data(), scratch.data());
    for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], yRef[i], 2e-5) << "chunk " << chunk << " y " << i;
    for (size_t i = 0; i < state.size(); ++i) ASSERT_NEAR(state[i], sRef[i], 2e-5) << "chunk " << chunk;
  }
}

TEST(SsdScan, PrefillInOneCallOrManyEndsInTheSameState) {
  const SsdCase k = ssdCase(40);
  SsdScanArgs whole = k.args(8);
  std::vector<float> s1(60, 0.0f), y1(size_t(40 * 12)), scratch(size_t(ssdScratchFloats(whole)));
  ssdScan(whole, s1.data(), y1.data(), scratch.data());
  // 13 + 1 + 1 + 25 rows: prefill chunks, two decode steps, another chunk.
  std::vector<float> s2(60, 0.0f), y2(y1.size());
  int64_t at = 0;
  for (int64_t rows : {13, 1, 1, 25}) {
    SsdScanArgs part = whole;
    part.rows = rows;
    part.x += at * 12;
    part.dt += at * 4;
    part.b += at * 10;
    part.c += at * 10;
    std::vector<float> scr(size_t(ssdScratchFloats(part)));
    ssdScan(part, s2.data(), y2.data() + at * 12, scr.data());
    at += rows;
  }
  for (size_t i = 0; i < y1.size(); ++i) ASSERT_NEAR(y2[i], y1[i], 1e-5) << i;
  for (size_t i = 0; i < s1.size(); ++i) ASSERT_NEAR(s2[i], s1[i], 1e-5) << i;
}

TEST(SsdScan, HonoursTheTimeStepLimit) {
  const SsdCase k = ssdCase(9);
  std::vector<double> sRef(60, 0.0);
  std::vector<double> yRef = ssdReference(k, 0.05, sRef);
  SsdScanArgs a = k.args(4, 0.05f);
  std::vector<float> state(60, 0.0f), y(yRef.size()), scratch(size_t(ssdScratchFloats(a)));
  ssdScan(a, state.data(), y.data(), scratch.data());
  for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], yRef[i], 1e-5) << i;
  std::vector<float> unclamped(60, 0.0f), y2(y.size());
  ssdScan(k.args(4), unclamped.data(), y2.data(), scratch.data());
  EXPECT_NE(unclamped, state);
}

TEST(GatedRmsNorm, NormalizesEachGroupOfTheGatedRow) {
  std::mt19937 rng(4);
  const int64_t rows = 3, features = 8, group = 4;
  auto x = randoms(24, rng), gate = randoms(24, rng), w = randoms(8, rng);
  std::vector<float> out(24);
  gatedRmsNorm(x.data(), features, gate.data(), features, w.data(), rows, features, group, 1e-5f, out.data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < features; g += group) {
      double ss = 0;
      for (int64_t f = g; f < g + group; ++f) {
        double u = x[size_t(r * features + f)] * siluD(gate[size_t(r * features + f)]);
        ss += u * u;
      }
      double inv = 1.0 / std::sqrt(ss / group + 1e-5);
      for (int64_t f = g; f < g + group; ++f)
        EXPECT_NEAR(out[size_t(r * features + f)],
                    x[size_t(r * features + f)] * siluD(gate[size_t(r * features + f)]) * inv * w[size_t(f)], 1e-5);
    }
}

}  // namespace
}  // namespace kiln::cpu
