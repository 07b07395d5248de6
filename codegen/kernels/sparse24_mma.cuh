// Prefill GEMM of a 2:4 structured-sparse weight on the sparse tensor cores
// (mma.sp m16n8k32 bf16, f32 accumulate; sm_80 and later): y [rows, n] =
// x [rows, k] · Wᵀ (+ bias), W's kept values bf16 [n, k/2] and its
// metadata in mma order (sparse24_params.cuh; made once at load by
// runtime/cuda/executor/sparse24_layout.h).
//
//   x [rows, k] bf16, values [n, k/2] bf16, metadata [ceil(n/16), k/64, 32] u32,
//   bias [n] bf16, y [rows, n] Config::Y (bf16 or f32)
//
// Entry: kiln::kernels::sparse24_gemm<Config>(const Sparse24Params&), the
// instance kind `sparse24_gemm` (codegen/cuda/instance_source.cc).
// Config: using Y; static constexpr int kN, kK, kWarpsN, kWarpsM, kStages,
//   kBlockN (= kWarpsN * 64), kBlockM (= kWarpsM * 64), kSmemBytes; bool kBias.
// Grid [ceil(n / kBlockN), ceil(rows / kBlockM)], block [32 kWarpsN kWarpsM],
// kSmemBytes of dynamic shared memory.
//
// W is the mma's sparse A (16 weight rows by 32 input columns, 16 kept), x
// the dense B (its rows are B's columns, so x row-major is the "col"
// operand as it stands), and the accumulator tile is yᵀ. A block's tile is
// kBlockN weight rows by kBlockM x rows; each warp's is 64 by 64: 4 A
// fragments (ldmatrix from the kept values), 8 B fragments (ldmatrix from
// x) and 32 mma.sp a 32-column step. The k loop walks 64 columns a stage:
// kStages stages of cp.async in flight (16-byte copies; past n or rows they
// fill zeros), the values [kBlockN][32] bf16 (64 bytes a row), the
// metadata's kBlockN / 16 tiles of 128 bytes as they lie in memory (a lane
// reads its own word, and the two 32-column steps of a stage share it
// through the sparsity selector, 0 then 1), and x [kBlockM][64] bf16.
// Shared rows are stored with their 16-byte chunks XOR-swizzled, so each
// ldmatrix phase reads 8 distinct bank groups.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#include "common.cuh"
#endif
#include "tensor_core.cuh"  // cp.async, ldmatrix, tile_offset, acc_row / acc_col
#include "sparse24_params.cuh"

namespace kiln {
namespace kernels {

// Byte offset of 16-byte chunk `chunk` (0..3) of kept-value row `row` in a
// stage's [rows][32] bf16 tile: rows are 64 bytes, so 8 rows of one chunk
// span 512 bytes; XOR with (row / 2) % 4 spreads them over 8 bank groups.
KILN_HOST_DEVICE constexpr int sparse24_value_offset(int row, int chunk) {
  return row * 64 + ((chunk ^ ((row >> 1) & 3)) << 4);
}

}  // namespace kernels
}  // namespace kiln

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace kiln {
namespace kernels {

// c += a · b over one 16 x 32 (sparse) by 32 x 8 step; `e` the lane's
// metadata word, kSelector which lane pair of each quad's it is.
template <int kSelector>
__device__ __forceinline__ void mma_sp_bf16(float (&c)[4], const unsigned (&a)[4], const unsigned (&b)[4], unsigned e) {
  asm volatile(
      "mma.sp.sync.aligned.m16n8k32.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9, %10, %11}, {%0, %1, %2, %3}, %12, %13;\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]), "r"(e),
        "n"(kSelector));
}

template <class Config>
__device__ __forceinline__ void sparse24_gemm(const Sparse24Params& p) {
  using Y = typename Config::Y;
  constexpr int kN = Config::kN, kK = Config::kK, kStages = Config::kStages;
  constexpr int kBlockN = Config::kBlockN, kBlockM = Config::kBlockM;
  constexpr int kWarpsN = Config::kWarpsN, kThreads = 32 * Config::kWarpsN * Config::kWarpsM;
  constexpr int kKTiles = kK / 64;
  constexpr int kMetaTiles = (kN + 15) / 16;        // row tiles of the metadata plane
  constexpr int kValueBytes = kBlockN * 64;         // a stage's kept values
  constexpr int kMetaBytes = kBlockN / 16 * 128;    // its metadata
  constexpr int kXBytes = kBlockM * 128;            // its x
  constexpr int kStageBytes = kValueBytes + kMetaBytes + kXBytes;
  static_assert(kK % 64 == 0, "the 2:4 layout takes whole 64-column spans");
  static_assert(kBlockN == kWarpsN * 64 && kBlockM == Config::kWarpsM * 64, "64 x 64 warp tiles");
  static_assert(Config::kSmemBytes == kStages * kStageBytes, "the instance's dynamic shared memory");
  extern __shared__ __align__(128) unsigned char smem[];

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int warp_n = warp % kWarpsN, warp_m = warp / kWarpsN;
  const int n0 = blockIdx.x * kBlockN, m0 = blockIdx.y * kBlockM;
  const unsigned char* values = static_cast<const unsigned char*>(p.values);
  const unsigned char* meta = reinterpret_cast<const unsigned char*>(p.metadata);
  const unsigned char* x = static_cast<const unsigned char*>(p.x);
  const unsigned base = smem_address(smem);

  // Stage `stage` <- k tile kt (columns 64 kt .. 64 kt + 63).
  auto load_stage = [&](int stage, int kt) {
    const unsigned at = base + stage * kStageBytes;
    for (int i = tid; i < kBlockN * 4; i += kThreads) {
      const int row = i / 4, chunk = i % 4, n = n0 + row;
      const unsigned char* src = values + (long long)(n < kN ? n : 0) * kK + kt * 64 + chunk * 16;
      cp_async_16(at + sparse24_value_offset(row, chunk), src, n < kN ? 16 : 0);
    }
    for (int i = tid; i < kBlockN / 16 * 8; i += kThreads) {
      const int tile = n0 / 16 + i / 8, chunk = i % 8;
      const unsigned char* src = meta + ((long long)(tile < kMetaTiles ? tile : 0) * kKTiles + kt) * 128 + chunk * 16;
      cp_async_16(at + kValueBytes + i * 16, src, tile < kMetaTiles ? 16 : 0);
    }
    for (int i = tid; i < kBlockM * 8; i += kThreads) {
      const int row = i / 8, chunk = i % 8, m = m0 + row;
      const unsigned char* src = x + ((long long)(m < p.rows ? m : 0) * kK + kt * 64) * 2 + chunk * 16;
      cp_async_16(at + kValueBytes + kMetaBytes + tile_offset(row, chunk, 64), src, m < p.rows ? 16 : 0);
    }
  };

  float acc[4][8][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[i][j][c] = 0.0f;

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < kKTiles) load_stage(s, s);
    cp_async_commit();
  }
  // Lane addresses inside a stage: A rows of the warp's 4 fragments, B rows of its 8.
  const int a_row = warp_n * 64 + (lane & 15), a_chunk = lane >> 4;
  const int b_row = warp_m * 64 + (lane & 7), b_chunk = lane >> 3;
  for (int kt = 0; kt < kKTiles; ++kt) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    const int next = kt + kStages - 1;
    if (next < kKTiles) load_stage(next % kStages, next);
    cp_async_commit();

    const unsigned at = base + (kt % kStages) * kStageBytes;
    const unsigned* stage_meta = reinterpret_cast<const unsigned*>(smem + (kt % kStages) * kStageBytes + kValueBytes);
    unsigned e[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) e[i] = stage_meta[(warp_n * 4 + i) * 32 + lane];
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      unsigned a[4][4];
#pragma unroll
      for (int i = 0; i < 4; ++i) ldsm_x4(at + sparse24_value_offset(a_row + 16 * i, 2 * s + a_chunk), a[i]);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        unsigned b[4];
        ldsm_x4(at + kValueBytes + kMetaBytes + tile_offset(b_row + 8 * j, 4 * s + b_chunk, 64), b);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          if (s == 0) mma_sp_bf16<0>(acc[i][j], a[i], b, e[i]);
          else mma_sp_bf16<1>(acc[i][j], a[i], b, e[i]);
        }
      }
    }
  }
  cp_async_wait<0>();

  // acc[i][j] is yᵀ's 16 x 8 tile: element c at weight row acc_row, x row acc_col.
  Y* y = static_cast<Y*>(p.y);
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int c = 0; c < 4; c += 2) {
      const int n = n0 + warp_n * 64 + 16 * i + acc_row(lane, c);
      if (n >= kN) continue;
      const float bias = Config::kBias ? to_float(static_cast<const bf16*>(p.bias)[n]) : 0.0f;
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int m = m0 + warp_m * 64 + 8 * j + acc_col(lane, c + h);
          if (m < p.rows) y[(long long)m * kN + n] = from_float<Y>(acc[i][j][c + h] + bias);
        }
    }
}

}  // namespace kernels
}  // namespace kiln

#endif  // __CUDACC__ || __CUDACC_RTC__
