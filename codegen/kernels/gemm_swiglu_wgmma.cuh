// The gate/up projection of a SwiGLU MLP with the SwiGLU in its epilogue, on
// Hopper's warpgroup tensor cores (wgmma, sm_90a) fed by the TMA unit:
//
//   out[r, j] = silu(x[r, :] · w[j, :]) · (x[r, :] · w[F + j, :])
//
// for x [rows, K] and the merged weight w [2F, K] (gate rows, then up rows),
// all bf16 with f32 accumulation. cuBLASLt has no such epilogue: without it
// the projection writes [rows, 2F] and silu_mul reads it back.
//
// Launch: grid gemm_swiglu::grid_blocks(rows, F, SMs) (persistent: each
// block walks the output tiles blockIdx.x, + gridDim.x, ...), block [384],
// dynamic shared memory gemm_swiglu::smem_bytes(); the params carry TMA
// tensor maps of x and w with boxes of [128 rows, 64 columns] and the
// 128-byte swizzle (runtime/cuda/tensor_map.h).
//
// A tile is 128 rows of x by 128 outputs, which take 256 rows of w: gate
// rows n0 .. n0 + 127 and up rows F + n0 .. F + n0 + 127, side by side in
// one [256, 64] operand. So the accumulators of a gate output and of its up
// output lie in the same thread (n8 blocks j and j + 16), and the epilogue
// is register arithmetic. Tiles go rows-first (tile t: row tile t % m_tiles,
// output tile t / m_tiles): a wave of blocks shares a few weight slabs and
// all of x through L2.
//
// Warp specialization, as flash_attention_wgmma: warpgroup 0 is the
// producer, one thread of which issues each stage's three tensor copies (x,
// gate, up: 48 KiB) after the stage's "empty" barrier and announces their
// bytes on its "full" one. Warpgroups 1 and 2 are the consumers, 64 rows of
// the tile each: per K step of 64 they issue four wgmma m64n256k16 from the
// stage and release the stage before (its multiplies are done once the
// newer group is the only one pending). The producer runs ahead across
// tiles, so the next tile's first stages land during this tile's epilogue.
#pragma once

#include "wgmma.cuh"  // and tensor_core.cuh; on the device common.cuh

namespace kiln {
namespace kernels {
namespace gemm_swiglu {

constexpr int kBlockM = 128;  // rows of x a tile: two consumer warpgroups of 64
constexpr int kBlockN = 128;  // outputs a tile: 128 gate and 128 up rows of w
constexpr int kBlockK = 64;   // one 128-byte swizzle panel of bf16 a K step
constexpr int kStages = 4;
constexpr int kProducerThreads = 128;
constexpr int kConsumerThreads = 256;
constexpr int kThreads = kProducerThreads + kConsumerThreads;
// setmaxnreg, as flash_attention_wgmma: 128 x 40 + 256 x 232 <= 65536.
constexpr int kProducerRegisters = 40;
constexpr int kConsumerRegisters = 232;
constexpr int kXBytes = kBlockM * kBlockK * 2;          // 16 KiB
constexpr int kWBytes = 2 * kBlockN * kBlockK * 2;      // 32 KiB: gate rows, then up rows
constexpr int kStageBytes = kXBytes + kWBytes;

// The stages, their full and empty barriers, and 1024 bytes to align the
// first panel (the dynamic window is only guaranteed 16-byte alignment).
KILN_HOST_DEVICE constexpr int smem_bytes() { return kStages * kStageBytes + 2 * 8 * kStages + 1024; }

KILN_HOST_DEVICE constexpr long long tiles(long long rows, long long intermediate) {
  return (rows + kBlockM - 1) / kBlockM * (intermediate / kBlockN);
}
// One block per SM at most (its shared memory allows no second), none idle.
KILN_HOST_DEVICE constexpr int grid_blocks(long long rows, long long intermediate, int sms) {
  return int(tiles(rows, intermediate) < sms ? tiles(rows, intermediate) : sms);
}

}  // namespace gemm_swiglu
}  // namespace kernels
}  // namespace kiln

// The kernel body; it also compiles on the host under KILN_CUDA_EMULATION
// (test/gpu/gemm_swiglu_wgmma_emulation_test.cc).
#if defined(__CUDACC__) || defined(__CUDACC_RTC__) || defined(KILN_CUDA_EMULATION)

namespace kiln {
namespace kernels {

// Config: static constexpr int kHidden (K, a multiple of 64), kIntermediate (F, a multiple of 128),
//         kSmemBytes.
template <class Config>
__device__ __forceinline__ void gemm_swiglu_wgmma(const GemmSwiGluParams& p) {
  using namespace gemm_swiglu;
  constexpr int K = Config::kHidden, F = Config::kIntermediate;
  constexpr int kKSteps = K / kBlockK;
  constexpr int kNBlocks = 2 * kBlockN / 8;  // n8 blocks of a consumer's accumulators: gate, then up
  static_assert(K % kBlockK == 0, "hidden is a multiple of 64");
  static_assert(F % kBlockN == 0, "intermediate is a multiple of 128");
  static_assert(Config::kSmemBytes == smem_bytes(), "dynamic shared memory size");

  extern __shared__ __align__(128) unsigned char smem[];
  const unsigned window = smem_address(smem);
  const unsigned stages = (window + 1023u) & ~1023u;
  // Stage s is full (its tensor copies landed: one arrival and their bytes)
  // and empty (both consumer warpgroups' multiplies on it are done).
  const unsigned full_bar = stages + kStages * kStageBytes, empty_bar = full_bar + 8 * kStages;
  const int m_tiles = (p.rows + kBlockM - 1) / kBlockM;
  const int tile_count = m_tiles * (F / kBlockN);

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  if (tid == 0) {
    for (int st = 0; st < kStages; ++st) {
      mbarrier_init(full_bar + 8 * st, 1);
      mbarrier_init(empty_bar + 8 * st, kConsumerThreads);
    }
  }
  __syncthreads();  // the last block-wide barrier: the roles part here

  if (warp < 4) {
    setmaxnreg_dec<kProducerRegisters>();
    if (tid != 0) return;
    int step = 0;  // K steps issued, over all of this block's tiles
    for (int tile = blockIdx.x; tile < tile_count; tile += gridDim.x) {
      const int m0 = tile % m_tiles * kBlockM, n0 = tile / m_tiles * kBlockN;
      for (int ks = 0; ks < kKSteps; ++ks, ++step) {
        const int st = step % kStages;
        mbarrier_wait(empty_bar + 8 * st, ((step / kStages) & 1) ^ 1);  // a fresh barrier passes parity 1
        const unsigned x_dst = stages + st * kStageBytes, w_dst = x_dst + kXBytes, bar = full_bar + 8 * st;
        mbarrier_arrive_expect_bytes(bar, kStageBytes);
        tensor_copy_2d_to_shared(x_dst, &p.x_map, ks * kBlockK, m0, bar);
        tensor_copy_2d_to_shared(w_dst, &p.w_map, ks * kBlockK, n0, bar);
        tensor_copy_2d_to_shared(w_dst + kWBytes / 2, &p.w_map, ks * kBlockK, F + n0, bar);
      }
    }
    return;
  }

  // ---- Consumer warpgroups 0 and 1 (warps 4-11): rows 64 c .. 64 c + 63 of the tile.
  setmaxnreg_inc<kConsumerRegisters>();
  const int consumer = warp / 4 - 1;
  // acc[4 j + i]: element i of n8 block j of the warp's m16 rows; blocks
  // 0-15 are gate outputs n0 + 8 j .., blocks 16-31 the up outputs of the same columns.
  float acc[4 * kNBlocks];
  bf16* out = static_cast<bf16*>(p.out);
  int step = 0;  // K steps consumed, as the producer counts them
  for (int tile = blockIdx.x; tile < tile_count; tile += gridDim.x) {
    const int m0 = tile % m_tiles * kBlockM, n0 = tile / m_tiles * kBlockN;
    for (int ks = 0; ks < kKSteps; ++ks, ++step) {
      const int st = step % kStages;
      mbarrier_wait(full_bar + 8 * st, (step / kStages) & 1);
      const unsigned x_tile = stages + st * kStageBytes + consumer * 64 * 128, w_tile = stages + st * kStageBytes + kXBytes;
      wgmma::pin(acc);
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < kBlockK / 16; ++kk)
        wgmma::wgmma_ss_m64n256k16(acc, wgmma::k_major(x_tile, 64, kk), wgmma::k_major(w_tile, 2 * kBlockN, kk),
                                   ks > 0 || kk > 0);
      wgmma::commit();
      // The group before this one is done: its stage can be refilled.
      wgmma::wait<1>();
      wgmma::pin(acc);
      if (ks > 0) mbarrier_arrive(empty_bar + 8 * ((step - 1) % kStages));
    }
    wgmma::wait<0>();
    wgmma::pin(acc);
    mbarrier_arrive(empty_bar + 8 * ((step - 1) % kStages));

    // SwiGLU and the store: each thread holds two adjacent outputs of rows
    // g and g + 8 of its warp's 16 per n8 block.
    const int row0 = m0 + consumer * 64 + (warp % 4) * 16;
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int r = row0 + acc_row(lane, 2 * hr);
      if (r >= p.rows) continue;
      bf16* out_row = out + (long long)r * F + n0 + acc_col(lane, 0);
#pragma unroll
      for (int j = 0; j < kNBlocks / 2; ++j) {
        const float* gate = acc + 4 * j + 2 * hr;
        const float* up = acc + 4 * (j + kNBlocks / 2) + 2 * hr;
        *reinterpret_cast<unsigned*>(out_row + 8 * j) = pack_bf16x2(silu(gate[0]) * up[0], silu(gate[1]) * up[1]);
      }
    }
  }
}

}  // namespace kernels
}  // namespace kiln

#endif  // __CUDACC__ || __CUDACC_RTC__ || KILN_CUDA_EMULATION
