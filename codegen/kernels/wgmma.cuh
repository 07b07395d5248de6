// Hopper warpgroup matrix multiply (wgmma, sm_90a) for the attention
// kernels: shared-memory matrix descriptors over the 128-byte-swizzled tile
// layout, the fences and groups that order the asynchronous multiplies, and
// the three shapes flash_attention_wgmma issues. NVRTC-compilable, no host
// headers; the instances that include it compile for sm_90a (instance_source).
//
// Tile layout (both operands of both products): a [rows, 64k] bf16 tile is
// stored as k column panels of 64 (128 bytes a row); panel p starts at
// p * rows * 128 bytes, row r of a panel at r * 128, and its 16-byte chunk c
// at chunk c ^ (r % 8). That is the canonical 128-byte swizzle the hardware
// applies to address bits 4-6 from bits 7-9, so every panel starts on a
// 1024-byte boundary. One layout serves:
//   - K-major operands (Q as A and K as B of S = Q Kᵀ): 8-row core-matrix
//     groups 1024 bytes apart (the stride byte offset); a k16 step moves the
//     start 32 bytes within the panel, four steps then the next panel;
//   - the MN-major operand (V as B of O = P V, keys along k): 8-key groups
//     1024 bytes apart (stride byte offset), the 64-dim panels `rows * 128`
//     bytes apart (leading byte offset); a k16 step moves 16 rows (2048 bytes).
#pragma once

#include "tensor_core.cuh"  // KILN_HOST_DEVICE; on the device common.cuh, smem_address

namespace kiln {
namespace kernels {
namespace wgmma {

// Byte offset of 16-byte chunk `chunk` (of head_dim / 8) of row `row` in a
// panel-major swizzled tile of `rows` rows.
KILN_HOST_DEVICE constexpr int tile_offset(int row, int chunk, int rows) {
  return (chunk >> 3) * rows * 128 + row * 128 + (((chunk & 7) ^ (row & 7)) << 4);
}

// The 64-bit shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor
// Format"): start address, leading and stride byte offsets (each >> 4, 14
// bits), base offset 0 (panels are 1024-byte aligned), layout 1 = 128-byte swizzle.
KILN_HOST_DEVICE constexpr unsigned long long descriptor(unsigned smem_addr, unsigned leading_bytes,
                                                         unsigned stride_bytes) {
  return (unsigned long long)((smem_addr & 0x3FFFF) >> 4) |
         (unsigned long long)((leading_bytes >> 4) & 0x3FFF) << 16 |
         (unsigned long long)((stride_bytes >> 4) & 0x3FFF) << 32 | 1ull << 62;
}

// K-major operand (rows along M or N, head_dim along k), k16 step `ks`.
KILN_HOST_DEVICE constexpr unsigned long long k_major(unsigned tile_addr, int rows, int ks) {
  return descriptor(tile_addr + (ks >> 2) * rows * 128 + (ks & 3) * 32, 16, 1024);
}
// MN-major operand (rows = keys along k, head_dim along N), k16 step `ks`.
KILN_HOST_DEVICE constexpr unsigned long long mn_major(unsigned tile_addr, int rows, int ks) {
  return descriptor(tile_addr + ks * 16 * 128, rows * 128, 1024);
}

}  // namespace wgmma
}  // namespace kernels
}  // namespace kiln

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#include "mbarrier.cuh"  // the producer/consumer barriers

namespace kiln {
namespace kernels {
namespace wgmma {

// Before the first multiply of a batch: orders this thread's earlier
// register writes (accumulators, A fragments) before the multiplies read them.
__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Shared memory written by ordinary stores or cp.async, read next by wgmma
// (the async proxy): each writing thread fences before the barrier.
__device__ __forceinline__ void fence_shared_for_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Pins an accumulator array in registers across an asynchronous batch: the
// compiler may not move its reads or writes past this point.
template <int N>
__device__ __forceinline__ void pin(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The wrappers below name every accumulator register (inline PTX takes no
// register lists): the "+f" constraints on d[0..] and the matching list
// %0.. of the instruction text, written once here for all three shapes.
#define KILN_WGMMA_ACCUMULATORS_8(d, i)                                                              \
  "+f"(d[(i) + 0]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3]), "+f"(d[(i) + 4]), "+f"(d[(i) + 5]), \
      "+f"(d[(i) + 6]), "+f"(d[(i) + 7])
#define KILN_WGMMA_ACCUMULATORS_32(d, i)                                                  \
  KILN_WGMMA_ACCUMULATORS_8(d, (i) + 0), KILN_WGMMA_ACCUMULATORS_8(d, (i) + 8),          \
      KILN_WGMMA_ACCUMULATORS_8(d, (i) + 16), KILN_WGMMA_ACCUMULATORS_8(d, (i) + 24)
#define KILN_WGMMA_ACCUMULATORS_64(d) KILN_WGMMA_ACCUMULATORS_32(d, 0), KILN_WGMMA_ACCUMULATORS_32(d, 32)
#define KILN_WGMMA_ACCUMULATORS_128(d)                                                                      \
  KILN_WGMMA_ACCUMULATORS_32(d, 0), KILN_WGMMA_ACCUMULATORS_32(d, 32), KILN_WGMMA_ACCUMULATORS_32(d, 64), \
      KILN_WGMMA_ACCUMULATORS_32(d, 96)
#define KILN_WGMMA_REGISTERS_32                                                                   \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                       \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define KILN_WGMMA_REGISTERS_64                                                                   \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                       \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "              \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "              \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"

#define KILN_WGMMA_REGISTERS_128                                                                  \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                       \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "              \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "              \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "              \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "              \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "              \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "  \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"

// d (+)= A · B for m64n256k16, A and B from shared memory (K-major both);
// accumulate = false overwrites d. The GEMMs' shape: 64 rows of A against
// 256 rows of B (gemm_swiglu_wgmma's 128 gate and 128 up rows).
__device__ __forceinline__ void wgmma_ss_m64n256k16(float (&d)[128], unsigned long long a_desc,
                                                  unsigned long long b_desc, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      KILN_WGMMA_REGISTERS_128 ", "
      "%128, %129, p, 1, 1, 0, 0;\n}\n"
      : KILN_WGMMA_ACCUMULATORS_128(d)
      : "l"(a_desc), "l"(b_desc), "r"(int(accumulate)));
}

// d (+)= A · B for m64n128k16, A and B from shared memory (K-major both);
// accumulate = false overwrites d.
__device__ __forceinline__ void wgmma_ss_m64n128k16(float (&d)[64], unsigned long long a_desc,
                                                  unsigned long long b_desc, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      KILN_WGMMA_REGISTERS_64 ", "
      "%64, %65, p, 1, 1, 0, 0;\n}\n"
      : KILN_WGMMA_ACCUMULATORS_64(d)
      : "l"(a_desc), "l"(b_desc), "r"(int(accumulate)));
}

// d += A · B for m64n128k16, A from registers (the m16n8k16 A fragment of the
// warp's 16 rows), B from shared memory MN-major (imm-trans-b = 1).
__device__ __forceinline__ void wgmma_rs_m64n128k16_tb(float (&d)[64], const unsigned (&a)[4],
                                                     unsigned long long b_desc) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      KILN_WGMMA_REGISTERS_64 ", "
      "{%64, %65, %66, %67}, %68, 1, 1, 1, 1;\n"
      : KILN_WGMMA_ACCUMULATORS_64(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc));
}

// d += A · B for m64n64k16, A from registers (the m16n8k16 A fragment of the
// warp's 16 rows), B from shared memory MN-major (imm-trans-b = 1).
__device__ __forceinline__ void wgmma_rs_m64n64k16_tb(float (&d)[32], const unsigned (&a)[4],
                                                     unsigned long long b_desc) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      KILN_WGMMA_REGISTERS_32 ", "
      "{%32, %33, %34, %35}, %36, 1, 1, 1, 1;\n"
      : KILN_WGMMA_ACCUMULATORS_32(d, 0)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc));
}

}  // namespace wgmma

// Moves registers between a block's warpgroups (sm_90a): each warpgroup as
// a whole lowers or raises its per-thread count. Takes effect only under a
// register cap at entry (__launch_bounds__(threads, 1)).
template <int kRegisters>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

}  // namespace kernels
}  // namespace kiln

#endif  // __CUDACC__ || __CUDACC_RTC__
