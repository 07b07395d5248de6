// flash_attention_wgmma's kernel body run on the host, no GPU: the producer
// warpgroup, the two consumer warpgroups, their mbarriers and named
// barriers and the warpgroup multiplies on the emulated device of
// cuda_emulation.h and wgmma_emulation.h (a fiber per CUDA thread; wgmma
// operands read through their descriptors by the PTX ISA's layouts; NaN
// shared memory; bounds-checked global reads), against the float64
// reference of kernels_gpu_test.
#include <gtest/gtest.h>

#include <string>

#include "test/gpu/cuda_emulation.h"
#include "test/gpu/prefill_emulation.h"
#include "test/gpu/wgmma_emulation.h"

// The kernel on the emulated device: after the emulation headers, which supply its intrinsics.
#include "codegen/kernels/flash_attention_wgmma.cuh"

namespace kiln::gpu_test {
namespace {

namespace kk = kiln::kernels;

template <int H_, int Hkv_, int D_, int Page_ = 16>
struct Config {
  static constexpr int kHeads = H_, kKvHeads = Hkv_, kHeadDim = D_, kPageSize = Page_;
  static constexpr float kScale = D_ == 64 ? 0.125f : 0.0883883476f;
  static constexpr int kBlockM = kk::flash_wgmma::kBlockM;
  static constexpr int kSmemBytes = kk::flash_wgmma::smem_bytes(D_);
};

// A Config with a sliding window of W keys (attention_window.cuh).
template <class C, int W>
struct Windowed : C {
  static constexpr int kWindow = W;
};

// shuffled: fibers run in a random order each round.
template <class C>
void runCase(const Batch& batch, bool eager, float q_scale, const std::string& what, bool shuffled = true) {
  emu::shuffled_schedule = shuffled;
  checkEmulatedPrefill({C::kHeads, C::kKvHeads, C::kHeadDim, C::kPageSize, C::kScale, C::kBlockM,
                        kk::flash_wgmma::kThreads, C::kSmemBytes, kk::AttentionWindow<C>::value},
                       batch, eager, q_scale, what,
                       [](const kk::PagedAttentionParams& p) { kk::flash_attention_wgmma<C>(p); });
  emu::shuffled_schedule = false;
}

// A fresh prompt over two query tiles, a chunk after a prefix long enough
// that the producer refills its three stages, one-token sequences (the
// second warpgroup has no rows), a chunk whose rows start mid-tile, and
// query tiles whose last key opens a new key tile (129 keys).
const Batch kBatch{{150, 40, 1, 70, 1, 129}, {150, 40 + 600, 77, 70 + 300, 129, 129}};

TEST(FlashAttentionWgmmaEmulation, Hd128Gqa2) { runCase<Config<2, 1, 128>>(kBatch, false, 1.0f, "hd128 2/1"); }
TEST(FlashAttentionWgmmaEmulation, Hd128PeakedSoftmaxEagerCopies) {
  runCase<Config<2, 1, 128>>(kBatch, true, 8.0f, "hd128 2/1, q x8, eager cp.async");
}
TEST(FlashAttentionWgmmaEmulation, Hd64Gqa3) { runCase<Config<3, 1, 64>>(kBatch, false, 1.0f, "hd64 3/1"); }
// Sliding windows: the producer starts at the first row's window tile (the
// ring's stages and parities count from it), pages wholly before the
// windows poisoned and unreadable, rows masked to their own windows.
TEST(FlashAttentionWgmmaEmulation, SlidingWindow) {
  runCase<Windowed<Config<2, 1, 128>, 7>>(kBatch, false, 1.0f, "hd128 2/1 window 7");
  runCase<Windowed<Config<2, 1, 128>, 200>>(kBatch, true, 8.0f, "hd128 2/1 window 200, q x8, eager");
  runCase<Windowed<Config<3, 1, 64>, 130>>(kBatch, false, 1.0f, "hd64 3/1 window 130");
}
TEST(FlashAttentionWgmmaEmulation, Hd128InThreadOrder) {
  runCase<Config<2, 1, 128>>(kBatch, false, 1.0f, "hd128 2/1, fibers in thread order", false);
}
// Pages too small for a warp's 32 block-table entries to span a tile: the
// producer reads the table directly instead of by shuffle.
TEST(FlashAttentionWgmmaEmulation, SmallAndLargePages) {
  runCase<Config<1, 1, 64, 4>>(kBatch, false, 1.0f, "hd64 1/1, page 4");
  runCase<Config<1, 1, 64, 64>>(kBatch, false, 1.0f, "hd64 1/1, page 64");
}

}  // namespace
}  // namespace kiln::gpu_test
