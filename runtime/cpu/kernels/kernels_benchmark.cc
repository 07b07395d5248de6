// Throughput of the CPU kernels on SmolLM2-135M shapes (hidden 576, ffn 1536,
// 9 heads / 3 kv heads of 64). The `weight_GB/s` counter is bytes of weights
// (or KV, for attention) read per second, the figure that bounds decode.
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include "runtime/cpu/kernels/embed.h"
#include "runtime/cpu/kernels/linear.h"
#include "runtime/cpu/kernels/paged_attention.h"
#include "runtime/cpu/kernels/quant_dot.h"
#include "runtime/numerics/quant.h"
#include "runtime/numerics/testing.h"
#include "runtime/support/thread_pool.h"

namespace kiln::cpu {
namespace {

std::vector<float> randomFloats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<uint8_t> quantizedMatrix(WeightType type, int64_t rows, int64_t cols, uint32_t seed) {
  std::vector<float> w = randomFloats(size_t(rows * cols), seed);
  std::vector<uint8_t> bytes(size_t(rowBytes(type, cols) * rows));
  for (int64_t r = 0; r < rows; ++r)
    (void)quantizeRow(type, w.data() + r * cols, bytes.data() + r * rowBytes(type, cols), cols);
  return bytes;
}

void setThreads(benchmark::State& state, int arg_index) {
  const int threads = int(state.range(arg_index));
  if (kernelThreads() != threads) setKernelThreads(threads);
}

// Args: {k (in), n (out), tokens, threads}
void BM_LinearQ4_1(benchmark::State& state) {
  const int64_t k = state.range(0), n = state.range(1), tokens = state.range(2);
  setThreads(state, 3);
  std::vector<uint8_t> w = quantizedMatrix(WeightType::Q4_1, n, k, 1);
  std::vector<float> x = randomFloats(size_t(tokens * k), 2), y(size_t(tokens * n));
  for (auto _ : state) {
    Status s = linear(x.data(), tokens, k, w.data(), WeightType::Q4_1, n, nullptr, y.data());
    benchmark::DoNotOptimize(y.data());
    if (!s.ok()) state.SkipWithError(s.error().message.c_str());
  }
  const double weight_bytes = double(w.size());
  state.counters["weight_GB/s"] =
      benchmark::Counter(weight_bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * k * n * tokens * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(quantDotIsa()) + " blas:" + blasCoreName());
}
BENCHMARK(BM_LinearQ4_1)
    ->ArgNames({"k", "n", "T", "threads"})
    ->ArgsProduct({{576}, {1536}, {1, 64}, {1, 2, 4, 8}})
    ->ArgsProduct({{1536}, {576}, {1, 64}, {1, 2, 4, 8}})
    ->UseRealTime();

// The quantized GEMMs side by side on one Llama-like shape, 32-element
// blocks against the K-quants (random super-blocks: kiln has no K-quant
// quantizer). Args: {type, k, n, tokens, threads}, type indexing kTypes.
constexpr WeightType kQuantizedTypes[] = {WeightType::Q4_0, WeightType::Q8_0, WeightType::Q4_K,
                                          WeightType::Q5_K, WeightType::Q6_K};
void BM_LinearQuantized(benchmark::State& state) {
  const WeightType type = kQuantizedTypes[state.range(0)];
  const int64_t k = state.range(1), n = state.range(2), tokens = state.range(3);
  setThreads(state, 4);
  std::mt19937 rng(5);
  std::vector<uint8_t> w = isKQuant(type) ? testing::randomBlocks(rng, type, n, k)
                                          : quantizedMatrix(type, n, k, 1);
  std::vector<float> x = randomFloats(size_t(tokens * k), 2), y(size_t(tokens * n));
  for (auto _ : state) {
    Status s = linear(x.data(), tokens, k, w.data(), type, n, nullptr, y.data());
    benchmark::DoNotOptimize(y.data());
    if (!s.ok()) state.SkipWithError(s.error().message.c_str());
  }
  state.counters["weight_GB/s"] =
      benchmark::Counter(double(w.size()) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * k * n * tokens * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(weightTypeName(type)) + " " + quantDotIsa());
}
BENCHMARK(BM_LinearQuantized)
    ->ArgNames({"type", "k", "n", "T", "threads"})
    ->ArgsProduct({{0, 1, 2, 3, 4}, {2048}, {2048}, {1, 16}, {1}})
    ->UseRealTime();

// Args: {tokens, threads}; SmolLM2 vocab 49152 x 576, Q8_0 (a typical GGUF
// token_embd type) - a gather, so bytes are rows touched.
void BM_EmbedQ8_0(benchmark::State& state) {
  const int64_t vocab = 49152, hidden = 576, tokens = state.range(0);
  setThreads(state, 1);
  std::vector<uint8_t> table = quantizedMatrix(WeightType::Q8_0, vocab, hidden, 3);
  std::mt19937 rng(4);
  std::vector<int32_t> ids(static_cast<size_t>(tokens));
  for (auto& id : ids) id = int32_t(rng() % vocab);
  std::vector<float> out(size_t(tokens * hidden));
  for (auto _ : state) {
    Status s = embed(ids.data(), tokens, table.data(), WeightType::Q8_0, vocab, hidden, out.data());
    benchmark::DoNotOptimize(out.data());
    if (!s.ok()) state.SkipWithError(s.error().message.c_str());
  }
  state.counters["weight_GB/s"] = benchmark::Counter(
      double(tokens * rowBytes(WeightType::Q8_0, hidden)) * 1e-9,
      benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_EmbedQ8_0)->ArgNames({"T", "threads"})->ArgsProduct({{1, 64}, {1, 2}})->UseRealTime();

// Args: {batch, threads}; decode (one query per sequence) at context 512,
// 9 heads over 3 kv heads of 64, pages of 16.
void BM_PagedAttentionDecode(benchmark::State& state) {
  const int batch = int(state.range(0)), ctx = 512, heads = 9, page = 16;
  setThreads(state, 1);
  KvPoolShape pool{int64_t(batch) * ctx / page, page, 3, 64};
  std::vector<float> k_pool = randomFloats(size_t(pool.slots() * pool.slotElems()), 5);
  std::vector<float> v_pool = randomFloats(size_t(pool.slots() * pool.slotElems()), 6);
  std::vector<float> q = randomFloats(size_t(batch * heads * 64), 7), out(q.size());
  std::vector<int32_t> query_start(size_t(batch) + 1), kv_len(size_t(batch), ctx);
  std::vector<int32_t> table(size_t(batch) * (ctx / page));
  for (int b = 0; b <= batch; ++b) query_start[size_t(b)] = b;
  for (size_t i = 0; i < table.size(); ++i) table[i] = int32_t(i);
  PagedAttentionArgs args;
  args.q = q.data();
  args.out = out.data();
  args.num_tokens = batch;
  args.num_seqs = batch;
  args.num_heads = heads;
  args.query_start = query_start.data();
  args.kv_len = kv_len.data();
  args.block_table = table.data();
  args.max_blocks_per_seq = ctx / page;
  args.k_pool = k_pool.data();
  args.v_pool = v_pool.data();
  args.pool = pool;
  args.scale = 0.125f;
  for (auto _ : state) {
    Status s = pagedAttention(args);
    benchmark::DoNotOptimize(out.data());
    if (!s.ok()) state.SkipWithError(s.error().message.c_str());
  }
  // K and V bytes each query head group reads (GQA heads share the kv rows).
  state.counters["weight_GB/s"] = benchmark::Counter(
      2.0 * batch * ctx * pool.slotElems() * 4 * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_PagedAttentionDecode)->ArgNames({"B", "threads"})->ArgsProduct({{1, 8}, {1, 2, 4, 8}})->UseRealTime();

}  // namespace
}  // namespace kiln::cpu

BENCHMARK_MAIN();
