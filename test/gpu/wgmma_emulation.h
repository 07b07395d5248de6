// Hopper's warpgroup multiplies on the emulated device of cuda_emulation.h,
// for running flash_attention_wgmma's and gemm_swiglu_wgmma's bodies on the host. A wgmma is a
// rendezvous of the warpgroup's 128 fibers; the last one to arrive reads the
// shared-memory operands through their descriptors and writes every
// thread's accumulators. The layouts are taken from the PTX ISA, written
// out here on their own (not with wgmma.cuh's helpers):
//   - descriptor: start address, leading and stride byte offsets (>> 4, 14
//     bits each) at bits 0, 16 and 32; layout at bits 62-63, of which only
//     1 (128-byte swizzle) is supported here;
//   - 128-byte swizzle: address bits 4-6 XOR bits 7-9;
//   - K-major operand, element (row r, k): start + (r % 8) * 128 +
//     (r / 8) * stride + 2 k;
//   - MN-major operand, element (k, n): start + 2 (n % 64) + (n / 64) *
//     leading + (k % 8) * 128 + (k / 8) * stride;
//   - accumulators: warp w of the warpgroup holds rows 16 w .. 16 w + 15 in
//     the m16n8 layout, n8 block j in registers 4 j .. 4 j + 3; a register A
//     operand is the m16n8k16 A fragment of the warp's rows.
// A multiply runs when it is issued, so commit and wait have nothing left
// to do; the fences are no-ops.
//
// Include after cuda_emulation.h and before the kernel header.
#pragma once

#include "test/gpu/cuda_emulation.h"

namespace emu {

struct Descriptor {
  unsigned start, leading, stride;
};

inline Descriptor decodeDescriptor(unsigned long long d) {
  if ((d >> 62) != 1) fail("wgmma descriptor without the 128-byte swizzle");
  return {unsigned(d & 0x3FFF) << 4, unsigned((d >> 16) & 0x3FFF) << 4, unsigned((d >> 32) & 0x3FFF) << 4};
}

inline float sharedBf16(unsigned logical) {
  const unsigned addr = logical ^ (((logical >> 7) & 7) << 4);
  uint16_t bits = 0;
  std::memcpy(&bits, shared(addr, 2, "wgmma operand"), 2);
  return kiln::gpu_test::fromBf16(bits);
}
inline float kMajor(const Descriptor& d, int row, int k) {
  return sharedBf16(d.start + (row % 8) * 128 + (row / 8) * d.stride + 2 * k);
}
inline float mnMajor(const Descriptor& d, int k, int n) {
  return sharedBf16(d.start + 2 * (n % 64) + (n / 64) * d.leading + (k % 8) * 128 + (k / 8) * d.stride);
}

// d (+)= A · B for m64nNk16 over the warpgroup: `a(t, row, k)` gives A,
// `b(k, n)` B; scale-d from each slot.
template <int N, class AOf, class BOf>
void warpgroupMultiply(Collective& c, AOf a_of, BOf b_of) {
  float A[64][16], B[16][N];
  for (int t = 0; t < 128; ++t)
    if (c.slots[t].accumulate != c.slots[0].accumulate || c.slots[t].desc_b != c.slots[0].desc_b ||
        c.slots[t].desc_a != c.slots[0].desc_a)
      fail("wgmma operands differ across the warpgroup");
  a_of(c, A);
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < N; ++n) B[k][n] = b_of(k, n);
  for (int t = 0; t < 128; ++t) {
    const int w = t / 32, l = t % 32;
    float* acc = c.slots[t].acc;
    for (int j = 0; j < N / 8; ++j)
      for (int i = 0; i < 4; ++i) {
        const int row = 16 * w + cRow(l, i), col = 8 * j + cCol(l, i);
        float sum = c.slots[t].accumulate ? acc[4 * j + i] : 0.0f;
        for (int k = 0; k < 16; ++k) sum += A[row][k] * B[k][col];
        acc[4 * j + i] = sum;
      }
  }
}

}  // namespace emu

namespace kiln::kernels::wgmma {

inline void fence() {}
inline void commit() {}
template <int kPending>
inline void wait() {}
inline void fence_shared_for_async() {}
template <int N>
inline void pin(float (&)[N]) {}

// Both operands K-major from shared memory, N columns.
template <int N>
inline void wgmma_ss(float (&d)[N / 2], unsigned long long a_desc, unsigned long long b_desc, bool accumulate) {
  emu::Slot s;
  s.acc = d;
  s.desc_a = a_desc;
  s.desc_b = b_desc;
  s.accumulate = accumulate;
  emu::rendezvous(emu::warpgroup(), 128, N == 128 ? "wgmma ss n128" : "wgmma ss n256", emu::current % 128, s,
                  [](emu::Collective& c) {
                    const emu::Descriptor a = emu::decodeDescriptor(c.slots[0].desc_a),
                                          b = emu::decodeDescriptor(c.slots[0].desc_b);
                    emu::warpgroupMultiply<N>(
                        c,
                        [&](emu::Collective&, float (&A)[64][16]) {
                          for (int r = 0; r < 64; ++r)
                            for (int k = 0; k < 16; ++k) A[r][k] = emu::kMajor(a, r, k);
                        },
                        [&](int k, int n) { return emu::kMajor(b, n, k); });
                  });
}
inline void wgmma_ss_m64n128k16(float (&d)[64], unsigned long long a_desc, unsigned long long b_desc,
                                bool accumulate) {
  wgmma_ss<128>(d, a_desc, b_desc, accumulate);
}
// gemm_swiglu_wgmma's: 256 columns, 128 gate and 128 up rows.
inline void wgmma_ss_m64n256k16(float (&d)[128], unsigned long long a_desc, unsigned long long b_desc,
                                bool accumulate) {
  wgmma_ss<256>(d, a_desc, b_desc, accumulate);
}

// A from each thread's registers, B MN-major from shared memory; accumulates.
template <int N>
inline void wgmma_rs_tb(float (&d)[N / 2], const unsigned (&a)[4], unsigned long long b_desc) {
  emu::Slot s;
  s.acc = d;
  std::memcpy(s.a, a, sizeof s.a);
  s.desc_b = b_desc;
  s.accumulate = true;
  emu::rendezvous(emu::warpgroup(), 128, N == 128 ? "wgmma rs n128" : "wgmma rs n64", emu::current % 128, s,
                  [](emu::Collective& c) {
                    const emu::Descriptor b = emu::decodeDescriptor(c.slots[0].desc_b);
                    emu::warpgroupMultiply<N>(
                        c,
                        [](emu::Collective& col, float (&A)[64][16]) {
                          for (int t = 0; t < 128; ++t)
                            for (int i = 0; i < 8; ++i)
                              A[16 * (t / 32) + emu::aRow(t % 32, i)][emu::aCol(t % 32, i)] =
                                  emu::half(col.slots[t].a[i / 2], i % 2);
                        },
                        [&](int k, int n) { return emu::mnMajor(b, k, n); });
                  });
}
inline void wgmma_rs_m64n128k16_tb(float (&d)[64], const unsigned (&a)[4], unsigned long long b_desc) {
  wgmma_rs_tb<128>(d, a, b_desc);
}
inline void wgmma_rs_m64n64k16_tb(float (&d)[32], const unsigned (&a)[4], unsigned long long b_desc) {
  wgmma_rs_tb<64>(d, a, b_desc);
}

}  // namespace kiln::kernels::wgmma
