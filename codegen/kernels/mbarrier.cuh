// Barriers between a block's producer and consumer warps: named barriers,
// shared-memory barriers (mbarrier), and the copies of sm_90's TMA unit that
// complete on an mbarrier: the bulk copy (cp.async.bulk, no tensor map) and
// the tensor copy of a 2-D box (cp.async.bulk.tensor). NVRTC-compilable,
// sm_90 and later. On the host, test/gpu/cuda_emulation.h supplies the same
// functions.
#pragma once

namespace kiln {
namespace kernels {

// Named barriers (ids 1-15; 0 is __syncthreads) over `threads` threads:
// sync waits for all of them, arrive counts in without waiting.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// mbarrier: init (one thread, then a block barrier), arrive, and wait for the phase of
// the given parity to complete. A fresh barrier is in phase 0, so waiting on
// parity 1 passes at once (a producer's first pass over its stages).
__device__ __forceinline__ void mbarrier_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbarrier_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbarrier_wait(unsigned bar, unsigned parity) {
  unsigned done = 0;
  while (!done)
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
}
// The producer's arrival that also tells the barrier how many bytes of bulk
// copies will complete on it before its phase can.
__device__ __forceinline__ void mbarrier_arrive_expect_bytes(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

// `bytes` (a multiple of 16, both addresses 16-byte aligned) from global
// memory into this block's shared memory at `dst`, counted on barrier `bar`
// when they land; `l2_policy` from common.cuh's createpolicy helpers.
__device__ __forceinline__ void bulk_copy_to_shared(unsigned dst, const void* src, unsigned bytes, unsigned bar,
                                                    unsigned long long l2_policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;\n" ::"r"(
          dst),
      "l"(src), "r"(bytes), "r"(bar), "l"(l2_policy)
      : "memory");
}

// A 2-D box of the tensor map at `map` (TMA: a CUtensorMap the host
// encoded, in a __grid_constant__ kernel parameter), from element
// (x, y) = (column, row) on, into this block's shared memory at `dst`,
// counted on barrier `bar` when it lands. The map's swizzle lays the box out
// as wgmma.cuh's tiles when `dst` is 1024-byte aligned; elements outside the
// tensor land as zeros.
__device__ __forceinline__ void tensor_copy_2d_to_shared(unsigned dst, const void* map, int x, int y, unsigned bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          dst),
      "l"(map), "r"(x), "r"(y), "r"(bar)
      : "memory");
}

}  // namespace kernels
}  // namespace kiln
