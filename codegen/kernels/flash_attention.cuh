// Causal prefill attention over the paged KV pool on tensor cores, in the
// FlashAttention-2 manner: a block owns a tile of one sequence's queries for
// one head, streams the keys and values in tiles through shared memory, and
// keeps the softmax running max and sum and the output in registers.
// Semantics are those of the causal (non-tree) paged_attention:
//
//   q            [N, H, D] bf16 (already roped)
//   k_pool/v_pool [num_blocks, page_size, Hkv, D] bf16; key j of sequence b lives at
//                slot block_tables[b][j / page_size] * page_size + j % page_size
//   block_tables [B, max_blocks_per_seq] i32
//   query_start  [B + 1] i32: sequence b owns tokens [query_start[b], query_start[b+1])
//   kv_lens      [B] i32: context length including this step's (already appended) tokens
//   out          [N, H, D] bf16
//
// Query i of sequence b (q_len tokens) sits at position kv_len - q_len + i and
// sees keys 0..that position, or with a sliding window W (Config::kWindow,
// attention_window.cuh) its last W of them: a block starts at the key tile
// of its first row's window (earlier pages are never read; keys of that
// tile before the window load as zeros) and masks, besides the diagonal,
// the keys each row's window has passed.
//
// Launch: grid [H, ceil(max_q_len / kBlockM), B], block [32 kWarps] (4 or 8
// warps), dynamic shared memory flash::smem_bytes(D) (above 48 KiB it needs
// CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES). blockIdx.y counts query
// tiles from the last, so the longest (diagonal-heaviest) tiles start first;
// heads are the fastest grid axis, so the H / Hkv blocks that read the same
// K/V tiles run side by side and share them through L2. Blocks past a
// sequence's q_len return at once (ragged batches).
//
// Work split (kBlockM = 16 kWarps kMTiles query rows, kBlockN = 64 keys per
// tile): warp w owns rows [w * 16 kMTiles, (w + 1) * 16 kMTiles) of the query
// tile, as kMTiles m16 tiles. More rows per block (8 warps, or two m-tiles
// per warp) means fewer K/V tile reads from L2 per FLOP. Per key tile:
// S = Q Kᵀ (mma.m16n8k16 bf16, f32 accumulate, K fragments by ldmatrix), a
// causal mask only on the tiles that cross the diagonal, the online-softmax
// update in exp2 with the scale folded into log2(e), then O += P V with P
// re-packed from the S accumulators as the A operand and V fragments by
// ldmatrix.trans. Key tiles after the diagonal are never loaded; a warp whose
// rows all precede a diagonal tile (or lie past q_len) skips it.
//
// Shared memory: K and V tiles [64, D] bf16 in two stages (cp.async of tile
// t+1, gathered row by row through the block table, overlaps the math on
// tile t). Q [kBlockM, D] passes through stage 1 once, before the loop: its
// fragments then stay in registers (two m-tiles per warp only at D = 64: at
// D = 128 their output and scores do not fit 255 registers).
// Every tile is row-major with 16-byte chunk c of row r stored at chunk
// c ^ (r % 8): the 8 rows an ldmatrix phase reads, and the 8 chunks a
// cp.async phase writes, fall in 8 distinct bank groups. The output goes
// through the same layout so its global stores are 16-byte and coalesced.
#pragma once

#include "tensor_core.cuh"  // and, on the device, common.cuh
#include "attention_window.cuh"

// Layout helpers, host-visible: the instance generator sizes shared memory
// with smem_bytes, and runtime/cuda/nvrtc_compiler_test.cc checks the
// fragment addressing (tensor_core.cuh's, under the names below) against
// ldmatrix and mma emulated from the PTX ISA's tables
// (test/gpu/flash_attention_emulation_test.cc runs the whole body).
namespace kiln {
namespace kernels {
namespace flash {

constexpr int kBlockN = 64;  // keys per tile

using kernels::acc_col;
using kernels::acc_row;
using kernels::chunk_step;
using kernels::ldsm_a_chunk;
using kernels::ldsm_a_row;
using kernels::ldsm_k_chunk;
using kernels::ldsm_k_row;
using kernels::tile_offset;

// Dynamic shared memory of an instance: two stages of K and V tiles (Q and the
// output tile pass through them); the same for every block_m and warp count.
KILN_HOST_DEVICE constexpr int smem_bytes(int head_dim, int /*block_m*/ = 64) { return 2 * 2 * kBlockN * head_dim * 2; }

}  // namespace flash
}  // namespace kernels
}  // namespace kiln

// The kernel body. It also compiles on the host under KILN_CUDA_EMULATION,
// where test/gpu/cuda_emulation.h supplies the intrinsics and runs each CUDA
// thread as a fiber (test/gpu/flash_attention_emulation_test.cc).
#if defined(__CUDACC__) || defined(__CUDACC_RTC__) || defined(KILN_CUDA_EMULATION)

namespace kiln {
namespace kernels {

// Config: static constexpr int kHeads, kKvHeads, kHeadDim, kPageSize, kWarps, kBlockM, kSmemBytes;
//         static constexpr float kScale (> 0); optionally static constexpr int kWindow.
template <class Config>
__device__ __forceinline__ void flash_attention(const PagedAttentionParams& p) {
  using namespace flash;
  constexpr int D = Config::kHeadDim, H = Config::kHeads, Hkv = Config::kKvHeads;
  constexpr int kGroup = H / Hkv;
  constexpr int BM = Config::kBlockM, BN = kBlockN;
  constexpr int kWarps = Config::kWarps, kThreads = 32 * kWarps;
  constexpr int kMTiles = BM / (16 * kWarps);  // m16 tiles per warp
  constexpr int kWarpRows = 16 * kMTiles;
  constexpr int kChunks = D / 8;               // 16-byte chunks per row
  constexpr int kKSteps = D / 16;              // k16 steps of Q Kᵀ
  constexpr int kNBlocks = BN / 8;             // n8 blocks of S
  constexpr int kDBlocks = D / 8;              // n8 blocks of O
  constexpr int kTileBytes = BN * D * 2;
  constexpr int kStageBytes = 2 * kTileBytes;  // K tile, then V tile
  constexpr int kRowsPerPass = kThreads / kChunks;  // rows one pass of the block copies
  constexpr float kScaleLog2 = Config::kScale * 1.4426950408889634f;
  constexpr int kWindow = AttentionWindow<Config>::value;
  static_assert(H % Hkv == 0, "GQA: heads is a multiple of kv_heads");
  static_assert(D == 64 || D == 128, "head_dim 64 or 128");
  static_assert(kWarps == 4 || kWarps == 8, "4 or 8 warps");
  static_assert(BM == 16 * kWarps * kMTiles && (kMTiles == 1 || (kMTiles == 2 && D == 64)),
                "one m16 tile per warp, or two at head_dim 64");
  static_assert(Config::kSmemBytes == smem_bytes(D, BM), "dynamic shared memory size");
  static_assert(BM * D * 2 <= kStageBytes, "Q and the output tile fit in one stage");
  static_assert(Config::kScale > 0.0f, "the running max is taken over unscaled scores");

  extern __shared__ __align__(128) unsigned char smem[];
  const unsigned smem_base = smem_address(smem);
  const unsigned q_base = smem_base + kStageBytes;  // stage 1, free until tile 1 is loaded

  const int h = blockIdx.x, b = blockIdx.z;
  const int kvh = h / kGroup;
  const int m0 = (gridDim.y - 1 - blockIdx.y) * BM;  // first query row of the tile, in the sequence
  const int q_begin = p.query_start[b], q_len = p.query_start[b + 1] - q_begin;
  if (m0 >= q_len) return;
  const int rows = min(BM, q_len - m0);
  const int first_pos = p.kv_lens[b] - q_len + m0;  // position of the tile's first query
  const int key_end = first_pos + rows;             // keys [key_lo, key_end) are seen by some row
  const int key_lo = window_begin(kWindow, first_pos);  // the first row's window (0: none)
  const int first_tile = key_lo / BN;
  const int num_tiles = (key_end + BN - 1) / BN;
  const int full_tiles = (first_pos + 1) / BN;      // tiles before it no row's diagonal crosses
  // Keys below this one are outside the last row's window: tiles that start
  // below it need the window's mask.
  const int window_mask_end = kWindow > 0 ? first_pos + rows - kWindow : 0;
  const int* table = p.block_tables + (long long)b * p.max_blocks_per_seq;
  const bf16* k_pool = static_cast<const bf16*>(p.k_pool);
  const bf16* v_pool = static_cast<const bf16*>(p.v_pool);

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int copy_chunk = tid % kChunks, copy_row = tid / kChunks;

  // Keys [kt * BN, kt * BN + BN) -> stage; keys at or past key_end, or
  // before key_lo (on pages the runtime may have freed), become zeros.
  auto load_kv = [&](int kt, int stage) {
    const unsigned k_dst = smem_base + stage * kStageBytes, v_dst = k_dst + kTileBytes;
#pragma unroll
    for (int i = 0; i < BN / kRowsPerPass; ++i) {
      const int r = copy_row + i * kRowsPerPass, j = kt * BN + r;
      long long at = 0;
      int bytes = 0;
      if (j < key_end && j >= key_lo) {
        const long long slot = (long long)table[j / Config::kPageSize] * Config::kPageSize + j % Config::kPageSize;
        at = (slot * Hkv + kvh) * D + copy_chunk * 8;
        bytes = 16;
      }
      const int off = tile_offset(r, copy_chunk, D);
      cp_async_16(k_dst + off, k_pool + at, bytes);
      cp_async_16(v_dst + off, v_pool + at, bytes);
    }
  };

  // Q rows past q_len become zeros (their results are never stored).
  {
    const bf16* q = static_cast<const bf16*>(p.q) + ((long long)(q_begin + m0) * H + h) * D + copy_chunk * 8;
#pragma unroll
    for (int i = 0; i < BM / kRowsPerPass; ++i) {
      const int r = copy_row + i * kRowsPerPass;
      cp_async_16(q_base + tile_offset(r, copy_chunk, D), q + (r < rows ? (long long)r * H * D : 0),
                  r < rows ? 16 : 0);
    }
    cp_async_commit();
  }
  load_kv(first_tile, 0);
  cp_async_commit();

  const int warp_row0 = warp * kWarpRows;  // first row of this warp in the tile
  // ldmatrix lane offsets within a tile at k-step / d-block 0 (chunk_step
  // moves along the row): Q (A operand), K (B operand of Q Kᵀ), V (.trans B
  // operand of P V).
  const int q_lane = tile_offset(warp_row0 + ldsm_a_row(lane), ldsm_a_chunk(lane), D);
  const int k_lane = tile_offset(ldsm_k_row(lane), ldsm_k_chunk(lane), D);
  const int v_lane = tile_offset(ldsm_a_row(lane), ldsm_a_chunk(lane), D);

  unsigned q_frag[kMTiles][kKSteps][4];
  cp_async_wait<1>();  // Q has landed (tile 0 may still be in flight)
  __syncthreads();
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) ldsm_x4(q_base + chunk_step(q_lane, ks) + mt * 16 * D * 2, q_frag[mt][ks]);
  __syncthreads();  // tile 1 overwrites stage 1 next

  float o[kMTiles][kDBlocks][4];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int db = 0; db < kDBlocks; ++db)
#pragma unroll
      for (int i = 0; i < 4; ++i) o[mt][db][i] = 0.0f;
  float row_max[kMTiles][2], row_sum[kMTiles][2];  // [m-tile][rows g, g + 8]; sums are this lane's share
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      row_max[mt][hr] = neg_inf();
      row_sum[mt][hr] = 0.0f;
    }

  // Position of this warp's last query row (-1: it has none, every row is past q_len).
  const int warp_last_pos = warp_row0 < rows ? first_pos + min(warp_row0 + kWarpRows, rows) - 1 : -1;
  // The first key this warp's first row sees (its window's).
  const int warp_key_lo = window_begin(kWindow, first_pos + warp_row0);
  for (int kt = first_tile; kt < num_tiles; ++kt) {
    const int stage = (kt - first_tile) & 1;
    if (kt + 1 < num_tiles) load_kv(kt + 1, stage ^ 1);
    cp_async_commit();  // possibly empty: keeps "all but the newest group" = tile kt
    cp_async_wait<1>();
    __syncthreads();

    const int key0 = kt * BN;
    // Else every key of the tile is after this warp's rows, or before their windows.
    if (key0 <= warp_last_pos && key0 + BN > warp_key_lo) {
      // Per-tile (loop-variant) lane offsets keep the compiler from holding one
      // address register per (k-step, n-block) pair.
      const int k_tile = stage * kStageBytes + k_lane, v_tile = stage * kStageBytes + kTileBytes + v_lane;

      // S = Q Kᵀ for the warp's rows and the tile's 64 keys.
      float s[kMTiles][kNBlocks][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int nb = 0; nb < kNBlocks; ++nb)
#pragma unroll
          for (int i = 0; i < 4; ++i) s[mt][nb][i] = 0.0f;
#pragma unroll
      for (int ks = 0; ks < kKSteps; ++ks) {
#pragma unroll
        for (int nb = 0; nb < kNBlocks; nb += 2) {
          unsigned kf[4];
          ldsm_x4(smem_base + chunk_step(k_tile, ks) + nb * 8 * D * 2, kf);
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) {
            mma_bf16(s[mt][nb], q_frag[mt][ks], kf[0], kf[1]);
            mma_bf16(s[mt][nb + 1], q_frag[mt][ks], kf[2], kf[3]);
          }
        }
      }

      // Causal mask on the tiles that cross the diagonal: key > position -> -inf;
      // with a window, also on those that cross a row's window: key <= position - W -> -inf.
      if (kt >= full_tiles || key0 < window_mask_end) {
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
          for (int nb = 0; nb < kNBlocks; ++nb)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              const int pos = first_pos + warp_row0 + mt * 16 + acc_row(lane, i);
              const int key = key0 + nb * 8 + acc_col(lane, i);
              if (key > pos || (kWindow > 0 && key <= pos - kWindow)) s[mt][nb][i] = neg_inf();
            }
      }

      // Online softmax: new running max, rescale the old sum and output, P = exp(S - max).
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          float mx = row_max[mt][hr];
#pragma unroll
          for (int nb = 0; nb < kNBlocks; ++nb) mx = fmaxf(mx, fmaxf(s[mt][nb][2 * hr], s[mt][nb][2 * hr + 1]));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));  // the 4 lanes of a row
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          const float base = mx == neg_inf() ? 0.0f : mx * kScaleLog2;
          const float alpha = exp2_approx(row_max[mt][hr] * kScaleLog2 - base);
          row_max[mt][hr] = mx;
          float sum = 0.0f;
#pragma unroll
          for (int nb = 0; nb < kNBlocks; ++nb)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const float pe = exp2_approx(fmaf(s[mt][nb][2 * hr + e], kScaleLog2, -base));
              s[mt][nb][2 * hr + e] = pe;
              sum += pe;
            }
          row_sum[mt][hr] = row_sum[mt][hr] * alpha + sum;
#pragma unroll
          for (int db = 0; db < kDBlocks; ++db) {
            o[mt][db][2 * hr] *= alpha;
            o[mt][db][2 * hr + 1] *= alpha;
          }
        }

      // O += P V: P's accumulators of keys 16kk..16kk+15 are the A fragment as they lie.
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) {
        unsigned pa[kMTiles][4];
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          pa[mt][0] = pack_bf16x2(s[mt][2 * kk][0], s[mt][2 * kk][1]);
          pa[mt][1] = pack_bf16x2(s[mt][2 * kk][2], s[mt][2 * kk][3]);
          pa[mt][2] = pack_bf16x2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
          pa[mt][3] = pack_bf16x2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
        }
#pragma unroll
        for (int db = 0; db < kDBlocks; db += 2) {
          unsigned vf[4];
          ldsm_x4_trans(smem_base + chunk_step(v_tile, db / 2) + kk * 16 * D * 2, vf);
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) {
            mma_bf16(o[mt][db], pa[mt], vf[0], vf[1]);
            mma_bf16(o[mt][db + 1], pa[mt], vf[2], vf[3]);
          }
        }
      }
    }
    __syncthreads();  // the stage just read is the one the next iteration refills
  }
  cp_async_wait<0>();
  __syncthreads();  // (only a malformed kv_len < q_len leaves the loop without a final barrier)

  // Normalize, stage the warp's rows as bf16 in (free) stage 0, store 16-byte chunks.
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      float l = row_sum[mt][hr];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      const int r = warp_row0 + mt * 16 + acc_row(lane, 2 * hr);
#pragma unroll
      for (int db = 0; db < kDBlocks; ++db) {
        const unsigned v = pack_bf16x2(o[mt][db][2 * hr] * inv, o[mt][db][2 * hr + 1] * inv);
        *reinterpret_cast<unsigned*>(smem + tile_offset(r, db, D) + acc_col(lane, 0) * 2) = v;
      }
    }
  __syncwarp();
  bf16* out = static_cast<bf16*>(p.out) + ((long long)(q_begin + m0) * H + h) * D;
#pragma unroll
  for (int i = lane; i < kWarpRows * kChunks; i += 32) {
    const int r = warp_row0 + i / kChunks, c = i % kChunks;
    if (r < rows)
      *reinterpret_cast<uint4*>(out + (long long)r * H * D + c * 8) =
          *reinterpret_cast<const uint4*>(smem + tile_offset(r, c, D));
  }
}

}  // namespace kernels
}  // namespace kiln

#endif  // __CUDACC__ || __CUDACC_RTC__ || KILN_CUDA_EMULATION
