// decode_attention's kernel body run on the host, no GPU: each of a block's
// 128 CUDA threads is a fiber (ucontext) on one OS thread, and
// __shfl_xor_sync and __syncthreads are rendezvous where the last arriving
// lane does the work for all (as in flash_attention_emulation_test.cc).
// cp.async copies land only at the issuing thread's cp.async.wait_group (or,
// in the eager mode, at once), shared memory starts as NaN for every block,
// every cp.async source is bounds-checked and zero-byte copies write zeros,
// so a missing wait or barrier, a slot read by the wrong thread or a wrong
// gather shows up as a wrong or NaN output. The partials go through the same
// merge as attention_combine and are compared with the float64 reference of
// kernels_gpu_test; untouched partial rows (never expected here) would be NaN.
#include <gtest/gtest.h>
#include <ucontext.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "codegen/kernels/kernel_params.cuh"
#include "test/gpu/attention_reference.h"

// ------------------------------------------------------------ the emulated device

#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__
#define __align__(n)

struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};
struct uint4 {
  unsigned x, y, z, w;
};
struct uint2 {
  unsigned x, y;
};
Dim3 blockIdx;

namespace emu {

constexpr int kThreads = 128, kStackBytes = 128 * 1024;

struct Copy {
  unsigned char* dst;
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

struct Slot {
  float value = 0;
  int lane_mask = 0;
  float* result = nullptr;
  const unsigned char* addr = nullptr;  // ldmatrix row address
  unsigned* out = nullptr;              // ldmatrix registers
  unsigned a[4] = {}, b0 = 0, b1 = 0;   // mma operands
  float* acc = nullptr;
};
struct Collective {
  int arrived = 0;
  const char* kind = nullptr;
  uint64_t generation = 0;
  Slot slots[kThreads];
};

ucontext_t scheduler;
Fiber fibers[kThreads];
Collective warp_collective[kThreads / 32], block_collective;
int current = 0;
bool eager_copies = false;
std::function<void()> body;
std::string failure;  // the first emulation error (the fiber keeps going on defaults)
alignas(128) unsigned char smem[228 * 1024];
int smem_bytes = 0;  // what the instance asked for
struct Range {
  const unsigned char* begin;
  size_t bytes;
};
std::vector<Range> readable;  // global memory cp.async may read
long long bank_conflicts = 0;  // ldmatrix phases whose 8 rows share a bank group

void fail(const std::string& what) {
  if (failure.empty()) failure = what;
}

void land(const Copy& c) {
  if (c.dst < smem || c.dst + 16 > smem + smem_bytes || (c.dst - smem) % 16) {
    fail("cp.async destination outside the instance's shared memory or misaligned");
    return;
  }
  if (c.bytes == 0) {
    std::memset(c.dst, 0, 16);
    return;
  }
  bool ok = false;
  for (const Range& r : readable) ok |= c.src >= r.begin && c.src + 16 <= r.begin + r.bytes;
  if (!ok || reinterpret_cast<uintptr_t>(c.src) % 16) {
    fail("cp.async source outside the pools or misaligned");
    return;
  }
  std::memcpy(c.dst, c.src, 16);
}

void yieldUntilChanged(const uint64_t& generation, uint64_t seen) {
  Fiber& f = fibers[current];
  f.wait_generation = &generation;
  f.wait_value = seen;
  swapcontext(&f.context, &scheduler);
}

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

// The PTX ISA's m16n8k16 fragment tables (g = lane / 4, t = lane % 4; element i of 8 halves).
int aRow(int lane, int i) { return lane / 4 + ((i == 2 || i == 3 || i == 6 || i == 7) ? 8 : 0); }
int aCol(int lane, int i) { return 2 * (lane % 4) + (i & 1) + (i >= 4 ? 8 : 0); }
int bRow(int lane, int i) { return 2 * (lane % 4) + (i & 1) + (i >= 2 ? 8 : 0); }
int cRow(int lane, int i) { return lane / 4 + (i >= 2 ? 8 : 0); }
int cCol(int lane, int i) { return 2 * (lane % 4) + (i & 1); }
float half(unsigned reg, int i) { return kiln::gpu_test::fromBf16(uint16_t(i ? reg >> 16 : reg & 0xffff)); }

const unsigned char* sharedRow(const unsigned char* p) {
  if (p < smem || p + 16 > smem + smem_bytes || (p - smem) % 16) {
    fail("ldmatrix row address outside the instance's shared memory or misaligned");
    return smem;
  }
  return p;
}

// ldmatrix.sync.aligned.m8n8.x4{.trans}.b16: lanes 8m..8m+7 give the row
// addresses of matrix m; lane l receives in register m the elements (row l/4,
// columns 2(l%4), 2(l%4)+1), or with .trans (rows 2(l%4), 2(l%4)+1, column l/4).
void ldmatrix(const void* addr, unsigned (&r)[4], bool trans) {
  Slot s;
  s.addr = static_cast<const unsigned char*>(addr);
  s.out = r;
  rendezvous(warp_collective[current / 32], 32, trans ? "ldmatrix.trans" : "ldmatrix", current % 32, s,
             [trans](Collective& c) {
               for (int m = 0; m < 4; ++m) {
                 bool groups[8] = {};
                 int distinct = 0;
                 for (int row = 0; row < 8; ++row) {
                   const int group = int(sharedRow(c.slots[8 * m + row].addr) - smem) / 16 % 8;
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
                     std::memcpy(&e[i], sharedRow(c.slots[8 * m + row].addr) + 2 * col, 2);
                   }
                   c.slots[l].out[m] = unsigned(e[0]) | unsigned(e[1]) << 16;
                 }
             });
}

}  // namespace emu

namespace kiln::kernels {

struct bf16 {
  uint16_t bits;
};
inline float neg_inf() { return -INFINITY; }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline void __syncthreads() {
  emu::rendezvous(emu::block_collective, emu::kThreads, "__syncthreads", emu::current, emu::Slot{},
                  [](emu::Collective&) {});
}
inline void __syncwarp() {
  emu::rendezvous(emu::warp_collective[emu::current / 32], 32, "__syncwarp", emu::current % 32, emu::Slot{},
                  [](emu::Collective&) {});
}
inline float __shfl_xor_sync(unsigned mask, float v, int lane_mask) {
  if (mask != 0xffffffffu) emu::fail("partial shuffle mask");
  float out = 0;
  emu::Slot s;
  s.value = v;
  s.lane_mask = lane_mask;
  s.result = &out;
  emu::rendezvous(emu::warp_collective[emu::current / 32], 32, "__shfl_xor_sync", emu::current % 32, s,
                  [](emu::Collective& c) {
                    for (int l = 0; l < 32; ++l) {
                      if (c.slots[l].lane_mask != c.slots[0].lane_mask) emu::fail("shuffle lane masks differ");
                      *c.slots[l].result = c.slots[l ^ c.slots[l].lane_mask].value;
                    }
                  });
  return out;
}

namespace decode {

inline unsigned char* emulated_shared_memory(int bytes) {
  if (bytes > int(sizeof emu::smem)) emu::fail("shared memory larger than the emulated SM's");
  emu::smem_bytes = bytes;
  return emu::smem;
}
inline void cp_async_16(void* dst, const void* src, int bytes) {
  if (bytes != 0 && bytes != 16) emu::fail("cp.async with a partial source size");
  const emu::Copy c{static_cast<unsigned char*>(dst), static_cast<const unsigned char*>(src), bytes};
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
inline float exp2_approx(float x) { return std::exp2(x); }
inline void ldsm_x4(const void* p, unsigned (&r)[4]) { emu::ldmatrix(p, r, false); }
inline void ldsm_x4_trans(const void* p, unsigned (&r)[4]) { emu::ldmatrix(p, r, true); }
inline void mma_bf16(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  emu::Slot s;
  std::memcpy(s.a, a, sizeof s.a);
  s.b0 = b0;
  s.b1 = b1;
  s.acc = c;
  emu::rendezvous(emu::warp_collective[emu::current / 32], 32, "mma", emu::current % 32, s, [](emu::Collective& col) {
    float A[16][16], B[16][8];
    for (int l = 0; l < 32; ++l) {
      for (int i = 0; i < 8; ++i) A[emu::aRow(l, i)][emu::aCol(l, i)] = emu::half(col.slots[l].a[i / 2], i % 2);
      for (int i = 0; i < 4; ++i)
        B[emu::bRow(l, i)][l / 4] = emu::half(i < 2 ? col.slots[l].b0 : col.slots[l].b1, i % 2);
    }
    float Dm[32][4];
    for (int l = 0; l < 32; ++l)
      for (int i = 0; i < 4; ++i) {
        float sum = col.slots[l].acc[i];
        for (int k = 0; k < 16; ++k) sum += A[emu::cRow(l, i)][k] * B[k][emu::cCol(l, i)];
        Dm[l][i] = sum;
      }
    for (int l = 0; l < 32; ++l)
      for (int i = 0; i < 4; ++i) col.slots[l].acc[i] = Dm[l][i];
  });
}
inline unsigned pack_bf16x2(float lo, float hi) {
  return unsigned(kiln::gpu_test::toBf16(lo)) | unsigned(kiln::gpu_test::toBf16(hi)) << 16;
}

}  // namespace decode
}  // namespace kiln::kernels

#define threadIdx (Dim3{unsigned(emu::current), 0, 0})
#define KILN_DECODE_ATTENTION_EMULATION 1
#include "codegen/kernels/decode_attention.cuh"
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
  for (int t = 0; t < kThreads; ++t) {
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
    for (int t = 0; t < kThreads; ++t) {
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

template <int H_, int Hkv_, int D_, class Kv_ = kk::bf16, int Chunks_ = kk::decode::default_chunks(H_ / Hkv_),
          int Keys_ = 4 / Chunks_, int Stages_ = kk::decode::kDefaultStages, int Page_ = 16>
struct Config {
  using Kv = Kv_;
  static constexpr int kHeads = H_, kKvHeads = Hkv_, kHeadDim = D_, kPageSize = Page_;
  static constexpr float kScale = D_ == 64 ? 0.125f : 0.0883883476f;
  static constexpr int kChunks = Chunks_, kKeys = Keys_, kStages = Stages_;
};

template <int H_, int Hkv_, int D_, int Stages_ = kk::decode::kMmaDefaultStages, int Page_ = 16>
struct MmaConfig {
  static constexpr bool kMma = true;
  static constexpr int kHeads = H_, kKvHeads = Hkv_, kHeadDim = D_, kPageSize = Page_, kStages = Stages_;
  static constexpr float kScale = D_ == 64 ? 0.125f : 0.0883883476f;
  static constexpr int kSmemBytes = kk::decode::mma_smem_bytes(D_, Stages_);
};
template <class C, class = void>
struct IsMma : std::false_type {};
template <class C>
struct IsMma<C, std::void_t<decltype(C::kMma)>> : std::true_type {};

// attention_combine's merge (paged_attention.cuh) on the host, in float.
std::vector<float> combine(const std::vector<float>& po, const std::vector<float>& plse, int rows, int splits, int D) {
  std::vector<float> out(size_t(rows) * D);
  for (int row = 0; row < rows; ++row) {
    const float* lse = &plse[size_t(row) * splits];
    float m = -INFINITY;
    for (int z = 0; z < splits; ++z) m = std::fmax(m, lse[z]);
    for (int d = 0; d < D; ++d) {
      float num = 0, den = 0;
      if (m != -INFINITY)
        for (int z = 0; z < splits; ++z) {
          if (lse[z] == -INFINITY) continue;
          const float w = std::exp(lse[z] - m);
          num += w * po[(size_t(row) * splits + z) * D + d];
          den += w;
        }
      out[size_t(row) * D + d] = den > 0 ? num / den : 0.0f;
    }
  }
  return out;
}

template <class C>
void runCase(const Batch& batch, int splits, bool eager, float q_scale, const std::string& what) {
  std::mt19937 rng(7);
  AttentionData a = makeAttention(rng, C::kHeads, C::kKvHeads, C::kHeadDim, batch, false, C::kPageSize);
  for (size_t i = 0; i < a.q.size(); ++i) {  // x8 is exact in bf16
    a.q[i] *= q_scale;
    a.qb[i] = toBf16(a.q[i]);
  }
  const int B = int(batch.q_len.size()), H = C::kHeads, D = C::kHeadDim;
  constexpr bool kMma = IsMma<C>::value;
  constexpr bool kF32 = [] {
    if constexpr (kMma) return false;
    else return sizeof(typename C::Kv) == 4;
  }();
  const void* k_pool = kF32 ? static_cast<const void*>(a.kpool.data()) : a.kb.data();
  const void* v_pool = kF32 ? static_cast<const void*>(a.vpool.data()) : a.vb.data();
  const size_t pool_bytes = a.kb.size() * (kF32 ? 4 : 2);
  // Partials with 64 guard elements on each side, all NaN.
  std::vector<float> po(size_t(a.N) * H * splits * D + 128, NAN), plse(size_t(a.N) * H * splits + 128, NAN);
  kk::PagedAttentionParams p{a.qb.data(), k_pool, v_pool, a.block_tables.data(), a.query_start.data(),
                             a.kv_lens.data(), nullptr, nullptr, po.data() + 64, plse.data() + 64, a.N, B,
                             a.max_blocks, 0, splits};
  emu::readable = {{static_cast<const unsigned char*>(k_pool), pool_bytes},
                   {static_cast<const unsigned char*>(v_pool), pool_bytes}};
  emu::eager_copies = eager;
  emu::failure.clear();
  emu::bank_conflicts = 0;
  emu::body = [&p] {
    if constexpr (kMma) kk::decode_attention_mma<C>(p);
    else kk::decode_attention<C>(p);
  };
  for (unsigned z = 0; z < unsigned(splits) && emu::failure.empty(); ++z)
    for (unsigned y = 0; y < unsigned(C::kKvHeads) && emu::failure.empty(); ++y)
      for (unsigned x = 0; x < unsigned(a.N) && emu::failure.empty(); ++x) {
        std::memset(emu::smem, 0xff, sizeof emu::smem);  // NaN: unlanded data shows
        blockIdx = {x, y, z};
        emu::runBlock();
      }
  ASSERT_TRUE(emu::failure.empty()) << what << ": " << emu::failure << " (block " << blockIdx.x << ", "
                                    << blockIdx.y << ", " << blockIdx.z << ")";
  EXPECT_EQ(emu::bank_conflicts, 0) << what << ": ldmatrix phases with bank conflicts";
  for (int i = 0; i < 64; ++i) {
    EXPECT_TRUE(std::isnan(po[i]) && std::isnan(po[po.size() - 1 - i])) << what << ": write outside partial_out";
    EXPECT_TRUE(std::isnan(plse[i]) && std::isnan(plse[plse.size() - 1 - i])) << what << ": write outside partial_lse";
  }
  std::vector<float> body_out(po.begin() + 64, po.end() - 64), body_lse(plse.begin() + 64, plse.end() - 64);
  size_t unwritten = 0;
  for (float v : body_out) unwritten += std::isnan(v);
  for (float v : body_lse) unwritten += std::isnan(v);
  EXPECT_EQ(unwritten, 0u) << what << ": partials left unwritten";
  expectClose(combine(body_out, body_lse, a.N * H, splits, D), attentionReference(a, double(C::kScale), false), 4e-3,
              1.0 / 64, what);
}

// Decode batches over contexts on and off the page and tile boundaries (1,
// 15, 16, 17, a few tiles, a thousand keys) and a prefill chunk after a
// cached prefix (causal q_len > 1), behind a shuffled block table.
const Batch kDecode{{1, 1, 1, 1, 1, 1}, {1, 15, 16, 17, 100, 1000}};
const Batch kMixed{{1, 5, 1, 3}, {300, 40, 1, 3}};

TEST(DecodeAttentionEmulation, Llama3GroupHd128) {
  using C = Config<4, 1, 128>;  // 2 chunks per lane, 2 keys per stream, 3 stages
  for (int splits : {1, 7, 32}) runCase<C>(kDecode, splits, false, 1.0f, "hd128 4/1 splits " + std::to_string(splits));
  runCase<C>(kMixed, 4, false, 1.0f, "hd128 4/1 causal q_len > 1, splits 4");
  runCase<C>(kDecode, 7, true, 8.0f, "hd128 4/1 splits 7, eager cp.async, q x8");
}
TEST(DecodeAttentionEmulation, SmolLm2GroupHd64) {
  using C = Config<6, 2, 64>;  // group 3
  for (int splits : {1, 7, 32}) runCase<C>(kDecode, splits, false, 1.0f, "hd64 6/2 splits " + std::to_string(splits));
  runCase<C>(kMixed, 3, false, 8.0f, "hd64 6/2 causal q_len > 1, splits 3, q x8");
}
TEST(DecodeAttentionEmulation, OneChunkPerLane) {
  runCase<Config<4, 1, 128, kk::bf16, 1, 4>>(kDecode, 7, false, 1.0f, "hd128 4/1 chunks 1 keys 4");
  runCase<Config<2, 1, 64, kk::bf16, 1, 1, 2>>(kDecode, 5, false, 8.0f, "hd64 2/1 chunks 1 keys 1 stages 2, q x8");
}
TEST(DecodeAttentionEmulation, LargeGroupsSplitTheHeads) {
  runCase<Config<16, 1, 64>>(kDecode, 3, false, 1.0f, "hd64 16/1 (two head halves)");
  runCase<Config<9, 1, 128>>(kMixed, 2, false, 1.0f, "hd128 9/1 (halves of 5 and 4 heads)");
  runCase<Config<8, 1, 128>>(kMixed, 2, false, 8.0f, "hd128 8/1, q x8");
}
TEST(DecodeAttentionEmulation, F32PoolsAndPageSizes) {
  runCase<Config<4, 2, 128, float>>(kDecode, 7, false, 1.0f, "hd128 f32 pool");
  runCase<Config<4, 2, 64, float>>(kMixed, 2, false, 1.0f, "hd64 f32 pool");
  runCase<Config<4, 1, 128, kk::bf16, 2, 2, 3, 8>>(kDecode, 7, false, 1.0f, "hd128 page 8");
  runCase<Config<4, 1, 64, kk::bf16, 1, 4, 3, 32>>(kDecode, 7, false, 1.0f, "hd64 page 32 chunks 1 keys 4");
}

TEST(DecodeAttentionEmulation, TensorCoresLlama3Group) {
  using C = MmaConfig<4, 1, 128>;
  for (int splits : {1, 7, 32})
    runCase<C>(kDecode, splits, false, 1.0f, "mma hd128 4/1 splits " + std::to_string(splits));
  runCase<C>(kMixed, 4, false, 1.0f, "mma hd128 4/1 causal q_len > 1, splits 4");
  runCase<C>(kDecode, 7, true, 8.0f, "mma hd128 4/1 splits 7, eager cp.async, q x8");
}
TEST(DecodeAttentionEmulation, TensorCoresOtherShapes) {
  runCase<MmaConfig<6, 2, 64>>(kDecode, 7, false, 1.0f, "mma hd64 6/2 splits 7");
  runCase<MmaConfig<6, 2, 64>>(kMixed, 3, false, 8.0f, "mma hd64 6/2 causal q_len > 1, q x8");
  runCase<MmaConfig<16, 1, 128>>(kMixed, 2, false, 1.0f, "mma hd128 16/1 (all 16 rows)");
  runCase<MmaConfig<9, 1, 64, 2>>(kDecode, 5, false, 8.0f, "mma hd64 9/1 stages 2, q x8");
  runCase<MmaConfig<1, 1, 128, 4, 32>>(kDecode, 3, false, 1.0f, "mma hd128 1/1 stages 4 page 32");
}

}  // namespace
}  // namespace kiln::gpu_test
