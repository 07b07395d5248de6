// Causal prefill attention over the paged KV pool on Hopper's warpgroup
// tensor cores (wgmma, sm_90a): flash_attention's semantics and launch
// contract (see flash_attention.cuh for the params, the causal rule and the
// grid order, and the sliding window's tiles and masks), with its two
// products issued a warpgroup at a time from
// shared memory instead of an m16n8k16 at a time from registers, in the
// manner of FlashAttention-3.
//
// Launch: grid [H, ceil(max_q_len / 128), B], block [384], dynamic shared
// memory flash_wgmma::smem_bytes(D).
//
// Warp specialization: warpgroup 0 is the producer. It copies Q and then
// each K/V tile of 128 keys (cp.async, gathered row by row through the
// block table) into a ring of three stages, waiting on a stage's "empty"
// barrier and arriving on its "full" one. It needs few registers and gives
// them to the consumers (setmaxnreg). Warpgroups 1 and 2 are the consumers,
// 64 query rows each; consumer warp w holds rows 16 w .. 16 w + 15 in the
// accumulator layout of an m16n8 tile, so the mask, the online softmax and
// the output code are flash_attention's, one m-tile a warp. Per key tile:
//   S = Q Kᵀ   wgmma m64n128k16, Q and K both from shared memory, D / 16 steps;
//   P         the online-softmax update on S in registers (exp2, scale folded
//             into log2 e), packed to bf16 as the A fragments as they lie;
//   O += P V  wgmma m64nDk16 with P from registers and V from shared memory
//             (MN-major: the keys, rows of the V tile, are the k axis).
// With P of tile t in registers a consumer issues S of tile t + 1 and
// O += P V of tile t together, waits for S only, runs the softmax of tile
// t + 1 while O's multiplies still run, and then releases tile t's stage.
// The two consumers take turns issuing (named barriers): one's multiplies
// run while the other's softmax does. A consumer whose rows all precede a
// tile skips its work but still takes its turn and releases the stage.
//
// Shared memory (wgmma.cuh's panel-major 128-byte swizzle, every panel
// 1024-byte aligned): Q [128, D]; three stages of K [128, D] and V [128, D];
// the stages' barriers. The output goes back through Q's rows (each warp
// its own) for coalesced 16-byte stores.
#pragma once

#include "wgmma.cuh"  // and tensor_core.cuh; on the device common.cuh
#include "attention_window.cuh"

namespace kiln {
namespace kernels {
namespace flash_wgmma {

constexpr int kBlockM = 128;  // query rows per block: two consumer warpgroups of 64
constexpr int kBlockN = 128;  // keys per tile
constexpr int kProducerThreads = 128;  // warpgroup 0 copies
constexpr int kConsumerThreads = 256;  // warpgroups 1 and 2 multiply
constexpr int kThreads = kProducerThreads + kConsumerThreads;
constexpr int kStages = 3;  // K/V tiles: kt's V and kt + 1's K are read while kt + 2 lands
// setmaxnreg: the block starts with 65536 / 384 = 168 registers a thread;
// the producer gives back what the consumers take (128 x 40 + 256 x 232 <= 65536).
constexpr int kProducerRegisters = 40;
constexpr int kConsumerRegisters = 232;

// Q, the K/V stages, their full and empty barriers, and 1024 bytes to align
// the first panel (the dynamic window is only guaranteed 16-byte alignment).
KILN_HOST_DEVICE constexpr int smem_bytes(int head_dim) {
  return (kBlockM + kStages * 2 * kBlockN) * head_dim * 2 + 2 * 8 * kStages + 1024;
}

}  // namespace flash_wgmma
}  // namespace kernels
}  // namespace kiln

// The kernel body. It also compiles on the host under KILN_CUDA_EMULATION,
// where test/gpu/cuda_emulation.h and wgmma_emulation.h supply the
// intrinsics and run each CUDA thread as a fiber
// (test/gpu/flash_attention_wgmma_emulation_test.cc).
#if defined(__CUDACC__) || defined(__CUDACC_RTC__) || defined(KILN_CUDA_EMULATION)

namespace kiln {
namespace kernels {

// Config: static constexpr int kHeads, kKvHeads, kHeadDim, kPageSize, kBlockM, kSmemBytes;
//         static constexpr float kScale (> 0); optionally static constexpr int kWindow.
// The ring's stages and parities count tiles from the block's first, first_tile.
template <class Config>
__device__ __forceinline__ void flash_attention_wgmma(const PagedAttentionParams& p) {
  using namespace flash_wgmma;
  constexpr int D = Config::kHeadDim, H = Config::kHeads, Hkv = Config::kKvHeads;
  constexpr int kGroup = H / Hkv;
  constexpr int BM = kBlockM, BN = kBlockN;
  constexpr int kChunks = D / 8;      // 16-byte chunks per row
  constexpr int kKSteps = D / 16;     // k16 steps of Q Kᵀ
  constexpr int kNBlocks = BN / 8;    // n8 blocks of S
  constexpr int kDBlocks = D / 8;     // n8 blocks of O
  constexpr int kQBytes = BM * D * 2;
  constexpr int kTileBytes = BN * D * 2;
  constexpr int kStageBytes = 2 * kTileBytes;  // K tile, then V tile
  constexpr int kRowsPerPass = kProducerThreads / kChunks;
  constexpr float kScaleLog2 = Config::kScale * 1.4426950408889634f;
  constexpr int kWindow = AttentionWindow<Config>::value;
  static_assert(H % Hkv == 0, "GQA: heads is a multiple of kv_heads");
  static_assert(D == 64 || D == 128, "head_dim 64 or 128");
  static_assert(Config::kBlockM == BM, "128 query rows per block");
  static_assert(Config::kSmemBytes == smem_bytes(D), "dynamic shared memory size");
  static_assert(Config::kScale > 0.0f, "the running max is taken over unscaled scores");

  extern __shared__ __align__(128) unsigned char smem[];
  const unsigned window = smem_address(smem);
  const unsigned q_base = (window + 1023u) & ~1023u;
  unsigned char* const tiles = smem + (q_base - window);  // q_base as a generic pointer
  const unsigned kv_base = q_base + kQBytes;
  // Stage s is full (its copies landed: kProducerThreads arrivals) and empty
  // (both consumer warpgroups are done with it: kConsumerThreads arrivals).
  const unsigned full_bar = kv_base + kStages * kStageBytes, empty_bar = full_bar + 8 * kStages;

  const int h = blockIdx.x, b = blockIdx.z;
  const int kvh = h / kGroup;
  const int m0 = (gridDim.y - 1 - blockIdx.y) * BM;  // first query row of the tile, in the sequence
  const int q_begin = p.query_start[b], q_len = p.query_start[b + 1] - q_begin;
  if (m0 >= q_len) return;
  const int rows = min(BM, q_len - m0);
  const int first_pos = p.kv_lens[b] - q_len + m0;  // position of the tile's first query
  const int key_end = first_pos + rows;             // keys [key_lo, key_end) are seen by some row
  const int key_lo = window_begin(kWindow, first_pos);  // the first row's window (0: none)
  const int first_tile = key_lo / BN;               // tiles before it are never read
  const int num_tiles = (key_end + BN - 1) / BN - first_tile;  // tiles this block reads
  const int full_tiles = (first_pos + 1) / BN;      // absolute tiles before it no row's diagonal crosses
  const int window_mask_end = kWindow > 0 ? first_pos + rows - kWindow : 0;  // keys below: the window's mask

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  if (tid == 0) {
    for (int st = 0; st < kStages; ++st) {
      mbarrier_init(full_bar + 8 * st, kProducerThreads);
      mbarrier_init(empty_bar + 8 * st, kConsumerThreads);
    }
  }
  __syncthreads();  // the last block-wide barrier: the roles part here

  if (warp < 4) {
    // ---- Producer warpgroup: Q with tile 0, then each K/V tile into its
    // stage once both consumers have released it. A thread waits for its own
    // copies and fences them for the tensor cores (async proxy) before it
    // arrives, so a full stage is ready for wgmma as it is.
    setmaxnreg_dec<kProducerRegisters>();
    const int* table = p.block_tables + (long long)b * p.max_blocks_per_seq;
    const bf16* k_pool = static_cast<const bf16*>(p.k_pool);
    const bf16* v_pool = static_cast<const bf16*>(p.v_pool);
    const int copy_chunk = tid % kChunks, copy_row = tid / kChunks;
    {  // Q rows past q_len become zeros (their results are never stored)
      const bf16* q = static_cast<const bf16*>(p.q) + ((long long)(q_begin + m0) * H + h) * D + copy_chunk * 8;
#pragma unroll 4
      for (int i = 0; i < BM / kRowsPerPass; ++i) {
        const int r = copy_row + i * kRowsPerPass;
        cp_async_16(q_base + wgmma::tile_offset(r, copy_chunk, BM), q + (r < rows ? (long long)r * H * D : 0),
                    r < rows ? 16 : 0);
      }
    }
    // Block-table entries: lane l of each warp holds entry l of the pages a
    // tile spans (the copies read them by shuffle), fetched a tile ahead so
    // no copy waits on one. Pages too small for 32 entries to span a tile
    // are read directly.
    constexpr int P = Config::kPageSize;
    constexpr bool kShuffledPages = (BN + P - 1) / P + 1 <= 32;
    const int sequence_pages = (key_end + P - 1) / P;
    auto fetch_pages = [&](int kt) {
      const int page = kt * BN / P + lane;
      return kShuffledPages && page < sequence_pages ? table[page] : 0;
    };
    int next_pages = fetch_pages(first_tile);
    for (int it = 0; it < num_tiles; ++it) {
      const int kt = first_tile + it;  // the tile's keys: [kt * BN, kt * BN + BN)
      const int st = it % kStages, use = it / kStages;
      const int pages = next_pages;
      if (it + 1 < num_tiles) next_pages = fetch_pages(kt + 1);
      mbarrier_wait(empty_bar + 8 * st, (use & 1) ^ 1);  // a fresh barrier passes parity 1
      const unsigned k_dst = kv_base + st * kStageBytes, v_dst = k_dst + kTileBytes;
#pragma unroll 4
      for (int i = 0; i < BN / kRowsPerPass; ++i) {  // keys at or past key_end, or before key_lo, become zeros
        const int r = copy_row + i * kRowsPerPass, j = kt * BN + r;
        const int entry = kShuffledPages ? __shfl_sync(0xffffffffu, pages, j / P - kt * BN / P) : 0;
        long long at = 0;
        int bytes = 0;
        if (j < key_end && j >= key_lo) {
          const long long slot = (long long)(kShuffledPages ? entry : table[j / P]) * P + j % P;
          at = (slot * Hkv + kvh) * D + copy_chunk * 8;
          bytes = 16;
        }
        const int off = wgmma::tile_offset(r, copy_chunk, BN);
        cp_async_16(k_dst + off, k_pool + at, bytes);
        cp_async_16(v_dst + off, v_pool + at, bytes);
      }
      cp_async_commit();
      // Arrive now, not a tile behind: behind, the arrive also waits for the next stage's release.
      cp_async_wait<0>();
      wgmma::fence_shared_for_async();
      mbarrier_arrive(full_bar + 8 * st);
    }
    return;
  }

  // ---- Consumer warpgroups 0 and 1 (warps 4-11): 64 query rows each.
  setmaxnreg_inc<kConsumerRegisters>();
  const int consumer = warp / 4 - 1;
  const int group_row0 = consumer * 64;      // first row of this warpgroup in the tile
  const int warp_row0 = (warp - 4) * 16;     // first row of this warp in the tile
  const unsigned q_group = q_base + group_row0 * 128;  // the warpgroup's 64 rows of every Q panel
  auto stage_of = [&](int kt) { return kv_base + (kt % kStages) * kStageBytes; };
  // Key tiles this warpgroup needs, counted from first_tile: up to its last
  // query row's position (none when every row is past q_len).
  const int group_last_pos = group_row0 < rows ? first_pos + min(group_row0 + 64, rows) - 1 : -1;
  const int group_tiles = group_last_pos < 0 ? 0 : min(num_tiles, group_last_pos / BN + 1 - first_tile);

  float o[kDBlocks * 4];
#pragma unroll
  for (int i = 0; i < kDBlocks * 4; ++i) o[i] = 0.0f;
  float row_max[2], row_sum[2];  // rows g, g + 8 of the warp's 16; sums are this lane's share
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    row_max[hr] = neg_inf();
    row_sum[hr] = 0.0f;
  }

  // S = Q Kᵀ of tile kt for the warpgroup's 64 rows and the tile's 128 keys;
  // s[4 nb + i] is element i of n8 block nb of the warp's m16 tile. Issued
  // and committed as one group, not waited for.
  float s[kNBlocks * 4];
  auto issue_scores = [&](int kt) {
    const unsigned k_tile = stage_of(kt);
    wgmma::pin(s);
    wgmma::fence();
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks)
      wgmma::wgmma_ss_m64n128k16(s, wgmma::k_major(q_group, BM, ks), wgmma::k_major(k_tile, BN, ks), ks > 0);
    wgmma::commit();
  };
  // The online-softmax update of tile kt on s (complete): the causal mask on
  // the tiles that cross the diagonal (key > position -> -inf), the new
  // running max, the row sums, and s <- P = exp(S - max) in place. Sets
  // alpha, the factor the output so far is rescaled by.
  float alpha[2] = {1.0f, 1.0f};
  auto softmax = [&](int kt) {
    const int key0 = (first_tile + kt) * BN;
    if (first_tile + kt >= full_tiles || key0 < window_mask_end) {
#pragma unroll
      for (int nb = 0; nb < kNBlocks; ++nb)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int pos = first_pos + warp_row0 + acc_row(lane, i);
          const int key = key0 + nb * 8 + acc_col(lane, i);
          if (key > pos || (kWindow > 0 && key <= pos - kWindow)) s[4 * nb + i] = neg_inf();
        }
    }
    // Four partial maxima and sums per row: short dependency chains.
    float mx[2][4], sum[2][4];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        mx[hr][j] = j == 0 ? row_max[hr] : neg_inf();
        sum[hr][j] = 0.0f;
      }
#pragma unroll
    for (int nb = 0; nb < kNBlocks; ++nb)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr)
        mx[hr][nb % 4] = fmaxf(mx[hr][nb % 4], fmaxf(s[4 * nb + 2 * hr], s[4 * nb + 2 * hr + 1]));
    float base[2];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      float m = fmaxf(fmaxf(mx[hr][0], mx[hr][1]), fmaxf(mx[hr][2], mx[hr][3]));
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));  // the 4 lanes of a row
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
      base[hr] = m == neg_inf() ? 0.0f : m * kScaleLog2;
      alpha[hr] = exp2_approx(row_max[hr] * kScaleLog2 - base[hr]);
      row_max[hr] = m;
    }
#pragma unroll
    for (int nb = 0; nb < kNBlocks; ++nb)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int hr = i / 2;
        const float pe = exp2_approx(fmaf(s[4 * nb + i], kScaleLog2, -base[hr]));
        s[4 * nb + i] = pe;
        sum[hr][nb % 4] += pe;
      }
#pragma unroll
    for (int hr = 0; hr < 2; ++hr)
      row_sum[hr] = row_sum[hr] * alpha[hr] + ((sum[hr][0] + sum[hr][1]) + (sum[hr][2] + sum[hr][3]));
  };
  // P as bf16 A fragments: P's accumulators of keys 16 kk .. 16 kk + 15 as they lie.
  unsigned pa[BN / 16][4];
  auto pack_p = [&] {
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      pa[kk][0] = pack_bf16x2(s[8 * kk + 0], s[8 * kk + 1]);
      pa[kk][1] = pack_bf16x2(s[8 * kk + 2], s[8 * kk + 3]);
      pa[kk][2] = pack_bf16x2(s[8 * kk + 4], s[8 * kk + 5]);
      pa[kk][3] = pack_bf16x2(s[8 * kk + 6], s[8 * kk + 7]);
    }
  };
  // O to the running max of the tile whose P was just packed (before its
  // O += P V is issued, outside the turn: the other warpgroup may issue meanwhile).
  auto rescale_o = [&] {
#pragma unroll
    for (int db = 0; db < kDBlocks; ++db) {
      o[4 * db + 0] *= alpha[0];
      o[4 * db + 1] *= alpha[0];
      o[4 * db + 2] *= alpha[1];
      o[4 * db + 3] *= alpha[1];
    }
  };
  // O += P V of tile kt, committed as one group.
  auto issue_output = [&](int kt) {
    const unsigned v_tile = stage_of(kt) + kTileBytes;
    wgmma::pin(o);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      if constexpr (D == 128) wgmma::wgmma_rs_m64n128k16_tb(o, pa[kk], wgmma::mn_major(v_tile, BN, kk));
      else wgmma::wgmma_rs_m64n64k16_tb(o, pa[kk], wgmma::mn_major(v_tile, BN, kk));
    }
    wgmma::commit();
  };
  // The two warpgroups take turns issuing their multiplies (named barriers
  // 1 and 2, one per warpgroup, 256 threads): the tensor cores run one's
  // while the other's softmax runs. Warpgroup 0 goes first.
  auto turn_begin = [&] { named_barrier_sync(1 + consumer, kConsumerThreads); };
  auto turn_end = [&](bool last) {
    if (!(last && consumer == 1)) named_barrier_arrive(2 - consumer, kConsumerThreads);
  };
  if (consumer == 1) named_barrier_arrive(1, kConsumerThreads);

  // Iteration kt (from -1): P of tile kt is in registers. The scores of
  // tile kt + 1 and O += P V of tile kt are in flight together and the
  // softmax of tile kt + 1 runs while O's multiplies still do (FlashAttention-3's
  // intra-warpgroup pipelining). Each branch waits for all it issues:
  // ptxas keeps the multiplies asynchronous only when it can see that.
  for (int kt = -1; kt < num_tiles; ++kt) {
    const bool scores = kt + 1 < group_tiles, output = kt >= 0 && kt < group_tiles;
    const bool last = kt == num_tiles - 1;
    if (scores) mbarrier_wait(full_bar + 8 * ((kt + 1) % kStages), ((kt + 1) / kStages) & 1);
    if (scores && output) {
      turn_begin();
      issue_scores(kt + 1);
      issue_output(kt);
      turn_end(last);
      wgmma::wait<1>();  // the scores (committed first); O's multiplies may still run
      wgmma::pin(s);
      softmax(kt + 1);
      wgmma::wait<0>();
      wgmma::pin(o);
      pack_p();
      rescale_o();
    } else if (scores) {  // tile 0
      turn_begin();
      issue_scores(kt + 1);
      turn_end(last);
      wgmma::wait<0>();
      wgmma::pin(s);
      softmax(kt + 1);
      pack_p();
    } else if (output) {  // the warpgroup's last tile
      turn_begin();
      issue_output(kt);
      turn_end(last);
      wgmma::wait<0>();
      wgmma::pin(o);
    } else {
      turn_begin();
      turn_end(last);
    }
    if (kt >= 0) mbarrier_arrive(empty_bar + 8 * (kt % kStages));  // tile kt's K and V are read
  }

  // Normalize, stage the warp's rows as bf16 over its own Q rows (no other
  // warp reads them), then store 16-byte chunks.
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    float l = row_sum[hr];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    const int r = warp_row0 + acc_row(lane, 2 * hr);
#pragma unroll
    for (int db = 0; db < kDBlocks; ++db) {
      const unsigned v = pack_bf16x2(o[4 * db + 2 * hr] * inv, o[4 * db + 2 * hr + 1] * inv);
      *reinterpret_cast<unsigned*>(tiles + wgmma::tile_offset(r, db, BM) + acc_col(lane, 0) * 2) = v;
    }
  }
  __syncwarp();
  bf16* out = static_cast<bf16*>(p.out) + ((long long)(q_begin + m0) * H + h) * D;
#pragma unroll
  for (int i = lane; i < 16 * kChunks; i += 32) {
    const int r = warp_row0 + i / kChunks, c = i % kChunks;
    if (r < rows)
      *reinterpret_cast<uint4*>(out + (long long)r * H * D + c * 8) =
          *reinterpret_cast<const uint4*>(tiles + wgmma::tile_offset(r, c, BM));
  }
}

}  // namespace kernels
}  // namespace kiln

#endif  // __CUDACC__ || __CUDACC_RTC__ || KILN_CUDA_EMULATION
