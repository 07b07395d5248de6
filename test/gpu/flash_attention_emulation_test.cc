// flash_attention's kernel body run on the host, no GPU: each of a block's
// CUDA threads is a fiber (ucontext) on one OS thread, and the warp- and
// block-wide operations are rendezvous where the last arriving lane does the
// work for all: ldmatrix and mma.m16n8k16 from the PTX ISA's fragment tables,
// __shfl_xor_sync, __syncwarp, __syncthreads. cp.async copies land only at
// the issuing thread's cp.async.wait_group (or, in the eager mode, at once),
// shared memory starts as NaN, and every global read is bounds-checked, so a
// missing wait or barrier, a wrong gather or a wrong fragment shows up as a
// wrong or NaN output against the float64 reference of kernels_gpu_test.
// Also checks that each 8-row phase of every ldmatrix the kernel issues is
// free of shared-memory bank conflicts.
#include <gtest/gtest.h>
#include <ucontext.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "codegen/kernels/kernel_params.cuh"
#include "test/gpu/attention_reference.h"

// ------------------------------------------------------------ the emulated device

#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__
#define __align__(n)  // the emulated shared memory is aligned where it is defined

struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};
struct uint4 {
  unsigned x, y, z, w;
};
Dim3 blockIdx, gridDim;

namespace emu {

constexpr int kMaxThreads = 256, kStackBytes = 128 * 1024;

struct Copy {
  unsigned dst;
  const unsigned char* src;
  int bytes;
};

struct Fiber {
  ucontext_t context;
  std::vector<char> stack = std::vector<char>(kStackBytes);
  bool done = false;
  const uint64_t* wait_generation = nullptr;  // blocked while *wait_generation == wait_value
  uint64_t wait_value = 0;
  std::vector<Copy> open;                    // issued, not yet committed
  std::vector<std::vector<Copy>> groups;     // committed, oldest first
};

// One collective in progress: lanes fill their slot and the last one runs it.
struct Slot {
  unsigned addr = 0, a[4] = {}, b0 = 0, b1 = 0;
  unsigned* out = nullptr;
  float* acc = nullptr;
  float value = 0;
  int lane_mask = 0;
  float* result = nullptr;
};
struct Collective {
  int arrived = 0;
  const char* kind = nullptr;
  uint64_t generation = 0;
  Slot slots[kMaxThreads];
};

ucontext_t scheduler;
Fiber fibers[kMaxThreads];
Collective warp_collective[kMaxThreads / 32], block_collective;
int current = 0, threads = 128;  // the running thread, the block's size
bool eager_copies = false;
std::function<void()> body;
std::string failure;  // the first emulation error (the fiber keeps going on defaults)
int smem_limit = 0;
struct Range {
  const unsigned char* begin;
  size_t bytes;
};
std::vector<Range> readable;  // global memory the kernel may read
long long bank_conflicts = 0;

}  // namespace emu

namespace kiln::kernels {

struct bf16 {
  uint16_t bits;
};
inline float neg_inf() { return -INFINITY; }
inline int min(int a, int b) { return a < b ? a : b; }
alignas(128) unsigned char smem[228 * 1024];

}  // namespace kiln::kernels

namespace emu {

void fail(const std::string& what) {
  if (failure.empty()) failure = what;
}

unsigned char* shared(unsigned addr, int bytes) {
  if (int(addr) + bytes > smem_limit) {
    fail("shared access at " + std::to_string(addr) + " past the instance's " + std::to_string(smem_limit) + " bytes");
    return kiln::kernels::smem;
  }
  return kiln::kernels::smem + addr;
}

void land(const Copy& c) {
  unsigned char* dst = shared(c.dst, 16);
  if (c.dst % 16) fail("cp.async destination not 16-byte aligned");
  if (c.bytes == 0) {
    std::memset(dst, 0, 16);
    return;
  }
  bool ok = false;
  for (const Range& r : readable) ok |= c.src >= r.begin && c.src + 16 <= r.begin + r.bytes;
  if (!ok || reinterpret_cast<uintptr_t>(c.src) % 16) {
    fail("cp.async source outside the kernel's buffers or misaligned");
    return;
  }
  std::memcpy(dst, c.src, 16);
}

void yieldUntilChanged(const uint64_t& generation, uint64_t seen) {
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

int lane() { return current % 32; }
Collective& warp() { return warp_collective[current / 32]; }

// The PTX ISA's m16n8k16 fragment tables (g = lane / 4, t = lane % 4).
int aRow(int lane, int i) { return lane / 4 + ((i == 2 || i == 3 || i == 6 || i == 7) ? 8 : 0); }
int aCol(int lane, int i) { return 2 * (lane % 4) + (i & 1) + (i >= 4 ? 8 : 0); }
int bRow(int lane, int i) { return 2 * (lane % 4) + (i & 1) + (i >= 2 ? 8 : 0); }
int cRow(int lane, int i) { return lane / 4 + (i >= 2 ? 8 : 0); }
int cCol(int lane, int i) { return 2 * (lane % 4) + (i & 1); }

float bf16Value(uint16_t bits) { return kiln::gpu_test::fromBf16(bits); }
float half(unsigned reg, int i) { return bf16Value(uint16_t(i ? reg >> 16 : reg & 0xffff)); }

void ldmatrix(unsigned addr, unsigned (&r)[4], bool trans) {
  Slot s;
  s.addr = addr;
  s.out = r;
  rendezvous(warp(), 32, trans ? "ldmatrix.trans" : "ldmatrix", lane(), s, [trans](Collective& c) {
    for (int m = 0; m < 4; ++m) {
      std::set<unsigned> groups;
      for (int row = 0; row < 8; ++row) {
        if (c.slots[8 * m + row].addr % 16) fail("ldmatrix row address not 16-byte aligned");
        groups.insert(c.slots[8 * m + row].addr / 16 % 8);
      }
      if (groups.size() != 8) ++bank_conflicts;
    }
    for (int l = 0; l < 32; ++l)
      for (int m = 0; m < 4; ++m) {
        uint16_t e[2];
        for (int i = 0; i < 2; ++i) {
          const int row = trans ? 2 * (l % 4) + i : l / 4, col = trans ? l / 4 : 2 * (l % 4) + i;
          std::memcpy(&e[i], shared(c.slots[8 * m + row].addr + 2 * col, 2), 2);
        }
        c.slots[l].out[m] = unsigned(e[0]) | unsigned(e[1]) << 16;
      }
  });
}

}  // namespace emu

namespace kiln::kernels {

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

namespace flash {

inline unsigned smem_address(const void* p) {
  return unsigned(static_cast<const unsigned char*>(p) - kiln::kernels::smem);
}
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

}  // namespace flash
}  // namespace kiln::kernels

#define threadIdx (Dim3{unsigned(emu::current), 0, 0})
#define KILN_FLASH_ATTENTION_EMULATION 1
#include "codegen/kernels/flash_attention.cuh"
#undef threadIdx

namespace emu {

void entry() {
  body();
  Fiber& f = fibers[current];
  if (!f.open.empty() || !f.groups.empty()) fail("a thread ended with cp.async copies never waited for");
  f.done = true;
}

// Runs one block: every fiber until all are done; a round where none can move is a deadlock.
void runBlock() {
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
  for (;;) {
    bool alive = false, moved = false;
    for (int t = 0; t < threads; ++t) {
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

}  // namespace emu

// ------------------------------------------------------------ the test

namespace kiln::gpu_test {
namespace {

namespace kk = kiln::kernels;

template <int H_, int Hkv_, int D_, int Warps_, int BlockM_, int Page_ = 16>
struct Config {
  static constexpr int kHeads = H_, kKvHeads = Hkv_, kHeadDim = D_, kPageSize = Page_;
  static constexpr float kScale = D_ == 64 ? 0.125f : 0.0883883476f;
  static constexpr int kWarps = Warps_, kBlockM = BlockM_;
  static constexpr int kSmemBytes = kk::flash::smem_bytes(D_, BlockM_);
};

template <class C>
void runCase(const Batch& batch, bool eager, float q_scale, const std::string& what) {
  std::mt19937 rng(99);
  AttentionData a = makeAttention(rng, C::kHeads, C::kKvHeads, C::kHeadDim, batch, false, C::kPageSize);
  for (size_t i = 0; i < a.q.size(); ++i) {
    a.q[i] *= q_scale;
    a.qb[i] = toBf16(a.q[i]);
  }
  const int B = int(batch.q_len.size()), H = C::kHeads, D = C::kHeadDim;
  // The output with 64 guard elements on each side, all NaN.
  std::vector<uint16_t> out(size_t(a.N) * H * D + 128, 0x7fc0);
  kk::PagedAttentionParams p{a.qb.data(), a.kb.data(), a.vb.data(), a.block_tables.data(), a.query_start.data(),
                             a.kv_lens.data(), nullptr, out.data() + 64, nullptr, nullptr, a.N, B, a.max_blocks, 0, 1};
  emu::readable = {{reinterpret_cast<const unsigned char*>(a.qb.data()), a.qb.size() * 2},
                   {reinterpret_cast<const unsigned char*>(a.kb.data()), a.kb.size() * 2},
                   {reinterpret_cast<const unsigned char*>(a.vb.data()), a.vb.size() * 2}};
  emu::eager_copies = eager;
  emu::failure.clear();
  emu::bank_conflicts = 0;
  emu::smem_limit = C::kSmemBytes;
  emu::threads = 32 * C::kWarps;
  emu::body = [&p] { kk::flash_attention<C>(p); };
  const int max_q_len = *std::max_element(batch.q_len.begin(), batch.q_len.end());
  gridDim = {unsigned(H), unsigned((max_q_len + C::kBlockM - 1) / C::kBlockM), unsigned(B)};
  for (unsigned z = 0; z < gridDim.z && emu::failure.empty(); ++z)
    for (unsigned y = 0; y < gridDim.y && emu::failure.empty(); ++y)
      for (unsigned x = 0; x < gridDim.x && emu::failure.empty(); ++x) {
        std::memset(kk::smem, 0xff, sizeof kk::smem);  // NaN in bf16: unlanded data shows
        blockIdx = {x, y, z};
        emu::runBlock();
      }
  ASSERT_TRUE(emu::failure.empty()) << what << ": " << emu::failure << " (block " << blockIdx.x << ", " << blockIdx.y
                                    << ", " << blockIdx.z << ")";
  EXPECT_EQ(emu::bank_conflicts, 0) << what << ": ldmatrix phases with bank conflicts";
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ(out[i], 0x7fc0) << what << ": write before the output";
    EXPECT_EQ(out[out.size() - 1 - i], 0x7fc0) << what << ": write past the output";
  }
  std::vector<uint16_t> body_bits(out.begin() + 64, out.end() - 64);
  expectClose(bf16ToFloat(body_bits), attentionReference(a, double(C::kScale), false), 4e-3, 1.0 / 64, what);
}

// Fresh prompts and chunks after cached prefixes off the page and tile
// boundaries, one-token sequences, an aligned prefix, and query tiles whose
// last key opens a new key tile (65 keys, 129 keys).
const Batch kBatch{{70, 33, 1, 64, 100, 65, 1}, {70, 33 + 150, 40, 128, 100 + 17, 65, 129}};

TEST(FlashAttentionEmulation, Hd64Gqa2) { runCase<Config<2, 1, 64, 4, 64>>(kBatch, false, 1.0f, "hd64 2/1 4x64"); }
TEST(FlashAttentionEmulation, Hd64Gqa2EagerCopies) {
  runCase<Config<2, 1, 64, 4, 64>>(kBatch, true, 1.0f, "hd64 2/1 4x64, eager cp.async");
}
TEST(FlashAttentionEmulation, Hd64TwoMTilesPeakedSoftmax) {
  runCase<Config<4, 2, 64, 4, 128>>(kBatch, false, 8.0f, "hd64 4/2 4x128, q x8");
}
TEST(FlashAttentionEmulation, Hd64EightWarps) { runCase<Config<2, 1, 64, 8, 128>>(kBatch, true, 1.0f, "hd64 2/1 8x128, eager"); }
TEST(FlashAttentionEmulation, Hd128Gqa3) { runCase<Config<3, 1, 128, 4, 64>>(kBatch, false, 1.0f, "hd128 3/1 4x64"); }
TEST(FlashAttentionEmulation, Hd128PeakedSoftmax) {
  runCase<Config<2, 1, 128, 4, 64>>(kBatch, false, 8.0f, "hd128 2/1 4x64, q x8");
}
TEST(FlashAttentionEmulation, OtherPageSizes) {
  runCase<Config<2, 1, 64, 4, 64, 64>>(kBatch, false, 1.0f, "hd64 2/1 4x64, page 64");
  runCase<Config<2, 1, 64, 4, 64, 32>>(kBatch, false, 1.0f, "hd64 2/1 4x64, page 32");
  runCase<Config<2, 1, 64, 4, 64, 8>>(kBatch, false, 1.0f, "hd64 2/1 4x64, page 8");
}
TEST(FlashAttentionEmulation, Hd128EightWarps) {
  runCase<Config<2, 1, 128, 8, 128>>(kBatch, false, 8.0f, "hd128 2/1 8x128, q x8");
}

}  // namespace
}  // namespace kiln::gpu_test
