// An emulated CUDA device on the host, no GPU, for running a kernel body
// (flash_attention, flash_attention_wgmma, decode_attention, gemv) under
// KILN_CUDA_EMULATION: each of a block's CUDA threads is a fiber (ucontext)
// on one OS thread, and the warp- and block-wide operations are rendezvous
// where the last arriving lane does the work for all: ldmatrix and
// mma.m16n8k16 from the PTX ISA's fragment tables, __shfl_xor_sync,
// __shfl_sync, __syncwarp, __syncthreads; named barriers (bar.sync,
// bar.arrive) and shared-memory mbarriers (init, arrive, parity wait) block
// a fiber until their phase completes; bulk and tensor (TMA) copies land
// at once and count their bytes on an mbarrier. wgmma_emulation.h adds the
// warpgroup multiplies. cp.async copies land
// only at the issuing thread's cp.async.wait_group (or, in the eager mode, at
// once) and zero-byte copies write zeros; shared memory starts as NaN for
// every block, every shared access is checked against the instance's size
// and every cp.async source against the kernel's buffers, so a missing wait
// or barrier, a slot read by the wrong thread, a wrong gather or a wrong
// fragment shows up as a wrong or NaN output, or as emu::failure. Each 8-row
// phase of every ldmatrix is checked for shared-memory bank conflicts.
//
// Include it before the kernel header; a test sets emu::readable,
// emu::eager_copies and (for dynamic shared memory) emu::smem_limit, then
// emu::launch(grid, threads, kernel body).
#pragma once

#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "codegen/kernels/kernel_params.cuh"
#include "test/gpu/gpu_harness.h"

#define KILN_CUDA_EMULATION 1
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__
#define __align__(n)  // the emulated shared memory is aligned where it is defined
#define __grid_constant__

struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};
struct uint4 {
  unsigned x, y, z, w;
};
struct uint2 {
  unsigned x, y;
};
struct float4 {
  float x, y, z, w;
};
inline Dim3 blockIdx, gridDim;

namespace kiln::kernels {

struct bf16 {
  uint16_t bits;
};
// The SM's shared memory: a kernel's extern __shared__ array, and the
// emulated static one (emulated_shared_memory); addresses are offsets into it.
alignas(128) inline unsigned char smem[228 * 1024];

}  // namespace kiln::kernels

namespace emu {

constexpr int kMaxThreads = 384, kStackBytes = 128 * 1024;

struct Copy {
  unsigned dst;  // shared address
  const unsigned char* src;
  int bytes;
};

struct Fiber {
  ucontext_t context;
  std::vector<char> stack = std::vector<char>(kStackBytes);
  bool done = false;
  const uint64_t* wait_generation = nullptr;  // blocked while *wait_generation == wait_value
  uint64_t wait_value = 0;
  std::vector<Copy> open;                 // issued, not yet committed
  std::vector<std::vector<Copy>> groups;  // committed, oldest first
};

// One collective in progress: lanes fill their slot and the last one runs it.
struct Slot {
  float value = 0;  // __shfl_xor_sync
  int lane_mask = 0;
  float* result = nullptr;
  unsigned addr = 0;                   // ldmatrix row address
  unsigned* out = nullptr;             // ldmatrix registers
  unsigned a[4] = {}, b0 = 0, b1 = 0;  // mma operands (a: also wgmma's register A)
  float* acc = nullptr;
  unsigned long long desc_a = 0, desc_b = 0;  // wgmma shared-memory descriptors
  bool accumulate = false;                     // wgmma scale-d
  int ivalue = 0, src_lane = 0;                // __shfl_sync
  int* iresult = nullptr;
};
struct Collective {
  int arrived = 0;
  const char* kind = nullptr;
  uint64_t generation = 0;
  Slot slots[kMaxThreads];
};

inline ucontext_t scheduler;
inline Fiber fibers[kMaxThreads];
inline Collective warp_collective[kMaxThreads / 32], warpgroup_collective[kMaxThreads / 128], block_collective;

// Named barriers 0-15 (0 is __syncthreads') and the block's mbarriers by
// shared address; both start fresh with every block.
struct NamedBarrier {
  int arrived = 0, expected = 0;
  uint64_t generation = 0;
};
inline NamedBarrier named_barriers[16];
struct MBarrier {
  int count = 0, pending = 0;
  long long tx = 0;  // bytes announced by expect_tx and not yet landed
  uint64_t phase = 0;
};
inline std::map<unsigned, MBarrier> mbarriers;
inline int current = 0, threads = 128;  // the running thread, the block's size
inline bool eager_copies = false;
// Each scheduling round runs the fibers in a fresh random order (else in
// thread order), so a thread that runs ahead of a missing wait shows it.
inline bool shuffled_schedule = false;
inline std::mt19937 schedule_rng{2026};
inline std::function<void()> body;
inline std::string failure;  // the first emulation error (the fiber keeps going on defaults)
inline int smem_limit = 0;   // bytes of shared memory the instance has
struct Range {
  const unsigned char* begin;
  size_t bytes;
};
inline std::vector<Range> readable;   // global memory cp.async may read
inline long long bank_conflicts = 0;  // ldmatrix phases whose 8 rows share a bank group

inline void fail(const std::string& what) {
  if (failure.empty()) failure = what;
}

// `bytes` of shared memory at `addr`, or (out of range: a failure) its start.
inline unsigned char* shared(unsigned addr, int bytes, const char* what) {
  if (size_t(addr) + bytes > size_t(smem_limit)) {
    fail(std::string(what) + " at " + std::to_string(int(addr)) + " past the instance's " +
         std::to_string(smem_limit) + " bytes of shared memory");
    return kiln::kernels::smem;
  }
  return kiln::kernels::smem + addr;
}

// Whether [p, p + bytes) lies inside one of the kernel's buffers (readable).
inline bool readableBytes(const unsigned char* p, long long bytes) {
  for (const Range& r : readable)
    if (p >= r.begin && p + bytes <= r.begin + r.bytes) return true;
  return false;
}

inline void land(const Copy& c) {
  if (c.dst % 16) fail("cp.async destination not 16-byte aligned");
  unsigned char* dst = shared(c.dst, 16, "cp.async destination");
  if (c.bytes == 0) {
    std::memset(dst, 0, 16);
    return;
  }
  if (!readableBytes(c.src, 16) || reinterpret_cast<uintptr_t>(c.src) % 16) {
    fail("cp.async source outside the kernel's buffers or misaligned");
    return;
  }
  std::memcpy(dst, c.src, 16);
}

inline void yieldUntilChanged(const uint64_t& generation, uint64_t seen) {
  Fiber& f = fibers[current];
  f.wait_generation = &generation;
  f.wait_value = seen;
  swapcontext(&f.context, &scheduler);
}

// Each participant calls with its slot filled; the last one runs `exec` over all.
template <class Exec>
void rendezvous(Collective& c, int participants, const char* kind, int slot, const Slot& mine, Exec exec) {
  if (c.arrived == 0) c.kind = kind;
  else if (std::strcmp(c.kind, kind) != 0) fail(std::string("divergent collectives: ") + c.kind + " and " + kind);
  c.slots[slot] = mine;
  if (++c.arrived == participants) {
    exec(c);
    c.arrived = 0;
    ++c.generation;
    return;
  }
  yieldUntilChanged(c.generation, c.generation);
}

inline int lane() { return current % 32; }
inline Collective& warp() { return warp_collective[current / 32]; }
inline Collective& warpgroup() { return warpgroup_collective[current / 128]; }

// bar.sync / bar.arrive id, n: the barrier completes when n threads have
// arrived; sync waits for that, arrive does not.
inline void namedBarrier(int id, int n, bool wait) {
  if (id < 1 || id > 15 || n % 32 != 0 || n > threads) return fail("named barrier id or thread count out of range");
  NamedBarrier& b = named_barriers[id];
  if (b.arrived == 0) b.expected = n;
  else if (b.expected != n) return fail("named barrier used with two thread counts at once");
  if (++b.arrived == n) {
    b.arrived = 0;
    ++b.generation;
    return;
  }
  if (wait) yieldUntilChanged(b.generation, b.generation);
}

inline MBarrier* mbarrier(unsigned addr, const char* what) {
  if (addr % 8) fail(std::string(what) + ": mbarrier not 8-byte aligned");
  shared(addr, 8, what);
  auto it = mbarriers.find(addr);
  if (it == mbarriers.end()) {
    fail(std::string(what) + " on an mbarrier never initialized");
    return nullptr;
  }
  return &it->second;
}

// The PTX ISA's m16n8k16 fragment tables (g = lane / 4, t = lane % 4; element i of 8 halves).
inline int aRow(int lane, int i) { return lane / 4 + ((i == 2 || i == 3 || i == 6 || i == 7) ? 8 : 0); }
inline int aCol(int lane, int i) { return 2 * (lane % 4) + (i & 1) + (i >= 4 ? 8 : 0); }
inline int bRow(int lane, int i) { return 2 * (lane % 4) + (i & 1) + (i >= 2 ? 8 : 0); }
inline int cRow(int lane, int i) { return lane / 4 + (i >= 2 ? 8 : 0); }
inline int cCol(int lane, int i) { return 2 * (lane % 4) + (i & 1); }
inline float half(unsigned reg, int i) { return kiln::gpu_test::fromBf16(uint16_t(i ? reg >> 16 : reg & 0xffff)); }

// ldmatrix.sync.aligned.m8n8.x4{.trans}.b16: lanes 8m..8m+7 give the row
// addresses of matrix m; lane l receives in register m the elements (row l/4,
// columns 2(l%4), 2(l%4)+1), or with .trans (rows 2(l%4), 2(l%4)+1, column l/4).
inline void ldmatrix(unsigned addr, unsigned (&r)[4], bool trans) {
  Slot s;
  s.addr = addr;
  s.out = r;
  rendezvous(warp(), 32, trans ? "ldmatrix.trans" : "ldmatrix", lane(), s, [trans](Collective& c) {
    const unsigned char* rows[32];
    for (int l = 0; l < 32; ++l) {
      if (c.slots[l].addr % 16) fail("ldmatrix row address not 16-byte aligned");
      rows[l] = shared(c.slots[l].addr, 16, "ldmatrix row");
    }
    for (int m = 0; m < 4; ++m) {
      bool groups[8] = {};
      int distinct = 0;
      for (int row = 0; row < 8; ++row) {
        const int group = c.slots[8 * m + row].addr / 16 % 8;
        distinct += !groups[group];
        groups[group] = true;
      }
      if (distinct != 8) ++bank_conflicts;
    }
    for (int l = 0; l < 32; ++l)
      for (int m = 0; m < 4; ++m) {
        uint16_t e[2];
        for (int i = 0; i < 2; ++i) {
          const int row = trans ? 2 * (l % 4) + i : l / 4, col = trans ? l / 4 : 2 * (l % 4) + i;
          std::memcpy(&e[i], rows[8 * m + row] + 2 * col, 2);
        }
        c.slots[l].out[m] = unsigned(e[0]) | unsigned(e[1]) << 16;
      }
  });
}

// An emulated TMA tensor map: what the host's cuTensorMapEncodeTiled would
// encode for a row-major bf16 matrix with the 128-byte swizzle, in the
// opaque bytes of kernels::TensorMap.
struct EmulatedTensorMap {
  const unsigned char* base;
  long long columns, rows, row_bytes;
  int box_columns, box_rows;
  unsigned long long magic;
};
constexpr unsigned long long kTensorMapMagic = 0x6b696c6e746d6170ull;
static_assert(sizeof(EmulatedTensorMap) <= sizeof(kiln::kernels::TensorMap));

inline kiln::kernels::TensorMap encodeTensorMap(const void* base, long long columns, long long rows, int box_columns,
                                                int box_rows) {
  kiln::kernels::TensorMap map{};
  const EmulatedTensorMap m{static_cast<const unsigned char*>(base), columns, rows, columns * 2, box_columns, box_rows,
                            kTensorMapMagic};
  std::memcpy(&map, &m, sizeof m);
  return map;
}

}  // namespace emu

// The CUDA builtins the kernels use, and tensor_core.cuh's PTX wrappers that
// take a shared address (it adds the pointer forms on top).
namespace kiln::kernels {

inline float neg_inf() { return -INFINITY; }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline void __syncthreads() {
  emu::rendezvous(emu::block_collective, emu::threads, "__syncthreads", emu::current, emu::Slot{},
                  [](emu::Collective&) {});
}
inline void __syncwarp() { emu::rendezvous(emu::warp(), 32, "__syncwarp", emu::lane(), emu::Slot{}, [](emu::Collective&) {}); }
inline float __shfl_xor_sync(unsigned mask, float v, int lane_mask) {
  if (mask != 0xffffffffu) emu::fail("partial shuffle mask");
  float out = 0;
  emu::Slot s;
  s.value = v;
  s.lane_mask = lane_mask;
  s.result = &out;
  emu::rendezvous(emu::warp(), 32, "__shfl_xor_sync", emu::lane(), s, [](emu::Collective& c) {
    for (int l = 0; l < 32; ++l) {
      if (c.slots[l].lane_mask != c.slots[0].lane_mask) emu::fail("shuffle lane masks differ across the warp");
      *c.slots[l].result = c.slots[l ^ c.slots[l].lane_mask].value;
    }
  });
  return out;
}

inline int __shfl_sync(unsigned mask, int v, int src_lane) {
  if (mask != 0xffffffffu) emu::fail("partial shuffle mask");
  if (src_lane < 0 || src_lane > 31) emu::fail("shuffle source lane out of range");
  int out = 0;
  emu::Slot s;
  s.ivalue = v;
  s.src_lane = src_lane & 31;
  s.iresult = &out;
  emu::rendezvous(emu::warp(), 32, "__shfl_sync", emu::lane(), s, [](emu::Collective& c) {
    for (int l = 0; l < 32; ++l) *c.slots[l].iresult = c.slots[c.slots[l].src_lane].ivalue;
  });
  return out;
}

// Shared-memory mbarriers: a phase completes when `count` arrivals are in;
// waiting on a parity passes once the phase of that parity has completed
// (a fresh barrier is in phase 0, so parity 1 passes at once).
// With expect_tx, the phase also waits for the announced bytes of bulk
// copies, which land at once (at issue) in the emulation.
inline void mbarrier_init(unsigned bar, unsigned count) {
  if (bar % 8) emu::fail("mbarrier not 8-byte aligned");
  emu::shared(bar, 8, "mbarrier.init");
  emu::mbarriers[bar] = emu::MBarrier{int(count), int(count), 0, 0};
}
inline void mbarrier_complete_if_done(emu::MBarrier* b) {
  if (b->pending == 0 && b->tx == 0) {
    b->pending = b->count;
    ++b->phase;
  }
}
inline void mbarrier_arrive(unsigned bar) {
  emu::MBarrier* b = emu::mbarrier(bar, "mbarrier.arrive");
  if (!b) return;
  if (b->pending == 0) return emu::fail("mbarrier.arrive past its count while bytes are pending");
  --b->pending;
  mbarrier_complete_if_done(b);
}
inline void mbarrier_arrive_expect_bytes(unsigned bar, unsigned bytes) {
  emu::MBarrier* b = emu::mbarrier(bar, "mbarrier.arrive.expect_tx");
  if (!b) return;
  b->tx += bytes;
  mbarrier_arrive(bar);
}
// `bytes` of an asynchronous copy landed: counted off the bytes barrier
// `bar` awaits (what: the copy, for the failure).
inline void mbarrier_complete_bytes(unsigned bar, long long bytes, const char* what) {
  emu::MBarrier* b = emu::mbarrier(bar, what);
  if (!b) return;
  b->tx -= bytes;
  if (b->tx < 0) return emu::fail(std::string(what) + " landed more bytes than the barrier expected");
  mbarrier_complete_if_done(b);
}
// cp.async.bulk global -> shared, completing `bytes` on `bar`.
inline void bulk_copy_to_shared(unsigned dst, const void* src, unsigned bytes, unsigned bar, unsigned long long) {
  const unsigned char* from = static_cast<const unsigned char*>(src);
  if (dst % 16 || bytes % 16 || reinterpret_cast<uintptr_t>(from) % 16) return emu::fail("bulk copy not 16-byte aligned");
  if (!emu::readableBytes(from, bytes)) return emu::fail("bulk copy source outside the kernel's buffers");
  std::memcpy(emu::shared(dst, int(bytes), "bulk copy destination"), from, bytes);
  mbarrier_complete_bytes(bar, bytes, "cp.async.bulk");
}

// cp.async.bulk.tensor.2d: the box at element (x, y) = (column, row) of the
// map's matrix into shared memory at `dst` with the 128-byte swizzle (16-byte
// chunk c of box row r at chunk c ^ (r % 8)), elements outside the matrix as
// zeros, the whole box's bytes completing on `bar` (as the TMA unit counts
// them). Lands at once, as bulk copies do here.
inline void tensor_copy_2d_to_shared(unsigned dst, const void* map, int x, int y, unsigned bar) {
  emu::EmulatedTensorMap m;
  std::memcpy(&m, map, sizeof m);
  if (m.magic != emu::kTensorMapMagic) return emu::fail("tensor copy through a map that is not a tensor map");
  if (dst % 1024) return emu::fail("tensor copy with the 128-byte swizzle to shared memory not 1024-byte aligned");
  if (m.box_columns * 2 != 128) return emu::fail("tensor copy box rows are not 128 bytes (the swizzle span)");
  if (x % 8) return emu::fail("tensor copy column not a multiple of 16 bytes");
  if (!emu::readableBytes(m.base, (m.rows - 1) * m.row_bytes + m.columns * 2))
    return emu::fail("tensor map over memory outside the kernel's buffers");
  const int bytes = m.box_rows * 128;
  unsigned char* to = emu::shared(dst, bytes, "tensor copy destination");
  for (int r = 0; r < m.box_rows; ++r)
    for (int c = 0; c < m.box_columns; ++c) {
      const long long row = (long long)y + r, col = (long long)x + c;
      uint16_t v = 0;
      if (row >= 0 && row < m.rows && col >= 0 && col < m.columns)
        std::memcpy(&v, m.base + row * m.row_bytes + col * 2, 2);
      const int chunk = (c * 2) / 16, within = (c * 2) % 16;
      std::memcpy(to + r * 128 + ((chunk ^ (r % 8)) << 4) + within, &v, 2);
    }
  mbarrier_complete_bytes(bar, bytes, "cp.async.bulk.tensor");
}

inline void named_barrier_sync(int id, int threads) { emu::namedBarrier(id, threads, true); }
inline void named_barrier_arrive(int id, int threads) { emu::namedBarrier(id, threads, false); }
inline void mbarrier_wait(unsigned bar, unsigned parity) {
  emu::MBarrier* b = emu::mbarrier(bar, "mbarrier.try_wait");
  while (b && emu::failure.empty() && (b->phase & 1) == parity) emu::yieldUntilChanged(b->phase, b->phase);
}
template <int kRegisters>
inline void setmaxnreg_dec() {}
template <int kRegisters>
inline void setmaxnreg_inc() {}

// A kernel's static __shared__ array of `bytes` (the emulation has no
// per-kernel static shared memory: it is the start of smem).
inline unsigned char* emulated_shared_memory(int bytes) {
  if (bytes > int(sizeof smem)) emu::fail("shared memory larger than the emulated SM's");
  emu::smem_limit = bytes;
  return smem;
}

inline unsigned smem_address(const void* p) { return unsigned(static_cast<const unsigned char*>(p) - smem); }
inline void cp_async_16(unsigned dst, const void* src, int bytes) {
  if (bytes != 0 && bytes != 16) emu::fail("cp.async with a partial source size");
  const emu::Copy c{dst, static_cast<const unsigned char*>(src), bytes};
  if (emu::eager_copies) emu::land(c);
  else emu::fibers[emu::current].open.push_back(c);
}
inline void cp_async_commit() {
  emu::Fiber& f = emu::fibers[emu::current];
  f.groups.push_back(std::move(f.open));
  f.open.clear();
}
template <int kPending>
inline void cp_async_wait() {
  emu::Fiber& f = emu::fibers[emu::current];
  while (int(f.groups.size()) > kPending) {
    for (const emu::Copy& c : f.groups.front()) emu::land(c);
    f.groups.erase(f.groups.begin());
  }
}
inline void ldsm_x4(unsigned addr, unsigned (&r)[4]) { emu::ldmatrix(addr, r, false); }
inline void ldsm_x4_trans(unsigned addr, unsigned (&r)[4]) { emu::ldmatrix(addr, r, true); }
inline void mma_bf16(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  emu::Slot s;
  std::memcpy(s.a, a, sizeof s.a);
  s.b0 = b0;
  s.b1 = b1;
  s.acc = c;
  emu::rendezvous(emu::warp(), 32, "mma", emu::lane(), s, [](emu::Collective& col) {
    float A[16][16], B[16][8];
    for (int l = 0; l < 32; ++l) {
      for (int i = 0; i < 8; ++i) A[emu::aRow(l, i)][emu::aCol(l, i)] = emu::half(col.slots[l].a[i / 2], i % 2);
      for (int i = 0; i < 4; ++i)
        B[emu::bRow(l, i)][l / 4] = emu::half(i < 2 ? col.slots[l].b0 : col.slots[l].b1, i % 2);
    }
    float D[32][4];
    for (int l = 0; l < 32; ++l)
      for (int i = 0; i < 4; ++i) {
        float sum = col.slots[l].acc[i];
        for (int k = 0; k < 16; ++k) sum += A[emu::cRow(l, i)][k] * B[k][emu::cCol(l, i)];
        D[l][i] = sum;
      }
    for (int l = 0; l < 32; ++l)
      for (int i = 0; i < 4; ++i) col.slots[l].acc[i] = D[l][i];
  });
}
inline unsigned pack_bf16x2(float lo, float hi) {
  return unsigned(kiln::gpu_test::toBf16(lo)) | unsigned(kiln::gpu_test::toBf16(hi)) << 16;
}
inline float exp2_approx(float x) { return std::exp2(x); }

// Blocks run one after another, so a block's global writes are visible to
// every later block and an atomic is a plain read-modify-write.
inline void __threadfence() {}
// One launch at a time: no programmatic dependent launch to wait on.
inline void wait_for_previous_kernel() {}
inline void allow_next_kernel() {}
inline float __ldcg(const float* p) { return *p; }
inline float4 __ldcg(const float4* p) { return *p; }
inline unsigned atomicAdd(unsigned* p, unsigned v) {
  const unsigned old = *p;
  *p = old + v;
  return old;
}
template <class T> T from_float(float x);
template <> inline bf16 from_float<bf16>(float x) { return bf16{kiln::gpu_test::toBf16(x)}; }
template <> inline float from_float<float>(float x) { return x; }

// common.cuh's element helpers and warp reduction (the GEMV kernels').
inline float to_float(float x) { return x; }
inline float to_float(bf16 x) { return kiln::gpu_test::fromBf16(x.bits); }
template <class T>
inline void load8(const T* p, float (&out)[8]) {
  for (int i = 0; i < 8; ++i) out[i] = to_float(p[i]);
}
template <class T>
inline void load8_nc(const T* p, float (&out)[8]) {
  load8(p, out);
}
template <class T>
inline void store8(T* p, const float (&in)[8]) {
  for (int i = 0; i < 8; ++i) p[i] = from_float<T>(in[i]);
}
template <class T>
inline float round_to(float x) {
  return to_float(from_float<T>(x));
}
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
// The host has one memory level: the L2 policies are tokens, the hinted load a plain one.
inline unsigned long long l2_policy_evict_first() { return 1; }
inline unsigned long long l2_policy_evict_normal() { return 0; }
template <class T>
inline void load8_stream(const T* p, float (&out)[8], unsigned long long) {
  load8(p, out);
}
// quant_blocks.cuh's raw loads.
inline uint4 load_u128_stream(const void* p, unsigned long long) {
  uint4 q;
  std::memcpy(&q, p, 16);
  return q;
}
inline unsigned load_u32_nc(const void* p) {
  unsigned q;
  std::memcpy(&q, p, 4);
  return q;
}
inline float warp_sum(float x) {
  for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
inline float silu(float x) { return x / (1.0f + std::exp(-x)); }

}  // namespace kiln::kernels

#define threadIdx (Dim3{unsigned(emu::current), 0, 0})
#define blockDim (Dim3{unsigned(emu::threads), 1, 1})

namespace emu {

inline void entry() {
  body();
  Fiber& f = fibers[current];
  if (!f.open.empty() || !f.groups.empty()) fail("a thread ended with cp.async copies never waited for");
  f.done = true;
}

// Runs one block: every fiber until all are done; a round where none can move is a deadlock.
inline void runBlock() {
  mbarriers.clear();
  for (NamedBarrier& b : named_barriers) b = NamedBarrier{};
  for (int t = 0; t < threads; ++t) {
    Fiber& f = fibers[t];
    f.done = false;
    f.wait_generation = nullptr;
    f.open.clear();
    f.groups.clear();
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = f.stack.data();
    f.context.uc_stack.ss_size = f.stack.size();
    f.context.uc_link = &scheduler;
    makecontext(&f.context, entry, 0);
  }
  std::vector<int> order(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t) order[size_t(t)] = t;
  for (;;) {
    bool alive = false, moved = false;
    if (shuffled_schedule) std::shuffle(order.begin(), order.end(), schedule_rng);
    for (int t : order) {
      Fiber& f = fibers[t];
      if (f.done) continue;
      alive = true;
      if (f.wait_generation && *f.wait_generation == f.wait_value) continue;
      f.wait_generation = nullptr;
      current = t;
      swapcontext(&scheduler, &f.context);
      moved = true;
    }
    if (!alive) return;
    if (!moved) {
      fail("deadlock: every live thread waits on a collective the others never reach");
      return;
    }
  }
}

// Runs `kernel` on every block of `grid` (x fastest) with `block_threads`
// threads each, shared memory NaN at every block's start, until the first
// failure; blockIdx is then the failing block.
inline void launch(Dim3 grid, int block_threads, std::function<void()> kernel) {
  failure.clear();
  bank_conflicts = 0;
  if (block_threads > kMaxThreads) return fail("more threads per block than the emulation has fibers");
  threads = block_threads;
  body = std::move(kernel);
  gridDim = grid;
  for (unsigned z = 0; z < grid.z && failure.empty(); ++z)
    for (unsigned y = 0; y < grid.y && failure.empty(); ++y)
      for (unsigned x = 0; x < grid.x && failure.empty(); ++x) {
        std::memset(kiln::kernels::smem, 0xff, sizeof kiln::kernels::smem);  // NaN in bf16 and f32: unlanded data shows
        blockIdx = {x, y, z};
        runBlock();
      }
}

}  // namespace emu
