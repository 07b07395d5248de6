// The tensor-core building blocks of the attention kernels (flash_attention,
// decode_attention_mma): bf16 tiles [rows, head_dim] in shared memory in a
// swizzled row-major layout, filled by 16-byte cp.async copies, read into
// m16n8k16 fragments by ldmatrix and multiplied by mma.sync (bf16 in, f32
// accumulate). Header-only and NVRTC-compilable: no host headers.
//
// The layout and fragment addressing are host-visible constexpr functions:
// runtime/cuda/nvrtc_compiler_test.cc checks them against ldmatrix and mma
// emulated from the PTX ISA's tables. The PTX wrappers are device code;
// under KILN_CUDA_EMULATION, test/gpu/cuda_emulation.h supplies the ones
// that take a shared-window address and only the pointer forms come from here.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define KILN_HOST_DEVICE __host__ __device__
#else
#define KILN_HOST_DEVICE
#endif

namespace kiln {
namespace kernels {

// Byte offset of 16-byte chunk `chunk` of row `row` in a row-major [rows, head_dim]
// bf16 tile (head_dim a multiple of 64, so a row has at least 8 chunks), stored
// at chunk chunk ^ (row % 8): the 8 rows an ldmatrix phase reads, and the 8
// chunks a cp.async phase writes, fall in 8 distinct bank groups.
KILN_HOST_DEVICE constexpr int tile_offset(int row, int chunk, int head_dim) {
  return row * head_dim * 2 + ((chunk ^ (row & 7)) << 4);
}

// ldmatrix.x4 lane addresses. For an A operand (16 rows x 16 columns at
// chunks c, c + 1) and for V under .trans (16 keys x 16 dims): lane l points
// at row l % 16, chunk c + l / 16, giving matrices (rows 0-7, c), (rows 8-15,
// c), (rows 0-7, c+1), (rows 8-15, c+1) = registers a0..a3, or V's b0, b1 of
// dims c and then of dims c + 1.
KILN_HOST_DEVICE constexpr int ldsm_a_row(int lane) { return lane & 15; }
KILN_HOST_DEVICE constexpr int ldsm_a_chunk(int lane) { return lane >> 4; }
// For K as the B operand of S = Q Kᵀ (16 keys x 16 dims, no .trans): lane l
// points at key (l % 8) + 8 (l / 16), chunk c + (l / 8) % 2, giving matrices
// (keys 0-7, c), (keys 0-7, c+1), (keys 8-15, c), (keys 8-15, c+1) = b0, b1
// of keys 0-7 and then of keys 8-15.
KILN_HOST_DEVICE constexpr int ldsm_k_row(int lane) { return (lane & 7) + ((lane >> 4) << 3); }
KILN_HOST_DEVICE constexpr int ldsm_k_chunk(int lane) { return (lane >> 3) & 1; }

// Offset of chunk c0 + 2 step from `lane_offset`, the offset of chunk c0 (0 or
// 1) of the same row: rows are a multiple of 128 bytes apart, so within the
// first 8 chunks the step XORs bits 5-6, and the next 8 chunks add 128 bytes.
KILN_HOST_DEVICE constexpr int chunk_step(int lane_offset, int step) {
  return (lane_offset ^ ((step & 3) << 5)) + (step >> 2) * 128;
}

// Row (0..15) and column (0..7) of accumulator element i (0..3) of lane `lane`
// in an m16n8 C/D fragment.
KILN_HOST_DEVICE constexpr int acc_row(int lane, int i) { return (lane >> 2) + ((i >> 1) << 3); }
KILN_HOST_DEVICE constexpr int acc_col(int lane, int i) { return ((lane & 3) << 1) + (i & 1); }

}  // namespace kernels
}  // namespace kiln

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

#include "common.cuh"

namespace kiln {
namespace kernels {

// The 32-bit shared-window address of a generic pointer into shared memory.
__device__ __forceinline__ unsigned smem_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, bypassing L1; `bytes` 0 writes zeros and reads nothing.
__device__ __forceinline__ void cp_async_16(unsigned dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// ldmatrix.x4 (and .trans) from the row addresses of lanes 8m..8m+7 for matrix m.
__device__ __forceinline__ void ldsm_x4(unsigned addr, unsigned (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_trans(unsigned addr, unsigned (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// c += a · b for one m16n8k16 tile: a = A fragment (4 x bf16x2), b0/b1 = B fragment.
__device__ __forceinline__ void mma_bf16(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// bf16x2 with `lo` in the low half (the lower column index, as mma expects).
__device__ __forceinline__ unsigned pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const unsigned*>(&v);
}

// 2^x; 2^-inf = 0.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace kernels
}  // namespace kiln

#endif  // __CUDACC__ || __CUDACC_RTC__

#if defined(__CUDACC__) || defined(__CUDACC_RTC__) || defined(KILN_CUDA_EMULATION)

namespace kiln {
namespace kernels {

// The same on a generic pointer into shared memory.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, int bytes) {
  cp_async_16(smem_address(dst), src, bytes);
}
__device__ __forceinline__ void ldsm_x4(const void* p, unsigned (&r)[4]) { ldsm_x4(smem_address(p), r); }
__device__ __forceinline__ void ldsm_x4_trans(const void* p, unsigned (&r)[4]) { ldsm_x4_trans(smem_address(p), r); }

}  // namespace kernels
}  // namespace kiln

#endif  // __CUDACC__ || __CUDACC_RTC__ || KILN_CUDA_EMULATION
