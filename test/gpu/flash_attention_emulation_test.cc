// flash_attention's kernel body run on the host, no GPU, on the emulated
// device of cuda_emulation.h (a fiber per CUDA thread; ldmatrix, mma,
// shuffles and barriers as rendezvous; lazy or eager cp.async; NaN shared
// memory; bounds-checked global reads; bank-conflict checks), against the
// float64 reference of kernels_gpu_test.
#include <gtest/gtest.h>

#include <string>

#include "test/gpu/cuda_emulation.h"
#include "test/gpu/prefill_emulation.h"

// The kernel on the emulated device: after cuda_emulation.h, which supplies its intrinsics.
#include "codegen/kernels/flash_attention.cuh"

// ------------------------------------------------------------ the test

namespace kiln::gpu_test {
namespace {

namespace kk = kiln::kernels;

template <int H_, int Hkv_, int D_, int Warps_, int BlockM_, int Page_ = 16>
struct Config {
  static constexpr int kHeads = H_, kKvHeads = Hkv_, kHeadDim = D_, kPageSize = Page_;
  static constexpr float kScale = D_ == 64 ? 0.125f : 0.0883883476f;
  static constexpr int kWarps = Warps_, kBlockM = BlockM_;
  static constexpr int kSmemBytes = kk::flash::smem_bytes(D_, BlockM_);
};

// A Config with a sliding window of W keys (attention_window.cuh).
template <class C, int W>
struct Windowed : C {
  static constexpr int kWindow = W;
};

template <class C>
void runCase(const Batch& batch, bool eager, float q_scale, const std::string& what) {
  checkEmulatedPrefill({C::kHeads, C::kKvHeads, C::kHeadDim, C::kPageSize, C::kScale, C::kBlockM, 32 * C::kWarps,
                        C::kSmemBytes, kk::AttentionWindow<C>::value},
                       batch, eager, q_scale, what,
                       [](const kk::PagedAttentionParams& p) { kk::flash_attention<C>(p); });
  EXPECT_EQ(emu::bank_conflicts, 0) << what << ": ldmatrix phases with bank conflicts";
}

// Fresh prompts and chunks after cached prefixes off the page and tile
// boundaries, one-token sequences, an aligned prefix, and query tiles whose
// last key opens a new key tile (65 keys, 129 keys).
const Batch kBatch{{70, 33, 1, 64, 100, 65, 1}, {70, 33 + 150, 40, 128, 100 + 17, 65, 129}};

TEST(FlashAttentionEmulation, Hd64Gqa2) { runCase<Config<2, 1, 64, 4, 64>>(kBatch, false, 1.0f, "hd64 2/1 4x64"); }
TEST(FlashAttentionEmulation, Hd64Gqa2EagerCopies) {
  runCase<Config<2, 1, 64, 4, 64>>(kBatch, true, 1.0f, "hd64 2/1 4x64, eager cp.async");
}
TEST(FlashAttentionEmulation, Hd64TwoMTilesPeakedSoftmax) {
  runCase<Config<4, 2, 64, 4, 128>>(kBatch, false, 8.0f, "hd64 4/2 4x128, q x8");
}
TEST(FlashAttentionEmulation, Hd64EightWarps) { runCase<Config<2, 1, 64, 8, 128>>(kBatch, true, 1.0f, "hd64 2/1 8x128, eager"); }
TEST(FlashAttentionEmulation, Hd128Gqa3) { runCase<Config<3, 1, 128, 4, 64>>(kBatch, false, 1.0f, "hd128 3/1 4x64"); }
TEST(FlashAttentionEmulation, Hd128PeakedSoftmax) {
  runCase<Config<2, 1, 128, 4, 64>>(kBatch, false, 8.0f, "hd128 2/1 4x64, q x8");
}
TEST(FlashAttentionEmulation, OtherPageSizes) {
  runCase<Config<2, 1, 64, 4, 64, 64>>(kBatch, false, 1.0f, "hd64 2/1 4x64, page 64");
  runCase<Config<2, 1, 64, 4, 64, 32>>(kBatch, false, 1.0f, "hd64 2/1 4x64, page 32");
  runCase<Config<2, 1, 64, 4, 64, 8>>(kBatch, false, 1.0f, "hd64 2/1 4x64, page 8");
}
// Sliding windows: tiles before the first row's window never loaded, pages
// wholly before a sequence's windows poisoned and unreadable, rows masked to
// their own windows (shorter than a tile, than a page, longer than the
// query tile, than the context).
TEST(FlashAttentionEmulation, SlidingWindow) {
  runCase<Windowed<Config<2, 1, 64, 4, 64>, 7>>(kBatch, false, 1.0f, "hd64 2/1 4x64 window 7");
  runCase<Windowed<Config<2, 1, 64, 4, 64>, 40>>(kBatch, true, 8.0f, "hd64 2/1 4x64 window 40, eager, q x8");
  runCase<Windowed<Config<4, 2, 64, 4, 128>, 100>>(kBatch, false, 1.0f, "hd64 4/2 4x128 window 100");
  runCase<Windowed<Config<3, 1, 128, 8, 128>, 70>>(kBatch, false, 1.0f, "hd128 3/1 8x128 window 70");
  runCase<Windowed<Config<2, 1, 64, 4, 64, 64>, 1000>>(kBatch, false, 1.0f, "hd64 page 64 window past the context");
}
TEST(FlashAttentionEmulation, Hd128EightWarps) {
  runCase<Config<2, 1, 128, 8, 128>>(kBatch, false, 8.0f, "hd128 2/1 8x128, q x8");
}

}  // namespace
}  // namespace kiln::gpu_test
