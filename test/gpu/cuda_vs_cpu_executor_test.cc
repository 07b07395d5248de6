// The CUDA executor against the CPU executor on the tiny-llama fixture: the
// fixture's f32 plan through both, and a bf16 prefill long enough for the
// fused SwiGLU GEMM against the CPU's f32; likewise on tiny-qwen3 and
// tiny-mistral-swa (per-head q/k norm, sliding windows), and compiled
// --sparsity=2:4 (sparse kernels, and the dense fallback). Without a GPU each test checks the
// CUDA executor's error and stops, so ctest runs it everywhere; the runs need
// the GPU machine (scripts/gpu-check.sh).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/backend/backend.h"
#include "runtime/backend/plan_kv_pool.h"
#include "runtime/cpu/executor/executor.h"
#include "runtime/cuda/executor/bf16_fixture_plan.h"
#include "runtime/cuda/executor/executor.h"
#include "runtime/engine/engine.h"
#include "runtime/tokenizer/tokenizer.h"
#include "test/source_root.h"

namespace kiln::cuda {
namespace {

const std::string kFixture = checkoutPath("test/fixtures/tiny-llama");

// ||got - want|| / ||want|| over the whole vector.
double relativeL2(std::span<const float> got, std::span<const float> want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    norm += double(want[i]) * want[i];
  }
  return std::sqrt(diff / norm);
}

// The fixture's own plan, f32 (vLLM's --dtype float32): past the type
// checks, and with a GPU its logits are the CPU executor's on the same
// artifact to f32 rounding, through the CUDA-core attention (prefill, and
// decode split over 4 key partitions with the combine), cuBLASLt f32 GEMMs
// at every row count, and the argmax over f32 logits.
// Two sequences prefilled in one batch (page size 16, `max_blocks` a
// table row): sequence 0 a `long_tokens` prompt in blocks 0, 1, ...;
// sequence 1 five tokens in block `max_blocks`.
struct TwoSequencePrefill {
  std::vector<int32_t> tokens, positions, slots, tables, query_start, kv_lens;
  int max_blocks = 0;
  BatchInputs inputs() const { return {tokens, positions, slots, tables, max_blocks, query_start, kv_lens}; }
};
TwoSequencePrefill twoSequencePrefill(int64_t vocab, int long_tokens, int max_blocks) {
  TwoSequencePrefill b;
  for (int i = 0; i < long_tokens; ++i) {
    b.tokens.push_back((i * 37 + 11) % int(vocab));
    b.positions.push_back(i);
    b.slots.push_back(i);
  }
  for (int i = 0; i < 5; ++i) {
    b.tokens.push_back((i * 5 + 3) % int(vocab));
    b.positions.push_back(i);
    b.slots.push_back(max_blocks * 16 + i);
  }
  b.tables.assign(size_t(2 * max_blocks), 0);
  for (int block = 0; block < (long_tokens + 15) / 16; ++block) b.tables[size_t(block)] = block;
  b.tables[size_t(max_blocks)] = max_blocks;
  b.query_start = {0, long_tokens, long_tokens + 5};
  b.kv_lens = {long_tokens, 5};
  b.max_blocks = max_blocks;
  return b;
}

TEST(CudaExecutor, RunsTheF32FixtureAsTheCpuExecutorDoes) {
  auto manifest = Manifest::load(kFixture + "/artifact");
  ASSERT_TRUE(manifest.ok()) << manifest.error().message;
  ASSERT_EQ(manifest->activation_type, "f32");
  auto weights = WeightStore::open(*manifest, {.source_path = kFixture, .check_source_stamp = false});
  ASSERT_TRUE(weights.ok()) << weights.error().message;
  const KvPoolConfig kv = kvPoolConfigFor(*manifest, 64);
  constexpr int64_t kMaxTokens = 640;
  auto ex = CudaExecutor::create(*manifest, *weights, kv, kMaxTokens, {.progress = false});
  if (!ex.ok()) {
    EXPECT_NE(ex.error().message.find("no CUDA backend"), std::string::npos) << ex.error().message;
    std::printf("no GPU: checked the error (%s); the f32 run needs the GPU machine\n",
                ex.error().message.substr(0, ex.error().message.find('\n')).c_str());
    return;
  }
  auto cpu_ex = cpu::CpuExecutor::create(*manifest, *weights, kv, kMaxTokens);
  ASSERT_TRUE(cpu_ex.ok()) << cpu_ex.error().message;
  const int64_t vocab = (*ex)->vocabSize();
  ASSERT_EQ(vocab, (*cpu_ex)->vocabSize());
  constexpr double kTolerance = 1e-4;

  // Prefill: sequence 0 a 600-token prompt in blocks 0..37, sequence 1 five
  // tokens in block 40.
  const TwoSequencePrefill batch = twoSequencePrefill(vocab, 600, 40);
  const std::vector<int32_t>& tables = batch.tables;
  const BatchInputs prefill = batch.inputs();
  std::vector<float> gpu(size_t(2 * vocab)), cpu(size_t(2 * vocab));
  Status s = (*ex)->forward(prefill, gpu);
  ASSERT_TRUE(s.ok()) << s.error().message;
  s = (*cpu_ex)->forward(prefill, cpu);
  ASSERT_TRUE(s.ok()) << s.error().message;
  const double prefill_error = relativeL2(gpu, cpu);
  EXPECT_LE(prefill_error, kTolerance) << "prefill";

  // Decode both (graph replays; 601+ keys split 4 ways), the next token the
  // GPU's greedy pick, which must be the argmax of its logits.
  auto hostArgmax = [&](const float* row) {
    return int32_t(std::max_element(row, row + vocab) - row);
  };
  std::vector<int32_t> next{hostArgmax(gpu.data()), hostArgmax(gpu.data() + vocab)};
  double decode_error = 0;
  for (int step = 0; step < 4; ++step) {
    std::vector<int32_t> dp{600 + step, 5 + step}, ds{600 + step, 40 * 16 + 5 + step};
    std::vector<int32_t> dq{0, 1, 2}, dkv{601 + step, 6 + step};
    BatchInputs decode{next, dp, ds, tables, 40, dq, dkv};
    ASSERT_TRUE((*ex)->forward(decode, gpu).ok());
    ASSERT_TRUE((*cpu_ex)->forward(decode, cpu).ok());
    decode_error = std::max(decode_error, relativeL2(gpu, cpu));
    EXPECT_LE(relativeL2(gpu, cpu), kTolerance) << "decode step " << step;
    std::vector<int32_t> greedy(2, -1);
    s = (*ex)->forwardGreedy(decode, greedy);
    ASSERT_TRUE(s.ok()) << s.error().message;
    EXPECT_EQ(greedy[0], hostArgmax(gpu.data())) << "step " << step;
    EXPECT_EQ(greedy[1], hostArgmax(gpu.data() + vocab)) << "step " << step;
    next = greedy;
  }

  // A second prefill of another row count (525, after 605 and the decode
  // steps): new GEMM plans beside the cached ones. Sequence 0 starts over
  // with 520 tokens in its blocks; sequence 1's five are written again.
  const TwoSequencePrefill batch2 = twoSequencePrefill(vocab, 520, 40);
  ASSERT_TRUE((*ex)->forward(batch2.inputs(), gpu).ok());
  ASSERT_TRUE((*cpu_ex)->forward(batch2.inputs(), cpu).ok());
  const double second_prefill_error = relativeL2(gpu, cpu);
  EXPECT_LE(second_prefill_error, kTolerance) << "second prefill";
  std::printf("f32 plan: CUDA vs CPU executor logits, relative L2 %.3g (prefill), %.3g (worst decode step), "
              "%.3g (a second prefill of another length)\n",
              prefill_error, decode_error, second_prefill_error);
}

// A prefill of 1100 rows (five sequences of 220), past kFusedSwiGluMinRows:
// on Hopper the gate/up projection and silu_mul run as one gemm_swiglu_wgmma
// launch. Its logits must match the CPU executor on the fixture's f32 plan
// (the float reference) to the bf16 plan's tolerance, as the cuBLASLt +
// silu_mul path's do (--no-fused-swiglu), and differ from that path's (the
// fused one never rounds gate/up to bf16): both paths really ran.
TEST(CudaExecutor, FusedSwiGluPrefillMatchesTheCpuExecutor) {
  auto manifest = testing::bf16Plan(kFixture);
  ASSERT_TRUE(manifest.ok()) << manifest.error().message;
  auto weights = WeightStore::open(*manifest, {.source_path = kFixture, .check_source_stamp = false});
  ASSERT_TRUE(weights.ok()) << weights.error().message;
  constexpr int kSequences = 5, kLength = 220, kBlocks = (kLength + 15) / 16;
  constexpr int64_t kMaxTokens = kSequences * kLength;
  const KvPoolConfig kv = kvPoolConfigFor(*manifest, kSequences * kBlocks);
  auto fused = CudaExecutor::create(*manifest, *weights, kv, kMaxTokens, {.progress = false});
  if (!fused.ok()) {
    EXPECT_NE(fused.error().message.find("no CUDA backend"), std::string::npos) << fused.error().message;
    std::printf("no GPU: checked the error; the fused prefill needs the GPU machine\n");
    return;
  }
  auto unfused = CudaExecutor::create(*manifest, *weights, kv, kMaxTokens, {.progress = false, .tuning = {.fused_swiglu = false}});
  ASSERT_TRUE(unfused.ok()) << unfused.error().message;
  auto f32_manifest = Manifest::load(kFixture + "/artifact");
  ASSERT_TRUE(f32_manifest.ok()) << f32_manifest.error().message;
  auto f32_weights = WeightStore::open(*f32_manifest, {.source_path = kFixture, .check_source_stamp = false});
  ASSERT_TRUE(f32_weights.ok()) << f32_weights.error().message;
  auto cpu_ex = cpu::CpuExecutor::create(*f32_manifest, *f32_weights, kvPoolConfigFor(*f32_manifest, kSequences * kBlocks),
                                         kMaxTokens);
  ASSERT_TRUE(cpu_ex.ok()) << cpu_ex.error().message;

  const int64_t vocab = (*fused)->vocabSize();
  std::vector<int32_t> tokens, positions, slots, tables(size_t(kSequences * kBlocks)), query_start{0}, kv_lens;
  for (int b = 0; b < kSequences; ++b) {
    for (int i = 0; i < kLength; ++i) {
      tokens.push_back((i * 31 + b * 7 + 3) % int(vocab));
      positions.push_back(i);
      slots.push_back((b * kBlocks + i / 16) * 16 + i % 16);
    }
    for (int j = 0; j < kBlocks; ++j) tables[size_t(b * kBlocks + j)] = b * kBlocks + j;
    query_start.push_back(query_start.back() + kLength);
    kv_lens.push_back(kLength);
  }
  BatchInputs prefill{tokens, positions, slots, tables, kBlocks, query_start, kv_lens};
  std::vector<float> with(size_t(kSequences * vocab)), without(with.size()), reference(with.size());
  ASSERT_TRUE((*fused)->forward(prefill, with).ok());
  ASSERT_TRUE((*unfused)->forward(prefill, without).ok());
  ASSERT_TRUE((*cpu_ex)->forward(prefill, reference).ok());
  const double fused_error = relativeL2(with, reference), unfused_error = relativeL2(without, reference);
  EXPECT_LE(fused_error, 2e-2) << "fused SwiGLU prefill against the CPU executor's f32";
  EXPECT_LE(unfused_error, 2e-2) << "cuBLASLt + silu_mul prefill against the CPU executor's f32";
  EXPECT_NE(with, without) << "the fused and unfused prefills gave identical logits: did both paths run?";
  std::printf("prefill of %lld rows, logits against the CPU executor's f32: fused SwiGLU %.3g, cuBLASLt + "
              "silu_mul %.3g\n",
              (long long)kMaxTokens, fused_error, unfused_error);
}

// Prefill (a 300-token and a 5-token sequence) and 4 greedy decode steps
// through both executors; the worst relative L2 of their logits.
template <class GpuExecutor, class CpuExecutor>
double worstLogitsError(GpuExecutor& gpu_ex, CpuExecutor& cpu_ex) {
  const int64_t vocab = gpu_ex.vocabSize();
  const TwoSequencePrefill batch = twoSequencePrefill(vocab, 300, 30);
  const std::vector<int32_t>& tables = batch.tables;
  std::vector<float> gpu(size_t(2 * vocab)), cpu(gpu.size());
  EXPECT_TRUE(gpu_ex.forward(batch.inputs(), gpu).ok());
  EXPECT_TRUE(cpu_ex.forward(batch.inputs(), cpu).ok());
  double worst = relativeL2(gpu, cpu);
  std::vector<int32_t> next{int32_t(std::max_element(cpu.begin(), cpu.begin() + vocab) - cpu.begin()),
                            int32_t(std::max_element(cpu.begin() + vocab, cpu.end()) - cpu.begin() - vocab)};
  for (int step = 0; step < 4; ++step) {
    std::vector<int32_t> dp{300 + step, 5 + step}, ds{300 + step, 30 * 16 + 5 + step}, dq{0, 1, 2},
        dkv{301 + step, 6 + step};
    EXPECT_TRUE(gpu_ex.forward({next, dp, ds, tables, 30, dq, dkv}, gpu).ok());
    EXPECT_TRUE(cpu_ex.forward({next, dp, ds, tables, 30, dq, dkv}, cpu).ok());
    worst = std::max(worst, relativeL2(gpu, cpu));
    next = {int32_t(std::max_element(cpu.begin(), cpu.begin() + vocab) - cpu.begin()),
            int32_t(std::max_element(cpu.begin() + vocab, cpu.end()) - cpu.begin() - vocab)};
  }
  return worst;
}

// The worst relative L2 between the CUDA executor's logits and the CPU
// executor's on `artifact`: the CUDA run on the artifact itself (its f32
// plan) and on the fixture's bf16 plan with `kv_type` KV. Without a GPU it
// checks the error and leaves `errors` empty.
struct PlanErrors {
  double f32 = 0, bf16 = 0;
};
void cudaAgainstCpu(const std::string& artifact, const std::string& fixture, const std::string& kv_type,
                    std::optional<PlanErrors>* errors) {
  auto manifest = Manifest::load(artifact);
  ASSERT_TRUE(manifest.ok()) << manifest.error().message;
  auto weights = WeightStore::open(*manifest, {.source_path = fixture, .check_source_stamp = false});
  ASSERT_TRUE(weights.ok()) << weights.error().message;
  const KvPoolConfig kv = kvPoolConfigFor(*manifest, 64);
  auto ex = CudaExecutor::create(*manifest, *weights, kv, 512, {.progress = false});
  if (!ex.ok()) {
    EXPECT_NE(ex.error().message.find("no CUDA backend"), std::string::npos) << ex.error().message;
    return;
  }
  auto cpu_ex = cpu::CpuExecutor::create(*manifest, *weights, kv, 512);
  ASSERT_TRUE(cpu_ex.ok()) << cpu_ex.error().message;
  PlanErrors found;
  found.f32 = worstLogitsError(**ex, **cpu_ex);

  auto bf16 = testing::bf16Plan(fixture, kv_type);
  ASSERT_TRUE(bf16.ok()) << bf16.error().message;
  auto bf16_weights = WeightStore::open(*bf16, {.source_path = fixture, .check_source_stamp = false});
  ASSERT_TRUE(bf16_weights.ok()) << bf16_weights.error().message;
  auto bf16_ex = CudaExecutor::create(*bf16, *bf16_weights, kvPoolConfigFor(*bf16, 64), 512, {.progress = false});
  ASSERT_TRUE(bf16_ex.ok()) << bf16_ex.error().message;
  auto cpu_again = cpu::CpuExecutor::create(*manifest, *weights, kv, 512);
  ASSERT_TRUE(cpu_again.ok()) << cpu_again.error().message;
  found.bf16 = worstLogitsError(**bf16_ex, **cpu_again);
  *errors = found;
}

// int8 and fp8 KV caches (a scale per token and kv head): the CUDA executor
// quantizes in rope_kv_append and reads codes and scales in paged_attention
// (prefill) and decode_attention (decode, bf16 plans) or the split
// paged_attention (f32 plans); its logits follow the CPU executor's on the
// same KV type. The f32 plan runs both executors on one artifact (only the
// rope's last-ulp differences can move a code); the bf16 plan is held to the
// bf16 tolerance of the CPU's f32 run.
TEST(CudaExecutor, ScaledKvCacheFollowsTheCpuExecutor) {
  for (const char* kv_type : {"int8", "fp8e4m3"}) {
    const std::string artifact = kFixture + (std::string(kv_type) == "int8" ? "/artifact-kvint8" : "/artifact-kvfp8");
    std::optional<PlanErrors> errors;
    cudaAgainstCpu(artifact, kFixture, kv_type, &errors);
    if (HasFatalFailure()) return;
    if (!errors) {
      std::printf("no GPU: checked the error; the %s KV runs need the GPU machine\n", kv_type);
      return;
    }
    EXPECT_LE(errors->f32, 1e-3) << kv_type << " KV, f32 plan";
    EXPECT_LE(errors->bf16, 3e-2) << kv_type << " KV, bf16 plan";
    std::printf("%s KV: CUDA vs CPU executor logits, worst relative L2 %.3g (f32 plan), %.3g (bf16 plan against "
                "the CPU's f32)\n",
                kv_type, errors->f32, errors->bf16);
  }
}

// Qwen3 (per-head q/k norm in rope_kv_append, layer 1 sliding over 12 keys),
// Mistral with sliding_window 7 and Phi-3 (fused qkv and gate/up in the
// checkpoint, sliding_window 9) and Gemma 3 (GeGLU, (1 + w) sandwich norms,
// scaled embeddings, a global layer with linearly scaled RoPE between
// sliding ones), and the mixtures of experts Mixtral (4 experts, top 2,
// renormalized, sliding_window 11) and Qwen3-MoE (8 experts, top 3, a dense
// layer between two MoE ones; moe.cuh's router, the prefill's experts as
// moe_grouped_mma.cuh's grouped GEMMs in the bf16 plan, the decode steps'
// as moe.cuh's gathered GEMVs): a 300-token prefill and decode steps far
// past the windows. The f32 plan (CUDA-core attention, split decode) follows
// the CPU executor to f32 rounding; the bf16 plan (tensor-core prefill and
// decode_attention with their windows, head_dim 64) to bf16's tolerance of
// the CPU's f32 run.
TEST(CudaExecutor, Qwen3AndSlidingWindowFollowTheCpuExecutor) {
  for (const char* name :
       {"tiny-qwen3", "tiny-mistral-swa", "tiny-phi3", "tiny-gemma3", "tiny-mixtral", "tiny-qwen3-moe"}) {
    const std::string fixture = checkoutPath(std::string("test/fixtures/") + name);
    std::optional<PlanErrors> errors;
    cudaAgainstCpu(fixture + "/artifact", fixture, "bf16", &errors);
    if (HasFatalFailure()) return;
    if (!errors) {
      std::printf("no GPU: checked the error; %s needs the GPU machine\n", name);
      return;
    }
    EXPECT_LE(errors->f32, 1e-4) << name << ", f32 plan";
    EXPECT_LE(errors->bf16, 2e-2) << name << ", bf16 plan";
    std::printf("%s: CUDA vs CPU executor logits, worst relative L2 %.3g (f32 plan), %.3g (bf16 plan against the "
                "CPU's f32)\n",
                name, errors->f32, errors->bf16);
  }
}

// A vocabulary of printable names for a fixture without a tokenizer: the
// engine needs one to stream text; these tests compare token ids only.
Tokenizer fixtureTokenizer(int64_t vocab) {
  TokenizerVocab v;
  v.model = TokenizerModel::kByteLevelBpe;
  v.pre = PreTokenizerKind::kGpt2;
  for (int64_t i = 0; i < vocab; ++i) {
    std::string name = "<";
    name += std::to_string(i);
    name += '>';
    v.tokens.push_back(std::move(name));
  }
  v.token_types.assign(v.tokens.size(), TokenType::kNormal);
  return Tokenizer::create(std::move(v)).take();
}

// The tiny Llama compiled with --sparsity=2:4 (the plans gpu-bundle.sh
// writes as tiny-llama-sparse-*, and the ctest fixture sparse24_plans, in
// $KILN_SPARSE24_PLANS), through worstLogitsError's 300-token prefill (the
// sparse GEMM) and 2-row decode steps (sparse24_gemv): the bf16 plans over
// sp24 and int4sp24 weights against the CPU executor's f32 run of the same
// weights, to the bf16 tolerance; the f32 plans, whose sparse weights the
// CUDA executor expands to dense matrices for cuBLASLt, to f32 rounding.
TEST(CudaExecutor, SparseLlamaFollowsTheCpuExecutor) {
  const char* plans = std::getenv("KILN_SPARSE24_PLANS");
  if (!plans)
    GTEST_SKIP() << "KILN_SPARSE24_PLANS is not set: run under ctest (fixture sparse24_plans) or "
                    "scripts/gpu-check.sh (part sparse), which point it at the tiny-llama-sparse-* plans";
  struct Case {
    const char* gpu_plan;
    const char* cpu_plan;
    double tolerance;
    const char* path;
  };
  const Case cases[] = {
      {"tiny-llama-sparse-bf16", "tiny-llama-sparse-f32", 2e-2, "sparse24_gemv / sparse GEMM, bf16 kept values"},
      {"tiny-llama-sparse-int4-bf16", "tiny-llama-sparse-int4-f32", 2e-2, "sparse24_gemv over q4_0, sparse GEMM"},
      {"tiny-llama-sparse-f32", "tiny-llama-sparse-f32", 1e-5, "expanded to dense, cuBLASLt f32"},
      {"tiny-llama-sparse-int4-f32", "tiny-llama-sparse-int4-f32", 1e-5, "expanded to dense, cuBLASLt f32"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.gpu_plan);
    auto manifest = Manifest::load(std::string(plans) + "/" + c.gpu_plan);
    ASSERT_TRUE(manifest.ok()) << manifest.error().message;
    bool sparse_variants = false;
    for (const Step& step : manifest->findEntry("forward")->steps)
      for (const KernelVariant& v : step.variants) sparse_variants |= v.role == VariantRole::kSparseGemm;
    EXPECT_EQ(sparse_variants, manifest->activation_type == "bf16") << "the sparse kernels run bf16 plans only";
    auto weights = WeightStore::open(*manifest, {.source_path = kFixture, .check_source_stamp = false});
    ASSERT_TRUE(weights.ok()) << weights.error().message;
    auto ex = CudaExecutor::create(*manifest, *weights, kvPoolConfigFor(*manifest, 64), 512, {.progress = false});
    if (!ex.ok()) {
      EXPECT_NE(ex.error().message.find("no CUDA backend"), std::string::npos) << ex.error().message;
      std::printf("no GPU: checked the error; the sparse runs need the GPU machine\n");
      return;
    }
    auto cpu_manifest = Manifest::load(std::string(plans) + "/" + c.cpu_plan);
    ASSERT_TRUE(cpu_manifest.ok()) << cpu_manifest.error().message;
    auto cpu_weights = WeightStore::open(*cpu_manifest, {.source_path = kFixture, .check_source_stamp = false});
    ASSERT_TRUE(cpu_weights.ok()) << cpu_weights.error().message;
    auto cpu_ex = cpu::CpuExecutor::create(*cpu_manifest, *cpu_weights, kvPoolConfigFor(*cpu_manifest, 64), 512);
    ASSERT_TRUE(cpu_ex.ok()) << cpu_ex.error().message;
    const double error = worstLogitsError(**ex, **cpu_ex);
    EXPECT_LE(error, c.tolerance) << c.path;
    std::printf("%s (%s): CUDA vs CPU executor logits (%s), worst relative L2 %.3g\n", c.gpu_plan, c.path,
                c.cpu_plan, error);
  }
}

// The engine frees the blocks wholly before a sliding window while a
// sequence runs and hands them to others: on CUDA (which says its kernels
// read only the window) six sequences of 230 tokens, 90 blocks of 16 with
// full attention, run in a pool of 24 without a preemption and give the
// CPU engine's greedy tokens. A kernel that read a freed block would read
// another sequence's keys there.
TEST(CudaExecutor, EngineFreesBlocksBeforeTheWindowAndKeepsTokens) {
  const std::string fixture = checkoutPath("test/fixtures/tiny-mistral-swa");
  auto manifest = Manifest::load(fixture + "/artifact");
  ASSERT_TRUE(manifest.ok()) << manifest.error().message;
  auto weights = WeightStore::open(*manifest, {.source_path = fixture, .check_source_stamp = false});
  ASSERT_TRUE(weights.ok()) << weights.error().message;
  const int64_t blocks = 24, window = 7, context = 256;
  const KvPoolConfig kv = kvPoolConfigFor(*manifest, blocks);
  auto cuda_ex = CudaExecutor::create(*manifest, *weights, kv, 256, {.progress = false});
  if (!cuda_ex.ok()) {
    EXPECT_NE(cuda_ex.error().message.find("no CUDA backend"), std::string::npos) << cuda_ex.error().message;
    std::printf("no GPU: checked the error; the engine's window freeing on CUDA needs the GPU machine\n");
    return;
  }
  auto cpu_ex = cpu::CpuExecutor::create(*manifest, *weights, kv, 256);
  ASSERT_TRUE(cpu_ex.ok()) << cpu_ex.error().message;
  const int64_t vocab = (*cpu_ex)->vocabSize();

  auto generate = [&](std::unique_ptr<Backend> backend, EngineMetrics* metrics) {
    EXPECT_TRUE(backend->honorsSlidingWindows()) << backend->name();
    EngineOptions options;
    options.max_sequences = 6;
    options.prefix_cache = false;
    auto engine = Engine::fromBackend(std::move(backend), fixtureTokenizer(vocab), context, options, window);
    EXPECT_TRUE(engine.ok()) << engine.error().message;
    std::map<int64_t, std::vector<int32_t>> tokens;
    for (int r = 0; r < 6; ++r) {
      GenerationRequest request;
      for (int i = 0; i < 20 + 3 * r; ++i) request.prompt_tokens.push_back(int32_t(1 + (i * 37 + r * 11) % (vocab - 1)));
      request.sampling.max_tokens = 230 - int(request.prompt_tokens.size());
      request.sampling.ignore_eos = true;
      auto id = (*engine)->submit(request, [&](int64_t id, int32_t token, std::string_view) {
        if (token >= 0) tokens[id].push_back(token);
      });
      EXPECT_TRUE(id.ok()) << id.error().message;
    }
    while (!(*engine)->idle()) {
      Status status = (*engine)->step();
      EXPECT_TRUE(status.ok()) << status.error().message;
      if (!status.ok()) break;
    }
    *metrics = (*engine)->metrics();
    return tokens;
  };
  EngineMetrics cuda_metrics, cpu_metrics;
  const auto on_cuda = generate(
      std::make_unique<ExecutorBackend<CudaExecutor>>(cuda_ex.take(), "cuda", false, /*honors_sliding_windows=*/true),
      &cuda_metrics);
  const auto on_cpu = generate(
      std::make_unique<ExecutorBackend<cpu::CpuExecutor>>(cpu_ex.take(), "cpu", false, /*honors_sliding_windows=*/true),
      &cpu_metrics);
  EXPECT_EQ(cuda_metrics.preemptions, 0);
  EXPECT_EQ(cpu_metrics.preemptions, 0);
  ASSERT_EQ(on_cuda.size(), 6u);
  int equal = 0;
  for (const auto& [id, tokens] : on_cuda) {
    EXPECT_EQ(tokens.size(), on_cpu.at(id).size()) << "request " << id;
    equal += tokens == on_cpu.at(id);
  }
  EXPECT_EQ(equal, 6) << "requests whose CUDA greedy tokens equal the CPU engine's";
  std::printf("tiny-mistral-swa: 6 x 230 tokens in a pool of %lld blocks, window %lld: %d of 6 CUDA greedy "
              "completions equal the CPU engine's, %lld preemptions\n",
              (long long)blocks, (long long)window, equal, (long long)cuda_metrics.preemptions);
}

}  // namespace
}  // namespace kiln::cuda
