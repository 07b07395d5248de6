#include "runtime/cpu/kernels/ssm.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace kiln::cpu {
namespace {

float silu(float v) { return v / (1.0f + std::exp(-v)); }

// torch.nn.functional.softplus (beta 1, threshold 20).
float softplus(float v) { return v > 20.0f ? v : std::log1p(std::exp(v)); }

}  // namespace

void causalConv1d(const float* input, int64_t rows, int64_t channels, int64_t in_stride, const float* weight,
                  int64_t width, const float* bias, bool act, float* state, float* out, int64_t out_stride) {
  const int64_t past = width - 1;
  for (int64_t ch = 0; ch < channels; ++ch) {
    const float* w = weight + ch * width;
    // u(j) for j in [0, past + rows): the carried inputs, then this call's
    auto u = [&](int64_t j) { return j < past ? state[j * channels + ch] : input[(j - past) * in_stride + ch]; };
    for (int64_t t = 0; t < rows; ++t) {
      float acc = bias ? bias[ch] : 0.0f;
      for (int64_t k = 0; k < width; ++k) acc += w[k] * u(t + k);
      out[t * out_stride + ch] = act ? silu(acc) : acc;
    }
    // The new carried inputs: the last `past` of u (read before any is overwritten).
    float last[8];
    for (int64_t j = 0; j < past; ++j) last[j] = u(rows + j);
    for (int64_t j = 0; j < past; ++j) state[j * channels + ch] = last[j];
  }
}

void selectiveScan(const SelectiveScanArgs& a, float* state, float* y) {
  const int64_t n = a.state_size;
  std::vector<float> negA(static_cast<size_t>(n));
  for (int64_t ch = 0; ch < a.channels; ++ch) {
    float* s = state + ch * n;
    for (int64_t j = 0; j < n; ++j) negA[size_t(j)] = -std::exp(a.a_log[ch * n + j]);
    for (int64_t t = 0; t < a.rows; ++t) {
      const float delta = softplus(a.dt[t * a.dt_stride + ch]);
      const float xt = a.x[t * a.x_stride + ch];
      const float* b = a.b + t * a.bc_stride;
      const float* c = a.c + t * a.bc_stride;
      float acc = 0.0f;
      for (int64_t j = 0; j < n; ++j) {
        s[j] = std::exp(delta * negA[size_t(j)]) * s[j] + delta * xt * b[j];
        acc += s[j] * c[j];
      }
      y[t * a.channels + ch] = acc + a.d[ch] * xt;
    }
  }
}

namespace {

float ssdDelta(const SsdScanArgs& a, int64_t t, int64_t h) {
  return std::clamp(softplus(a.dt[t * a.dt_stride + h] + a.dt_bias[h]), a.dt_min, a.dt_max);
}

}  // namespace

void ssdRecurrent(const SsdScanArgs& a, float* state, float* y) {
  const int64_t P = a.head_dim, N = a.state_size, per_group = a.heads / a.groups;
  for (int64_t h = 0; h < a.heads; ++h) {
    const int64_t g = h / per_group;
    const float negA = -std::exp(a.a_log[h]);
    float* s = state + h * P * N;
    for (int64_t t = 0; t < a.rows; ++t) {
      const float delta = ssdDelta(a, t, h);
      const float decay = std::exp(delta * negA);
      const float* x = a.x + t * a.x_stride + h * P;
      const float* b = a.b + t * a.bc_stride + g * N;
      const float* c = a.c + t * a.bc_stride + g * N;
      float* out = y + (t * a.heads + h) * P;
      for (int64_t p = 0; p < P; ++p) {
        float* sp = s + p * N;
        const float dx = delta * x[p];
        float acc = 0.0f;
        for (int64_t j = 0; j < N; ++j) {
          sp[j] = decay * sp[j] + dx * b[j];
          acc += sp[j] * c[j];
        }
        out[p] = acc + a.d[h] * x[p];
      }
    }
  }
}

int64_t ssdScratchFloats(const SsdScanArgs& a) {
  const int64_t L = std::min(a.chunk_size, std::max<int64_t>(a.rows, 1));
  return 2 * L + L * L;  // δ and Λ of one chunk, the chunk's c_t·b_s
}

void ssdScan(const SsdScanArgs& a, float* state, float* y, float* scratch) {
  if (a.rows <= 1) return ssdRecurrent(a, state, y);
  const int64_t P = a.head_dim, N = a.state_size, per_group = a.heads / a.groups;
  const int64_t chunk = std::max<int64_t>(a.chunk_size, 1);
  const int64_t Lmax = std::min(chunk, a.rows);
  float* delta = scratch;
  float* lambda = scratch + Lmax;
  float* cb = scratch + 2 * Lmax;  // [L, L]: c_t · b_s of the head's group
  for (int64_t start = 0; start < a.rows; start += chunk) {
    const int64_t L = std::min(chunk, a.rows - start);
    for (int64_t h = 0; h < a.heads; ++h) {
      const int64_t g = h / per_group;
      const float negA = -std::exp(a.a_log[h]);
      float run = 0.0f;
      for (int64_t i = 0; i < L; ++i) {
        delta[i] = ssdDelta(a, start + i, h);
        run += delta[i] * negA;
        lambda[i] = run;  // Λ_i = Σ_{τ≤i} δ_τ A, ≤ 0 and falling
      }
      auto bRow = [&](int64_t i) { return a.b + (start + i) * a.bc_stride + g * N; };
      auto cRow = [&](int64_t i) { return a.c + (start + i) * a.bc_stride + g * N; };
      // The groups' c·b is shared by per_group heads; recomputed per head here (L² N, small beside L² P).
      for (int64_t t = 0; t < L; ++t)
        for (int64_t s = 0; s <= t; ++s) {
          float dot = 0.0f;
          const float* c = cRow(t);
          const float* b = bRow(s);
          for (int64_t j = 0; j < N; ++j) dot += c[j] * b[j];
          cb[t * L + s] = dot;
        }
      float* st = state + h * P * N;
      for (int64_t t = 0; t < L; ++t) {
        const float* c = cRow(t);
        const float* xt = a.x + (start + t) * a.x_stride + h * P;
        float* out = y + ((start + t) * a.heads + h) * P;
        const float carry = std::exp(lambda[t]);
        for (int64_t p = 0; p < P; ++p) {
          // the state entering the chunk, decayed to t and read by c_t
          float acc = 0.0f;
          const float* sp = st + p * N;
          for (int64_t j = 0; j < N; ++j) acc += sp[j] * c[j];
          acc *= carry;
          // the chunk's own tokens s ≤ t: exp(Λ_t − Λ_s) δ_s (c_t·b_s) x_s
          for (int64_t s = 0; s <= t; ++s)
            acc += std::exp(lambda[t] - lambda[s]) * delta[s] * cb[t * L + s] *
                   a.x[(start + s) * a.x_stride + h * P + p];
          out[p] = acc + a.d[h] * xt[p];
        }
      }
      // The state at the chunk's end.
      const float total = std::exp(lambda[L - 1]);
      for (int64_t p = 0; p < P; ++p) {
        float* sp = st + p * N;
        for (int64_t j = 0; j < N; ++j) sp[j] *= total;
        for (int64_t s = 0; s < L; ++s) {
          const float w = std::exp(lambda[L - 1] - lambda[s]) * delta[s] * a.x[(start + s) * a.x_stride + h * P + p];
          const float* b = bRow(s);
          for (int64_t j = 0; j < N; ++j) sp[j] += w * b[j];
        }
      }
    }
  }
}

void gatedRmsNorm(const float* x, int64_t x_stride, const float* gate, int64_t gate_stride, const float* weight,
                  int64_t rows, int64_t features, int64_t group_size, float eps, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    float* o = out + r * features;
    for (int64_t f = 0; f < features; ++f) o[f] = x[r * x_stride + f] * silu(gate[r * gate_stride + f]);
    for (int64_t g0 = 0; g0 < features; g0 += group_size) {
      double sum = 0.0;
      for (int64_t f = g0; f < g0 + group_size; ++f) sum += double(o[f]) * o[f];
      const float inv = 1.0f / std::sqrt(float(sum / double(group_size)) + eps);
      for (int64_t f = g0; f < g0 + group_size; ++f) o[f] = o[f] * inv * weight[f];
    }
  }
}

}  // namespace kiln::cpu
