#include "test/gpu/decode_floors.h"

#include <fmt/format.h>

#include <numeric>
#include <random>

#include "codegen/kernels/kernel_params.cuh"
#include "runtime/cuda/kernel_test_cases.h"

namespace kiln::gpu_test {
namespace {

namespace kk = kiln::kernels;
using nlohmann::json;

constexpr int kKeys = 8192, kPage = 16;

// The read floor's kernel. A block serves one (kv head, key range) as
// decode_attention's splits do, with 512 threads each keeping 8 K and 8 V
// 16-byte loads in flight (128 KiB a block: twice decode_attention's ring
// at one block per SM); its range's page numbers come into shared memory
// first, in one round trip. The loads are xor-folded into a value no
// compiler can drop. With merge set, every block then writes a partial of
// group x head_dim floats, fences, counts itself in, and the last of a kv
// head's blocks sums its splits' partials (all loads in flight at once).
constexpr const char* kReadFloorSource = R"(
struct KvReadFloorParams {
  const uint4* k;
  const uint4* v;
  const int* table;
  float* partial;   // [kv_heads][splits][group * head_dim]
  float* out;       // [kv_heads][group * head_dim]
  unsigned* arrivals;
  int keys, splits, kv_heads, row_chunks, group, head_dim, read_before_wait, merge;
};

constexpr int kThreads = 512, kInFlight = 8, kPage = 16, kMaxPages = 64;

extern "C" __global__ void __launch_bounds__(kThreads) kv_read_floor(KvReadFloorParams p) {
  __shared__ int pages[kMaxPages];
  __shared__ unsigned last;
  const int kvh = blockIdx.x, split = blockIdx.y, tid = threadIdx.x;
  asm volatile("griddepcontrol.launch_dependents;" :::);
  if (!p.read_before_wait) asm volatile("griddepcontrol.wait;" ::: "memory");
  const int per = p.keys / p.splits, k0 = split * per;
  for (int i = tid; i < per / kPage; i += kThreads) pages[i] = p.table[k0 / kPage + i];
  __syncthreads();
  const int rows_per_pass = kThreads / p.row_chunks, c = tid % p.row_chunks, r0 = tid / p.row_chunks;
  unsigned fold = 0;
  for (int base = 0; base < per; base += rows_per_pass * kInFlight) {
    uint4 a[kInFlight], b[kInFlight];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const int row = base + r0 + u * rows_per_pass;
      if (row < per) {
        const long long slot = (long long)pages[row / kPage] * kPage + row % kPage;
        const long long at = (slot * p.kv_heads + kvh) * p.row_chunks + c;
        a[u] = __ldcs(p.k + at);
        b[u] = __ldcs(p.v + at);
      } else {
        a[u] = b[u] = make_uint4(0u, 0u, 0u, 0u);
      }
    }
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) fold ^= a[u].x ^ a[u].y ^ a[u].z ^ a[u].w ^ b[u].x ^ b[u].y ^ b[u].z ^ b[u].w;
  }
  if (p.read_before_wait) asm volatile("griddepcontrol.wait;" ::: "memory");
  const int width = p.group * p.head_dim;
  const float value = __uint_as_float(fold & 0x007fffffu);  // a denormal: any bits are a finite float
  float* const mine = p.partial + ((long long)kvh * p.splits + split) * width;
  if (!p.merge) {
    if (tid < width) mine[tid] = value;
    return;
  }
  for (int i = tid; i < width; i += kThreads) mine[i] = value;
  __threadfence();
  __syncthreads();
  if (tid == 0) last = atomicAdd(p.arrivals + kvh, 1u) == unsigned(p.splits - 1);
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int i = tid; i < width; i += kThreads) {
    float sum = 0.0f;
    for (int z = 0; z < p.splits; ++z) sum += __ldcg(p.partial + ((long long)kvh * p.splits + z) * width + i);
    p.out[kvh * width + i] = sum;
  }
  if (tid == 0) p.arrivals[kvh] = 0u;
}
)";

struct KvReadFloorParams {
  const void* k;
  const void* v;
  const int* table;
  float* partial;
  float* out;
  unsigned* arrivals;
  int keys, splits, kv_heads, row_chunks, group, head_dim, read_before_wait, merge;
};

// decode_attention's grid at batch 1 with no token to serve, every block
// waiting on the launch before (as the real one does) and exiting. What 0.8
// of HBM at 8k keys leaves for the real work is 0.8's time budget minus this.
Result<std::vector<Record>> launchFloor(int reps, int H, int Hkv, int D, double hbm_gbps) {
  json params = cuda::testing::attentionParams(H, Hkv, D, false);
  auto k = compile("decode_attention", params);
  if (!k) return k.error();
  auto dynamic_smem = optIntoDynamicSmem(*k);
  if (!dynamic_smem) return dynamic_smem.error();
  const int smem = *dynamic_smem;
  const double budget_us = 2.0 * kKeys * Hkv * D * 2 / (0.8 * hbm_gbps * 1e9) * 1e6;
  std::vector<Record> records;
  for (int splits : {16, 32}) {
    kk::PagedAttentionParams p{};
    p.num_tokens = 0;  // every block exits after the wait
    p.num_seqs = 1;
    p.num_splits = splits;
    double us[2];
    for (int programmatic = 0; programmatic < 2; ++programmatic) {
      auto ms = timeMedian(reps, [&](int) {
        return std::vector<Launch>{{k->function, {1u, unsigned(Hkv), unsigned(splits)},
                                    unsigned(k->instance.launch.block_threads), unsigned(smem), &p, programmatic == 1}};
      });
      if (!ms) return ms.error();
      us[programmatic] = *ms * 1e3;
    }
    Record r;
    r.line = fmt::format("decode_attention floor (no token: launch, wait, exit) B=1 H={} Hkv={} D={} splits={}: "
                         "standalone {:.1f} us, programmatic {:.1f} us; 0.8 of HBM at {} keys is {:.1f} us in all, "
                         "so {:.1f} / {:.1f} us for the work, where streaming the K+V alone takes {:.1f} us",
                         H, Hkv, D, splits, us[0], us[1], kKeys, budget_us, budget_us - us[0], budget_us - us[1],
                         budget_us * 0.8);
    r.fields = {{"name", "decode_attention_floor"}, {"splits", splits}, {"us", us[0]}, {"programmatic_us", us[1]},
                {"budget_us", budget_us}};
    records.push_back(r);
  }
  return records;
}

// kv_read_floor over several copies of one sequence's pools (together 3x
// the L2, as decode_attention's timing), pages shuffled as there.
Result<std::vector<Record>> readFloor(int reps, int H, int Hkv, int D, double hbm_gbps) {
  const cuda::CudaDriver* d = (*Gpu::get())->d;
  cuda::CompileOptions options;
  auto compiled = cuda::compileKernel("kv_read_floor", kReadFloorSource, options);
  if (!compiled) return compiled.error();
  CUmodule module = nullptr;
  CUfunction fn = nullptr;
  KILN_RETURN_IF_ERROR(d->check(d->cuModuleLoadData(&module, compiled->cubin.data()), "cuModuleLoadData"));
  KILN_RETURN_IF_ERROR(d->check(d->cuModuleGetFunction(&fn, module, "kv_read_floor"), "cuModuleGetFunction"));

  const int pages = kKeys / kPage, group = H / Hkv;
  const size_t pool_bytes = size_t(kKeys) * Hkv * D * 2;
  const double kv_bytes = 2.0 * pool_bytes;
  const int copies = int(std::ceil(150e6 / kv_bytes));
  std::mt19937 rng(11);
  std::vector<int> table(pages);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  auto dtable = DeviceBuffer::from(table);
  std::vector<DeviceBuffer> pools;
  std::vector<uint16_t> fill(pool_bytes / 2);
  for (int c = 0; c < 2 * copies; ++c) {
    std::iota(fill.begin(), fill.end(), uint16_t(c * 7919));
    pools.push_back(DeviceBuffer::from(fill));
  }
  // 16 splits: 128 blocks of 512 threads, one per SM in a single wave (at
  // 32, two blocks' registers do not fit an SM, so they run in two waves).
  constexpr int kSplits = 16;
  static_assert(kKeys / kSplits / kPage <= 64, "a block's pages fit the kernel's list (kMaxPages)");
  DeviceBuffer partial(size_t(Hkv) * kSplits * group * D * 4), out(size_t(Hkv) * group * D * 4);
  auto arrivals = DeviceBuffer::from(std::vector<unsigned>(Hkv, 0u));

  std::vector<Record> records;
  auto fraction = [&](double us) { return kv_bytes / (us * 1e-6) / 1e9 / hbm_gbps; };
  for (int merge = 0; merge < 2; ++merge) {
    double us[2];
    for (int programmatic = 0; programmatic < 2; ++programmatic) {
      std::vector<KvReadFloorParams> p;
      for (int c = 0; c < copies; ++c)
        p.push_back({pools[2 * c].get(), pools[2 * c + 1].get(), dtable.as<int>(), partial.as<float>(),
                     out.as<float>(), arrivals.as<unsigned>(), kKeys, kSplits, Hkv, D * 2 / 16, group, D,
                     programmatic, merge});
      auto ms = timeMedian(reps, [&](int i) {
        return std::vector<Launch>{
            {fn, {unsigned(Hkv), unsigned(kSplits), 1u}, 512u, 0u, &p[size_t(i) % p.size()], programmatic == 1}};
      });
      if (!ms) return ms.error();
      us[programmatic] = *ms * 1e3;
    }
    const char* what = merge ? "read + split merge" : "read only";
    Record r;
    r.line = fmt::format("kv_read_floor ({}) B=1 ctx={} Hkv={} D={} splits={}: standalone {:.1f} us, {:.2f} of HBM; "
                         "programmatic, reading before the wait {:.1f} us, {:.2f} of HBM",
                         what, kKeys, Hkv, D, kSplits, us[0], fraction(us[0]), us[1], fraction(us[1]));
    r.fields = {{"name", "kv_read_floor"}, {"merge", merge == 1}, {"splits", kSplits}, {"us", us[0]},
                {"hbm_fraction", fraction(us[0])}, {"programmatic_us", us[1]},
                {"programmatic_hbm_fraction", fraction(us[1])}};
    records.push_back(r);
  }
  d->cuModuleUnload(module);
  return records;
}

}  // namespace

Result<std::vector<Record>> decodeFloors(int reps, int H, int Hkv, int D, double hbm_gbps) {
  auto launch = launchFloor(reps, H, Hkv, D, hbm_gbps);
  if (!launch) return launch.error();
  auto read = readFloor(reps, H, Hkv, D, hbm_gbps);
  if (!read) return read.error();
  std::vector<Record> all = launch.take();
  for (Record& r : *read) all.push_back(std::move(r));
  return all;
}

}  // namespace kiln::gpu_test
