// One causal prefill case on the emulated device (cuda_emulation.h) for
// the prefill kernels' emulation tests: random bf16 data for `batch`, the
// output between NaN guards, the kernel body run over its grid, then no
// emulation failure, no write outside the output, and the output against
// the float64 reference of kernels_gpu_test.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "test/gpu/attention_reference.h"
#include "test/gpu/cuda_emulation.h"

namespace kiln::gpu_test {

struct EmulatedPrefill {
  int heads, kv_heads, head_dim, page_size;
  float scale;
  int block_m, threads, smem_bytes;
  int window = 0;  // the Config's sliding window (0: none)
};

// eager: cp.async copies land when issued (else at the issuing thread's wait).
inline void checkEmulatedPrefill(const EmulatedPrefill& c, const Batch& batch, bool eager, float q_scale,
                                 const std::string& what,
                                 const std::function<void(const kiln::kernels::PagedAttentionParams&)>& body) {
  std::mt19937 rng(99);
  AttentionData a = makeAttention(rng, c.heads, c.kv_heads, c.head_dim, batch, false, c.page_size);
  for (size_t i = 0; i < a.q.size(); ++i) {
    a.q[i] *= q_scale;
    a.qb[i] = toBf16(a.q[i]);
  }
  const int B = int(batch.q_len.size());
  // The output with 64 guard elements on each side, all NaN.
  std::vector<uint16_t> out(size_t(a.N) * c.heads * c.head_dim + 128, 0x7fc0);
  const kiln::kernels::PagedAttentionParams p{a.qb.data(), a.kb.data(), a.vb.data(), a.block_tables.data(),
                                              a.query_start.data(), a.kv_lens.data(), nullptr, out.data() + 64,
                                              nullptr, nullptr, a.N, B, a.max_blocks, 0, 1, nullptr};
  emu::readable = {{reinterpret_cast<const unsigned char*>(a.qb.data()), a.qb.size() * 2},
                   {reinterpret_cast<const unsigned char*>(a.kb.data()), a.kb.size() * 2},
                   {reinterpret_cast<const unsigned char*>(a.vb.data()), a.vb.size() * 2}};
  if (c.window > 0) {  // the blocks wholly before every window: NaN and unreadable
    emu::readable.resize(1);
    for (auto [begin, bytes] : poisonBlocksBeforeWindows(a, c.window, a.kb.data(), a.vb.data(), 2))
      emu::readable.push_back({begin, bytes});
  }
  emu::eager_copies = eager;
  emu::smem_limit = c.smem_bytes;
  const int max_q_len = *std::max_element(batch.q_len.begin(), batch.q_len.end());
  emu::launch({unsigned(c.heads), unsigned((max_q_len + c.block_m - 1) / c.block_m), unsigned(B)}, c.threads,
              [&] { body(p); });
  ASSERT_TRUE(emu::failure.empty()) << what << ": " << emu::failure << " (block " << blockIdx.x << ", " << blockIdx.y
                                    << ", " << blockIdx.z << ")";
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ(out[i], 0x7fc0) << what << ": write before the output";
    EXPECT_EQ(out[out.size() - 1 - i], 0x7fc0) << what << ": write past the output";
  }
  std::vector<uint16_t> body_bits(out.begin() + 64, out.end() - 64);
  expectClose(bf16ToFloat(body_bits), attentionReference(a, double(c.scale), false, c.window), 4e-3, 1.0 / 64,
              what);
}

}  // namespace kiln::gpu_test
