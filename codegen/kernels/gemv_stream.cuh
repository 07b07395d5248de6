// Single-row skinny GEMM that streams W through shared memory: y = x · Wᵀ
// (+ bias) for one row of x, with gemv.cuh's epilogues (plain, SwiGLU, rope
// with the KV append). Batch-1 decode runs it for the weights that are not
// much larger than L2, where gemv.cuh's register-bound loads leave HBM idle
// at a kernel's start and end.
//
// Why it is faster there: one producer warp per block keeps kStages stages
// of bulk copies (cp.async.bulk, evict-first in L2) in flight, 128 KiB per
// SM, whatever the consumers' registers. It issues them before the wait on
// the previous kernel, since weights never change: the first 17 MB of W are
// on their way while that kernel finishes. The blocks are persistent (one
// per SM, each a contiguous range of tiles), so no block start-up or tail
// wave repeats per row. The gain is the overlap with the kernel before:
// timed one launch at a time it is no faster than gemv.cuh.
//
// Tile: kRowsPerBlock weight rows (row slots as gemv.cuh's blocks have,
// pairs included); a stage is the tile's rows x kGemvStreamChunk columns,
// one bulk copy per row. Each of the 8 consumer warps' 256 threads takes
// one 8-column vector of every row of a stage, against x held in registers
// for the whole kernel (kK / 256 values a thread). A tile's sums meet in
// shared memory as gemv.cuh's split-K partials (one per warp, in a fixed
// order: no atomics), then gemv_epilogue writes them.
//
// kNormFold: the residual_rms_norm before the gemm runs here, at the start
// of every block, so its launch and the wait it adds to the chain go away.
// Each block reads the norm's inputs (one row: 16 KiB of f32 stream, 8 KiB
// of branch), sums the squares over its consumers and normalizes its x
// registers, rounding as rms_norm.cuh does; block 0 also writes the sum.
// With one block per SM that is 132 reads of the row from L2 (an earlier
// fold into gemv.cuh's thousands of blocks cost more than it saved:
// skinny_fusion.h). The ring is filling meanwhile.
//
// The kernel body also runs on the host under KILN_CUDA_EMULATION
// (test/gpu/cuda_emulation.h: fibers, mbarriers, bulk copies landing at
// issue), in test/gpu/gemv_emulation_test.cc.
//
//   Grid [min(kTiles, SMs), 1, 1], block [288]: warps 0-7 consume, warp 8 produces.
//   Dynamic shared memory kSmemBytes: the ring, its barriers, two tiles'
//   partials, the norm's per-warp squares.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#include "common.cuh"
#include "mbarrier.cuh"
#include "tensor_core.cuh"  // smem_address
#endif
#include "gemv.cuh"

namespace kiln {
namespace kernels {

constexpr int kGemvStreamConsumers = 256;  // threads of warps 0-7 (kGemvStreamChunk: kernel_params.cuh)

// The dynamic shared memory: ring [kStages][kRowsPerBlock][kGemvStreamChunk]
// bf16, then full[kStages] and empty[kStages] barriers, then partials
// [2][kRowsPerBlock * 8] f32 (two tiles, so one barrier a tile suffices).
template <int kRowsPerBlock, int kStages>
struct GemvStreamLayout {
  static constexpr int kStageBytes = kRowsPerBlock * kGemvStreamChunk * 2;
  static constexpr int kFull = kStages * kStageBytes;
  static constexpr int kEmpty = kFull + 8 * kStages;
  static constexpr int kPartials = kEmpty + 8 * kStages;
  static constexpr int kNormSquares = kPartials + 2 * kRowsPerBlock * 8 * 4;  // [8] f32, kNormFold
  static constexpr int kBytes = kNormSquares + 8 * 4;
  static_assert(kBytes == gemvStreamSmemBytes(kRowsPerBlock, kStages), "the size the host generates");
};

// 8 bf16 weights · 8 bf16 x values into acc.
__device__ __forceinline__ void dot8_bf16(const uint4& w, const uint4& x, float& acc) {
#if defined(KILN_CUDA_EMULATION)
  const bf16* a = reinterpret_cast<const bf16*>(&w);
  const bf16* b = reinterpret_cast<const bf16*>(&x);
  for (int i = 0; i < 8; ++i) acc = fmaf(to_float(a[i]), to_float(b[i]), acc);
#else
  const __nv_bfloat162* a = reinterpret_cast<const __nv_bfloat162*>(&w);
  const __nv_bfloat162* b = reinterpret_cast<const __nv_bfloat162*>(&x);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 fa = __bfloat1622float2(a[i]), fb = __bfloat1622float2(b[i]);
    acc = fmaf(fa.x, fb.x, acc);
    acc = fmaf(fa.y, fb.y, acc);
  }
#endif
}

// Config: gemv.cuh's (Weight bf16, kMaxRows 1; kSplitK, kRowsPerWarp and
//         kUnroll unused) plus static constexpr int kStages, kTiles (tiles
//         of the matrix), kSmemBytes; static constexpr bool kNormFold, and
//         with it using NormX, NormResidual, NormSum, NormWeight; static
//         constexpr float kNormEpsilon; static constexpr bool kNormWritesSum.
template <class Config, class Params>
__device__ __forceinline__ void gemv_stream(const Params& params) {
  const GemvParams& p = gemv_args(params);
  using Layout = GemvStreamLayout<Config::kRowsPerBlock, Config::kStages>;
  constexpr int kR = Config::kRowsPerBlock, kStages = Config::kStages, kK = Config::kK;
  constexpr int kChunks = kK / kGemvStreamChunk, kWarps = kGemvStreamConsumers / 32;
  static_assert(Config::kMaxRows == 1, "one row of x");
  static_assert(sizeof(typename Config::Weight) == 2, "bf16 weights");
  static_assert(kK % kGemvStreamChunk == 0 && kGemvStreamChunk / 8 == kGemvStreamConsumers,
                "a stage row is one 16-byte vector per consumer thread");
  static_assert(Layout::kBytes == Config::kSmemBytes, "the instance's kSmemBytes is this layout's");
  static_assert(!(Config::kSiluMul || Config::kRope) || kR % 2 == 0, "pairs share a tile");
#if defined(KILN_CUDA_EMULATION)
  unsigned char* const smem = emulated_shared_memory(Config::kSmemBytes);
#else
  extern __shared__ __align__(128) unsigned char smem[];
#endif
  const bf16* ring = reinterpret_cast<const bf16*>(smem);
  const unsigned ring_at = smem_address(smem);
  const unsigned full = ring_at + Layout::kFull, empty = ring_at + Layout::kEmpty;
  float* partials = reinterpret_cast<float*>(smem + Layout::kPartials);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, tid = threadIdx.x;
  const int tile0 = int((long long)blockIdx.x * Config::kTiles / gridDim.x);
  const int tile1 = int((long long)(blockIdx.x + 1) * Config::kTiles / gridDim.x);

  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(full + 8 * s, 1);
      mbarrier_init(empty + 8 * s, kGemvStreamConsumers);
    }
  }
  __syncthreads();
  if (warp == kWarps) {  // the producer: no wait, weights never change
    if (lane == 0) {
      const unsigned long long policy = l2_policy_evict_first();  // each byte read once
      const bf16* w = static_cast<const bf16*>(p.w);
      const int stages = (tile1 - tile0) * kChunks;
      for (int t = 0; t < stages; ++t) {
        const int s = t % kStages, tile = tile0 + t / kChunks, chunk = t % kChunks;
        if (t >= kStages) mbarrier_wait(empty + 8 * s, (t / kStages - 1) & 1);
        int rows = 0;
        for (int r = 0; r < kR; ++r) rows += gemv_weight_row<Config>(tile, r) >= 0;
        mbarrier_arrive_expect_bytes(full + 8 * s, unsigned(rows * kGemvStreamChunk * 2));
        for (int r = 0; r < kR; ++r) {
          const int row = gemv_weight_row<Config>(tile, r);
          if (row >= 0)
            bulk_copy_to_shared(ring_at + (s * kR + r) * kGemvStreamChunk * 2,
                                w + (long long)row * kK + chunk * kGemvStreamChunk, kGemvStreamChunk * 2,
                                full + 8 * s, policy);
        }
      }
    }
    return;
  }

  // x, once: this thread's vector of every chunk.
  uint4 xv[kChunks];
  if constexpr (Config::kNormFold) {
    float g[kChunks][8];  // the norm's weight never changes: before the wait
#pragma unroll
    for (int c = 0; c < kChunks; ++c)
      load8_nc(static_cast<const typename Config::NormWeight*>(p.norm_weight) + c * kGemvStreamChunk + tid * 8, g[c]);
    wait_for_previous_kernel();
    allow_next_kernel();
    float v[kChunks][8];
    float squares = 0.0f;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int at = c * kGemvStreamChunk + tid * 8;
      float r[8];
      load8(static_cast<const typename Config::NormX*>(p.norm_x) + at, v[c]);
      load8(static_cast<const typename Config::NormResidual*>(p.norm_residual) + at, r);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        v[c][e] = round_to<typename Config::NormSum>(v[c][e] + r[e]);
        squares += v[c][e] * v[c][e];
      }
    }
    float* warp_squares = reinterpret_cast<float*>(smem + Layout::kNormSquares);
    squares = warp_sum(squares);
    if (lane == 0) warp_squares[warp] = squares;
    named_barrier_sync(1, kGemvStreamConsumers);
    squares = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) squares += warp_squares[w];  // the same order in every block
    const float inv_rms = rsqrtf(squares / (float)kK + Config::kNormEpsilon);
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int at = c * kGemvStreamChunk + tid * 8;
      if (Config::kNormWritesSum && blockIdx.x == 0) store8(static_cast<typename Config::NormSum*>(p.norm_sum) + at, v[c]);
      float y[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) y[e] = v[c][e] * inv_rms * g[c][e];
      store8(reinterpret_cast<bf16*>(&xv[c]), y);  // rounded to bf16, as the norm's output is
    }
  } else {
    wait_for_previous_kernel();
    allow_next_kernel();
#pragma unroll
    for (int c = 0; c < kChunks; ++c)
      xv[c] = *reinterpret_cast<const uint4*>(static_cast<const bf16*>(p.x) + c * kGemvStreamChunk + tid * 8);
  }
  // The rope epilogue's position and KV slot, once (one row of x).
  int position = 0, kv_slot = -1;
  if constexpr (Config::kRope) {
    position = params.positions[0];
    kv_slot = params.slot_mapping[0];
  }
  int t = 0, buffer = 0;
  for (int tile = tile0; tile < tile1; ++tile, buffer ^= 1) {
    float acc[kR];
#pragma unroll
    for (int r = 0; r < kR; ++r) acc[r] = 0.0f;
#pragma unroll
    for (int c = 0; c < kChunks; ++c, ++t) {
      const int s = t % kStages;
      mbarrier_wait(full + 8 * s, (t / kStages) & 1);
      // Rows past the matrix read stale bytes; the epilogue skips their sums.
#pragma unroll
      for (int r = 0; r < kR; ++r)
        dot8_bf16(*reinterpret_cast<const uint4*>(ring + (s * kR + r) * kGemvStreamChunk + tid * 8), xv[c], acc[r]);
      // Every consumer thread counts in its own reads of the stage (the
      // empty barriers expect all 256), as flash_attention_wgmma's do: one
      // arrival a warp after __syncwarp leaves each lane's read racing the
      // stage's next bulk copy.
      mbarrier_arrive(empty + 8 * s);
    }
    float (*partial)[1] = reinterpret_cast<float (*)[1]>(partials + buffer * kR * kWarps);
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      const float sum = warp_sum(acc[r]);
      if (lane == 0) partial[r * kWarps + warp][0] = sum;
    }
    named_barrier_sync(1, kGemvStreamConsumers);  // the consumers only
    gemv_epilogue<Config, kWarps>(params, tile, 0, 1, partial, gemv_rope_lane_at<Config>(tile, 1, position, kv_slot));
  }
}

}  // namespace kernels
}  // namespace kiln
