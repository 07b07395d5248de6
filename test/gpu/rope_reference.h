// rope_kv_append in float64 for the kernel tests (rope_kv_append, and the
// qkv GEMM with rope in its epilogue, on the card and on the emulated
// device): a case's params, its inverse frequencies, the rotated q and
// pools, and the check of a kernel's against them.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "runtime/cuda/kernel_test_cases.h"
#include "test/gpu/gpu_harness.h"

namespace kiln::gpu_test {

struct RopeCase {
  int heads, kv_heads, head_dim;
  bool merged, interleaved;
  const char* scaling;
  double theta;
};

// rope_kv_append's params for a case, into pools of kv_type.
inline nlohmann::json ropeCaseParams(const RopeCase& c, const char* kv_type) {
  nlohmann::json p = cuda::testing::ropeParams(c.heads, c.kv_heads, c.head_dim, c.merged, c.interleaved ? "interleaved" : "half",
                                     c.scaling, c.theta);
  p["kv_type"] = kv_type;
  return p;
}

inline std::vector<double> invFreq(const RopeCase& c) {
  std::vector<double> f(c.head_dim / 2);
  for (int i = 0; i < c.head_dim / 2; ++i) {
    double inv = 1.0 / std::pow(c.theta, double(2 * i) / c.head_dim);
    const std::string s = c.scaling;
    if (s == "linear") inv /= 8.0;
    if (s == "llama3") {
      const double low_wl = 8192 / 1.0, high_wl = 8192 / 4.0, wl = 2 * M_PI / inv;
      if (wl > low_wl) inv /= 8.0;
      else if (wl >= high_wl) {
        const double smooth = (8192 / wl - 1.0) / (4.0 - 1.0);
        inv = (1 - smooth) * inv / 8.0 + smooth * inv;
      }
    }
    f[i] = inv;
  }
  return f;
}

// rope_kv_append in float64 over N tokens' merged qkv rows ((H + 2 Hkv) D
// each): q [N, H, D] rotated, and pools of pool_elems ([slots, Hkv, D]) with
// each token's rotated k and its v at its slot, NaN where no token writes.
struct RopeReference {
  std::vector<double> q, k_pool, v_pool;
};
inline RopeReference ropeReference(const RopeCase& c, const std::vector<double>& qkv, const std::vector<int>& positions,
                            const std::vector<int>& slots, size_t pool_elems) {
  const int H = c.heads, Hkv = c.kv_heads, D = c.head_dim, width = (H + 2 * Hkv) * D;
  const std::vector<double> freq = invFreq(c);
  auto rotate = [&](const double* src, double* dst, double pos) {
    for (int i = 0; i < D / 2; ++i) {
      const int lo = c.interleaved ? 2 * i : i, hi = c.interleaved ? 2 * i + 1 : i + D / 2;
      const double a = src[lo], b = src[hi], ang = pos * freq[i];
      dst[lo] = a * std::cos(ang) - b * std::sin(ang);
      dst[hi] = b * std::cos(ang) + a * std::sin(ang);
    }
  };
  RopeReference r{std::vector<double>(positions.size() * H * D), std::vector<double>(pool_elems, NAN),
                  std::vector<double>(pool_elems, NAN)};
  for (size_t t = 0; t < positions.size(); ++t) {
    const double* row = &qkv[t * width];
    for (int h = 0; h < H; ++h) rotate(row + h * D, &r.q[(t * H + h) * D], positions[t]);
    if (slots[t] < 0) continue;
    for (int h = 0; h < Hkv; ++h) {
      rotate(row + (H + h) * D, &r.k_pool[(size_t(slots[t]) * Hkv + h) * D], positions[t]);
      for (int d = 0; d < D; ++d) r.v_pool[(size_t(slots[t]) * Hkv + h) * D + d] = row[(H + Hkv + h) * D + d];
    }
  }
  return r;
}

// q against the reference; pool slots no token writes must still hold the
// poison (NaN), written ones the rotated k and the v.
// Within atol + rtol·|want| (bf16 outputs by default); a slot the kernel
// skips keeps its NaN.
inline void checkRope(const RopeCase& c, const RopeReference& ref, const std::vector<float>& q,
               const std::vector<float>& k_pool, const std::vector<float>& v_pool, const std::string& what,
               double atol = 2e-2, double rtol = 1.0 / 64) {
  expectClose(q, ref.q, atol, rtol, what + " q");
  size_t wrong = 0;
  for (size_t i = 0; i < ref.k_pool.size(); ++i) {
    for (auto [got, want] : {std::pair{k_pool[i], ref.k_pool[i]}, std::pair{v_pool[i], ref.v_pool[i]}}) {
      const bool ok = std::isnan(want) ? std::isnan(got) : std::fabs(got - want) <= atol + std::fabs(want) * rtol;
      if (!ok && wrong++ < 5) ADD_FAILURE() << what << " pool element " << i << ": got " << got << " expected " << want;
    }
  }
  EXPECT_EQ(wrong, 0u) << what;
  std::printf("  %-48s pools checked (skipped slot untouched)\n", what.c_str());
}

}  // namespace kiln::gpu_test
