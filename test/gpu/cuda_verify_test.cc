// Speculative verify on the CUDA executor, on the tiny-llama fixture
// compiled with --spec-tree=widths:2,2,1 (artifact-spec: 11 nodes, depth
// 3): its logits and accepted paths against the CPU executor's for a
// chain, a tree and a root alone in one batch, and the LayerSkip draft
// entry's (artifact-layerskip) likewise; the accepted nodes' KV moved
// into place (copySlots) for every KV type; and through the engine, n-gram
// speculation's greedy tokens equal plain greedy decoding's, alone and
// batched with plain requests, and a sampled request speculates the same
// way twice; the target's hidden states and LM head alone (for Medusa draft
// heads) against the CPU executor's, and a random draft head through the
// engine keeps the greedy tokens. Without a GPU each test checks the CUDA executor's error and
// stops; the runs need the GPU machine.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/backend/backend.h"
#include "runtime/backend/plan_kv_pool.h"
#include "runtime/backend/tree_verify.h"
#include "runtime/cpu/executor/executor.h"
#include "runtime/cuda/executor/bf16_fixture_plan.h"
#include "runtime/cuda/executor/executor.h"
#include "runtime/engine/engine.h"
#include "runtime/spec/testing/draft_head_writer.h"
#include "runtime/tokenizer/tokenizer.h"
#include "test/source_root.h"

namespace kiln::cuda {
namespace {

const std::string kFixture = checkoutPath("test/fixtures/tiny-llama");
constexpr int kPage = 16;
constexpr int kBlocksPerSequence = 8;  // 128 keys a sequence
constexpr int64_t kMaxTokens = 128;

double relativeL2(std::span<const float> got, std::span<const float> want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    norm += double(want[i]) * want[i];
  }
  return std::sqrt(diff / norm);
}

bool noGpu(const Status& created, const char* what) {
  if (created.ok()) return false;
  EXPECT_NE(created.error().message.find("no CUDA backend"), std::string::npos) << created.error().message;
  std::printf("no GPU: checked the error; %s needs the GPU machine\n", what);
  return true;
}
template <class T>
bool noGpu(const Result<T>& created, const char* what) {
  return noGpu(created.ok() ? Status{} : Status(created.error()), what);
}

// Sequences whose keys sit in blocks [b * 8, b * 8 + 8): sequence b's
// token at position p in slot (b * 8 + p / 16) * 16 + p % 16.
int32_t slotOf(int b, int position) { return (b * kBlocksPerSequence + position / kPage) * kPage + position % kPage; }
std::vector<int32_t> blockTables(int sequences) {
  std::vector<int32_t> tables;
  for (int b = 0; b < sequences * kBlocksPerSequence; ++b) tables.push_back(b);
  return tables;
}

// Every sequence's prompt but its last token, prefilled in one forward.
template <class Executor>
void prefill(Executor& ex, const std::vector<std::vector<int32_t>>& prompts) {
  std::vector<int32_t> tokens, positions, slots, query_start{0}, kv_lens;
  for (size_t b = 0; b < prompts.size(); ++b) {
    const int length = int(prompts[b].size()) - 1;
    for (int i = 0; i < length; ++i) {
      tokens.push_back(prompts[b][size_t(i)]);
      positions.push_back(i);
      slots.push_back(slotOf(int(b), i));
    }
    query_start.push_back(query_start.back() + length);
    kv_lens.push_back(length);
  }
  const std::vector<int32_t> tables = blockTables(int(prompts.size()));
  std::vector<float> logits(prompts.size() * size_t(ex.vocabSize()));
  Status s = ex.forward({tokens, positions, slots, tables, kBlocksPerSequence, query_start, kv_lens}, logits);
  ASSERT_TRUE(s.ok()) << s.error().message;
}

// One tree a sequence after its prompt (minus the root, the prompt's last
// token): its nodes' tokens and local parents.
struct Tree {
  std::vector<int32_t> tokens, parents;
};
struct Verified {
  std::vector<float> logits;  // [N, vocab]
  std::vector<int32_t> accepted, count;
};

// The batch of `trees`, sequence b's nodes after its prefix[b] keys: each
// node's position one past its parent's, its slot the next of its sequence.
struct TreeBatch {
  std::vector<int32_t> tokens, parents, positions, slots, query_start{0}, kv_lens, base, tables;

  BatchInputs inputs() const {
    BatchInputs in{tokens, positions, slots, tables, kBlocksPerSequence, query_start, kv_lens};
    in.parents = parents;
    in.base_positions = base;
    return in;
  }
};

TreeBatch treeBatch(const std::vector<int>& prefix, const std::vector<Tree>& trees) {
  TreeBatch batch;
  for (size_t b = 0; b < trees.size(); ++b) {
    const size_t first = batch.tokens.size();
    for (size_t i = 0; i < trees[b].tokens.size(); ++i) {
      const int32_t parent = trees[b].parents[i];
      batch.tokens.push_back(trees[b].tokens[i]);
      batch.parents.push_back(parent);
      batch.positions.push_back(parent < 0 ? prefix[b] : batch.positions[first + size_t(parent)] + 1);
      batch.slots.push_back(slotOf(int(b), prefix[b] + int(i)));
    }
    batch.query_start.push_back(int32_t(batch.tokens.size()));
    batch.kv_lens.push_back(prefix[b] + int32_t(trees[b].tokens.size()));
    batch.base.push_back(prefix[b]);
  }
  batch.tables = blockTables(int(trees.size()));
  return batch;
}

template <class Executor>
Verified verify(Executor& ex, const std::vector<int>& prefix, const std::vector<Tree>& trees) {
  const TreeBatch batch = treeBatch(prefix, trees);
  Verified out;
  out.logits.resize(batch.tokens.size() * size_t(ex.vocabSize()));
  out.accepted.resize(trees.size() * size_t(ex.treeDepth() + 1));
  out.count.resize(trees.size());
  Status s = ex.verify(batch.inputs(), out.logits, out.accepted, out.count);
  EXPECT_TRUE(s.ok()) << s.error().message;
  // The contract: the greedy walk over the returned logits.
  std::vector<int32_t> walked(out.accepted.size()), walked_count(out.count.size());
  acceptGreedy(out.logits, ex.vocabSize(), batch.tokens, batch.parents, batch.query_start, ex.treeDepth() + 1,
               walked.data(), walked_count.data());
  EXPECT_EQ(out.accepted, walked);
  EXPECT_EQ(out.count, walked_count);
  return out;
}

int32_t argmaxOf(std::span<const float> row) {
  return int32_t(std::max_element(row.begin(), row.end()) - row.begin());
}

const std::vector<std::vector<int32_t>> kPrompts = {
    {1, 17, 42, 99, 5, 23, 61, 8, 77, 31, 2, 90, 14, 55, 3, 48, 12, 101, 64, 9, 33, 70, 4},
    {1, 9, 5},
    {1, 44, 12, 88, 19, 6}};
const std::vector<int> kPrefix = {22, 2, 5};  // prompt lengths less the root

// A chain of three drafts, the fixture's tree partly filled, a root alone.
std::vector<Tree> verifyBatch(const std::vector<int32_t>& chain) {
  return {{{kPrompts[0].back(), chain[0], chain[1], chain[2]}, {-1, 0, 1, 2}},
          {{kPrompts[1].back(), 7, 70, 8, 80, 9, 11}, {-1, 0, 0, 1, 1, 2, 3}},
          {{kPrompts[2].back()}, {-1}}};
}

// kFixture's artifact `name` on both executors with kPrompts prefilled;
// null without a GPU (the CUDA executor's error checked) or on a failure
// (reported).
struct ExecutorPair {
  Manifest plan;
  std::optional<WeightStore> weights;
  std::unique_ptr<cpu::CpuExecutor> cpu;
  std::unique_ptr<CudaExecutor> cuda;
};
std::unique_ptr<ExecutorPair> prefilledPair(const std::string& name, const char* what) {
  auto plan = Manifest::load(kFixture + "/" + name);
  EXPECT_TRUE(plan.ok()) << plan.error().message;
  if (!plan.ok()) return nullptr;
  auto pair = std::make_unique<ExecutorPair>(ExecutorPair{plan.take(), std::nullopt, nullptr, nullptr});
  auto weights = WeightStore::open(pair->plan, {.source_path = kFixture, .check_source_stamp = false});
  EXPECT_TRUE(weights.ok()) << weights.error().message;
  if (!weights.ok()) return nullptr;
  pair->weights.emplace(weights.take());
  const KvPoolConfig kv = kvPoolConfigFor(pair->plan, 3 * kBlocksPerSequence);
  auto cpu_ex = cpu::CpuExecutor::create(pair->plan, *pair->weights, kv, kMaxTokens);
  EXPECT_TRUE(cpu_ex.ok()) << cpu_ex.error().message;
  if (!cpu_ex.ok()) return nullptr;
  auto ex = CudaExecutor::create(pair->plan, *pair->weights, kv, kMaxTokens, {.progress = false});
  if (noGpu(ex, what)) return nullptr;
  pair->cpu = cpu_ex.take();
  pair->cuda = ex.take();
  prefill(*pair->cuda, kPrompts);
  prefill(*pair->cpu, kPrompts);
  return pair;
}

// f32 plan to f32 rounding, bf16 plan to bf16's tolerance of the CPU's f32
// run. Three passes, each chain draft the CPU's argmax of the pass before,
// so the last chain is the greedy one and all its drafts are accepted.
TEST(CudaVerify, LogitsAndPathsFollowTheCpuExecutor) {
  auto f32 = Manifest::load(kFixture + "/artifact-spec");
  ASSERT_TRUE(f32.ok()) << f32.error().message;
  auto weights = WeightStore::open(*f32, {.source_path = kFixture, .check_source_stamp = false});
  ASSERT_TRUE(weights.ok()) << weights.error().message;
  auto bf16 = testing::bf16Plan(kFixture, "bf16", "artifact-spec");
  ASSERT_TRUE(bf16.ok()) << bf16.error().message;
  auto bf16_weights = WeightStore::open(*bf16, {.source_path = kFixture, .check_source_stamp = false});
  ASSERT_TRUE(bf16_weights.ok()) << bf16_weights.error().message;
  const KvPoolConfig kv = kvPoolConfigFor(*f32, 3 * kBlocksPerSequence);
  auto cpu_ex = cpu::CpuExecutor::create(*f32, *weights, kv, kMaxTokens);
  ASSERT_TRUE(cpu_ex.ok()) << cpu_ex.error().message;
  for (const Manifest* plan : {&*f32, &*bf16}) {
    const bool is_f32 = plan->activation_type == "f32";
    auto ex = CudaExecutor::create(*plan, is_f32 ? *weights : *bf16_weights, kvPoolConfigFor(*plan, 3 * kBlocksPerSequence),
                                   kMaxTokens, {.progress = false});
    if (noGpu(ex, "the verify comparison")) return;
    EXPECT_EQ((*ex)->treeNodes(), 11);
    EXPECT_EQ((*ex)->treeDepth(), 3);
    const int64_t vocab = (*ex)->vocabSize();
    prefill(**ex, kPrompts);
    prefill(**cpu_ex, kPrompts);
    std::vector<int32_t> chain = {3, 4, 5};
    double worst = 0;
    Verified gpu, cpu;
    for (int pass = 0; pass < 4; ++pass) {
      gpu = verify(**ex, kPrefix, verifyBatch(chain));
      cpu = verify(**cpu_ex, kPrefix, verifyBatch(chain));
      const double error = relativeL2(gpu.logits, cpu.logits);
      worst = std::max(worst, error);
      EXPECT_LE(error, is_f32 ? 1e-4 : 2e-2) << plan->activation_type << " pass " << pass;
      if (is_f32) {
        EXPECT_EQ(gpu.accepted, cpu.accepted) << "pass " << pass;
        EXPECT_EQ(gpu.count, cpu.count) << "pass " << pass;
      }
      if (pass < 3) chain[size_t(pass)] = argmaxOf({cpu.logits.data() + pass * vocab, size_t(vocab)});
    }
    EXPECT_EQ(cpu.count[0], 3) << "the greedy chain is accepted whole";
    EXPECT_EQ(cpu.count[2], 0) << "a root alone has nothing to accept";
    std::printf("%s plan: CUDA vs CPU verify logits (chain, tree, root alone), worst relative L2 %.3g; accepted "
                "%d, %d, %d on CUDA\n",
                plan->activation_type.c_str(), worst, gpu.count[0], gpu.count[1], gpu.count[2]);
  }
}

// Verify batches replay a CUDA graph per shape: the first call of a shape
// runs step by step, the second captures (one capture), the third replays
// (none); every call's logits and paths are, bit for bit, those of an
// executor with graphs off (cuBLASLt's first heuristic algorithm in both,
// so neither times its own). The chain alone is another shape, captured
// on its own. On the f32 plan (cuBLASLt GEMMs) and the bf16 one (cuBLASLt
// at the batch's 12 rows, skinny GEMMs at the chain's 4).
TEST(CudaVerify, GraphReplayGivesTheStepByStepResults) {
  for (const char* activation : {"f32", "bf16"}) {
    auto plan = std::string(activation) == "f32" ? Manifest::load(kFixture + "/artifact-spec")
                                                 : testing::bf16Plan(kFixture, "bf16", "artifact-spec");
    ASSERT_TRUE(plan.ok()) << plan.error().message;
    auto weights = WeightStore::open(*plan, {.source_path = kFixture, .check_source_stamp = false});
    ASSERT_TRUE(weights.ok()) << weights.error().message;
    const KvPoolConfig kv = kvPoolConfigFor(*plan, 3 * kBlocksPerSequence);
    CudaExecutorOptions options{.progress = false};
    options.tuning.gemm_autotune = false;
    auto ex = CudaExecutor::create(*plan, *weights, kv, kMaxTokens, options);
    if (noGpu(ex, "the verify graphs")) return;
    options.tuning.graphs = false;
    auto eager = CudaExecutor::create(*plan, *weights, kv, kMaxTokens, options);
    ASSERT_TRUE(eager.ok()) << eager.error().message;
    prefill(**ex, kPrompts);
    prefill(**eager, kPrompts);
    const std::vector<Tree> trees = verifyBatch({3, 4, 5});
    const Verified want = verify(**eager, kPrefix, trees);
    EXPECT_EQ((*eager)->graphCaptures(), 0) << activation;
    const int64_t before = (*ex)->graphCaptures();
    for (int call = 1; call <= 3; ++call) {
      const Verified got = verify(**ex, kPrefix, trees);
      EXPECT_EQ((*ex)->graphCaptures(), before + (call >= 2 ? 1 : 0)) << activation << " call " << call;
      EXPECT_TRUE(got.logits == want.logits)
          << activation << " call " << call << ": relative L2 " << relativeL2(got.logits, want.logits);
      EXPECT_EQ(got.accepted, want.accepted) << activation << " call " << call;
      EXPECT_EQ(got.count, want.count) << activation << " call " << call;
    }
    // Sequence 0's chain (4 nodes) alone: another shape, captured at its
    // own second call; equal to the eager run's.
    const Verified chain_want = verify(**eager, {kPrefix[0]}, {trees[0]});
    const int64_t after_batch = (*ex)->graphCaptures();
    for (int call = 1; call <= 3; ++call) {
      const Verified got = verify(**ex, {kPrefix[0]}, {trees[0]});
      EXPECT_EQ((*ex)->graphCaptures(), after_batch + (call >= 2 ? 1 : 0)) << activation << " chain call " << call;
      EXPECT_TRUE(got.logits == chain_want.logits) << activation << " chain call " << call;
      EXPECT_EQ(got.accepted, chain_want.accepted) << activation << " chain call " << call;
    }
    std::printf("%s plan: verify graphs %lld captured, replays equal to the step-by-step run\n", activation,
                (long long)((*ex)->graphCaptures() - before));
  }
}

// The LayerSkip draft entry (artifact-layerskip: layer 0 of 2, then the
// final norm and LM head) on the f32 plan: the CUDA executor's draft
// logits over the chain, tree and root-alone batch are the CPU executor's,
// and so are the verify logits after it (the draft's layer-0 KV at the
// nodes' slots is verify's, written again).
TEST(CudaVerify, DraftEntryFollowsTheCpuExecutor) {
  auto pair = prefilledPair("artifact-layerskip", "the draft entry comparison");
  if (!pair) return;
  auto* ex = &pair->cuda;
  auto* cpu_ex = &pair->cpu;
  ASSERT_EQ((*ex)->draftLayers(), 1);
  const std::vector<Tree> trees = verifyBatch({3, 4, 5});
  const TreeBatch batch = treeBatch(kPrefix, trees);
  const BatchInputs in = batch.inputs();
  std::vector<float> gpu(batch.tokens.size() * size_t((*ex)->vocabSize())), cpu(gpu.size());
  Status g = (*ex)->draft(in, gpu), c = (*cpu_ex)->draft(in, cpu);
  ASSERT_TRUE(g.ok()) << g.error().message;
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_LE(relativeL2(gpu, cpu), 1e-4);
  const Verified gv = verify(**ex, kPrefix, trees), cv = verify(**cpu_ex, kPrefix, trees);
  EXPECT_LE(relativeL2(gv.logits, cv.logits), 1e-4);
  EXPECT_GT(relativeL2(gpu, gv.logits), 1e-3) << "one layer of two drafts other logits";
  std::printf("draft entry: CUDA vs CPU logits relative L2 %.3g\n", relativeL2(gpu, cpu));
}

// A draft head reads the LM head's input of the latest call and runs the
// LM head alone: after a verify (a row per node) and a decode forward (a
// row per sequence) the CUDA executor's rows are the CPU executor's, and
// lmHead over them gives the logits of the call that left them.
TEST(CudaVerify, HiddenStatesAndLmHeadFollowTheCpuExecutor) {
  auto pair = prefilledPair("artifact-spec", "the hidden state comparison");
  if (!pair) return;
  auto* ex = &pair->cuda;
  auto* cpu_ex = &pair->cpu;
  const int64_t h = (*ex)->hiddenSize(), vocab = (*ex)->vocabSize();
  ASSERT_EQ(h, (*cpu_ex)->hiddenSize());
  auto check = [&](const char* call, std::span<const float> want_logits) {
    const std::vector<float> gpu((*ex)->lastHidden().begin(), (*ex)->lastHidden().end());
    const std::span<const float> cpu = (*cpu_ex)->lastHidden();
    ASSERT_EQ(gpu.size(), cpu.size()) << call;
    EXPECT_LE(relativeL2(gpu, cpu), 1e-4) << call;
    const int64_t rows = int64_t(gpu.size()) / h;
    std::vector<float> again(size_t(rows * vocab));
    Status s = (*ex)->lmHead(gpu, rows, again);
    ASSERT_TRUE(s.ok()) << s.error().message;
    EXPECT_LE(relativeL2(again, want_logits), 1e-4) << call << ": lm head over its own hidden rows";
    EXPECT_EQ((*ex)->lastHidden().size(), gpu.size()) << call << ": lmHead keeps the hidden rows";
    std::printf("%s: %lld hidden rows, CUDA vs CPU relative L2 %.3g\n", call, (long long)rows,
                relativeL2(gpu, cpu));
  };
  const std::vector<Tree> trees = verifyBatch({3, 4, 5});
  const Verified gv = verify(**ex, kPrefix, trees);
  verify(**cpu_ex, kPrefix, trees);
  check("verify", gv.logits);
  // A decode step at each root's position (its slot rewritten alike).
  std::vector<int32_t> tokens, positions, slots, query_start{0}, kv_lens;
  for (size_t b = 0; b < kPrompts.size(); ++b) {
    tokens.push_back(kPrompts[b].back());
    positions.push_back(kPrefix[b]);
    slots.push_back(slotOf(int(b), kPrefix[b]));
    query_start.push_back(int32_t(b + 1));
    kv_lens.push_back(kPrefix[b] + 1);
  }
  const std::vector<int32_t> tables = blockTables(int(kPrompts.size()));
  const BatchInputs decode{tokens, positions, slots, tables, kBlocksPerSequence, query_start, kv_lens};
  std::vector<float> gpu_logits(kPrompts.size() * size_t(vocab)), cpu_logits(gpu_logits.size());
  ASSERT_TRUE((*ex)->forward(decode, gpu_logits).ok());
  ASSERT_TRUE((*cpu_ex)->forward(decode, cpu_logits).ok());
  check("decode forward", gpu_logits);
  std::vector<float> too_few(static_cast<size_t>(vocab));
  EXPECT_FALSE((*ex)->lmHead(std::vector<float>(size_t(h)), 2, too_few).ok()) << "two rows, one row of values";
}

// The accepted path 0 -> 2 -> 5 of the tree moves nodes 2 and 5 to the
// slots of depths 1 and 2; a decode step after them then reads them there.
// On every KV type (f32, bf16, int8 and fp8 with their scales) on the f32
// plan, the CUDA executor's logits are the CPU executor's (whose pool
// copies on the host): a slot not moved, or its scales not, would give
// other keys there.
TEST(CudaVerify, CopySlotsMovesAcceptedNodesForEveryKvType) {
  for (const char* kv_type : {"f32", "bf16", "int8", "fp8e4m3"}) {
    auto plan = testing::fixturePlan(kFixture, "f32", kv_type, "artifact-spec");
    ASSERT_TRUE(plan.ok()) << plan.error().message;
    auto weights = WeightStore::open(*plan, {.source_path = kFixture, .check_source_stamp = false});
    ASSERT_TRUE(weights.ok()) << weights.error().message;
    const KvPoolConfig kv = kvPoolConfigFor(*plan, 3 * kBlocksPerSequence);
    auto cpu_ex = cpu::CpuExecutor::create(*plan, *weights, kv, kMaxTokens);
    ASSERT_TRUE(cpu_ex.ok()) << cpu_ex.error().message;
    const std::vector<Tree> trees = verifyBatch({3, 4, 5});
    std::vector<float> gpu(size_t(3 * (*cpu_ex)->vocabSize())), cpu(gpu.size());
    auto run = [&](auto& executor, std::vector<float>& logits) {
      prefill(executor, kPrompts);
      verify(executor, kPrefix, trees);
      const std::vector<SlotCopy> moves = {{slotOf(1, kPrefix[1] + 2), slotOf(1, kPrefix[1] + 1)},
                                           {slotOf(1, kPrefix[1] + 5), slotOf(1, kPrefix[1] + 2)}};
      Status s;
      if constexpr (requires { executor.copySlots(moves); }) s = executor.copySlots(moves);
      else s = executor.blockPool().copySlots(moves);  // the CPU pool is in host memory
      ASSERT_TRUE(s.ok()) << s.error().message;
      // Each sequence's next token after its kept path: sequence 1's after
      // root, 70, 9; the others' after their root.
      std::vector<int32_t> next{11, 12, 13}, positions{kPrefix[0] + 1, kPrefix[1] + 3, kPrefix[2] + 1};
      std::vector<int32_t> slots{slotOf(0, positions[0]), slotOf(1, positions[1]), slotOf(2, positions[2])};
      std::vector<int32_t> query_start{0, 1, 2, 3}, kv_lens{positions[0] + 1, positions[1] + 1, positions[2] + 1};
      const std::vector<int32_t> tables = blockTables(3);
      s = executor.forward({next, positions, slots, tables, kBlocksPerSequence, query_start, kv_lens}, logits);
      ASSERT_TRUE(s.ok()) << s.error().message;
    };
    run(**cpu_ex, cpu);  // the reference, on any machine
    if (HasFatalFailure()) return;
    auto ex = CudaExecutor::create(*plan, *weights, kv, kMaxTokens, {.progress = false});
    if (noGpu(ex, "the slot copies")) continue;  // the CPU half of each
    run(**ex, gpu);
    const double error = relativeL2(gpu, cpu);
    EXPECT_LE(error, 1e-3) << kv_type << " KV";
    std::printf("%s KV: decode after moved tree nodes, CUDA vs CPU relative L2 %.3g\n", kv_type, error);
  }
}

// A verify entry the executor cannot read is refused at creation, before
// the driver, naming the field; on the GPU a bad tree is refused before
// anything runs with the CPU executor's message, and a plan without a
// verify entry says what to compile.
TEST(CudaVerify, BadEntriesAndTreesAreRefused) {
  auto manifest = Manifest::load(kFixture + "/artifact-spec");
  ASSERT_TRUE(manifest.ok()) << manifest.error().message;
  auto weights = WeightStore::open(*manifest, {.source_path = kFixture, .check_source_stamp = false});
  ASSERT_TRUE(weights.ok()) << weights.error().message;
  const KvPoolConfig kv = kvPoolConfigFor(*manifest, 3 * kBlocksPerSequence);
  Manifest renamed = *manifest;
  renamed.entries.at("verify").outputs[1].name = "path";
  auto refused = CudaExecutor::create(renamed, *weights, kv, kMaxTokens, {.progress = false});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("entries.verify.outputs: expected logits, accepted and accepted_count"),
            std::string::npos)
      << refused.error().message;

  auto ex = CudaExecutor::create(*manifest, *weights, kv, kMaxTokens, {.progress = false});
  if (noGpu(ex, "the bad tree")) return;
  prefill(**ex, kPrompts);
  std::vector<int32_t> tokens{5, 6, 7}, positions{22, 23, 23}, slots{22, 23, 24}, qs{0, 3}, kv_lens{25}, base{22};
  std::vector<int32_t> parents{-1, 0, 2};  // node 2 its own parent
  const std::vector<int32_t> tables = blockTables(1);
  BatchInputs in{tokens, positions, slots, tables, kBlocksPerSequence, qs, kv_lens};
  in.parents = parents;
  in.base_positions = base;
  std::vector<float> logits(size_t(3 * (*ex)->vocabSize()));
  std::vector<int32_t> accepted(4), count(1);
  Status status = (*ex)->verify(in, logits, accepted, count);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.error().message,
            "verify: parents[2] = 2 (node 2 of sequence 0); expected an earlier node of the same tree");

  auto plain = Manifest::load(kFixture + "/artifact");
  ASSERT_TRUE(plain.ok()) << plain.error().message;
  auto plain_weights = WeightStore::open(*plain, {.source_path = kFixture, .check_source_stamp = false});
  ASSERT_TRUE(plain_weights.ok()) << plain_weights.error().message;
  auto plain_ex = CudaExecutor::create(*plain, *plain_weights, kvPoolConfigFor(*plain, 8), 16, {.progress = false});
  ASSERT_TRUE(plain_ex.ok()) << plain_ex.error().message;
  EXPECT_EQ((*plain_ex)->treeNodes(), 0);
  status = (*plain_ex)->verify(in, logits, accepted, count);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.error().message,
            "verify: the artifact has no verify entry (compile it with kiln-compile --spec-tree)");
}

Tokenizer fixtureTokenizer(int64_t vocab) {
  TokenizerVocab v;
  v.model = TokenizerModel::kByteLevelBpe;
  v.pre = PreTokenizerKind::kGpt2;
  for (int64_t i = 0; i < vocab; ++i) v.tokens.push_back("<" + std::to_string(i) + ">");
  v.token_types.assign(v.tokens.size(), TokenType::kNormal);
  return Tokenizer::create(std::move(v)).take();
}

// An engine over the CUDA executor on the f32 spec plan, batch invariant
// (each row's logits the same in any batch and at any row count, so plain
// and verify rows round alike); null without a GPU.
std::unique_ptr<Engine> cudaEngine(bool batch_invariant = true, const std::string& draft_head = "") {
  auto manifest = Manifest::load(kFixture + "/artifact-spec");
  EXPECT_TRUE(manifest.ok()) << manifest.error().message;
  auto weights = WeightStore::open(*manifest, {.source_path = kFixture, .check_source_stamp = false});
  EXPECT_TRUE(weights.ok()) << weights.error().message;
  CudaExecutorOptions options{.progress = false};
  options.tuning.batch_invariant = batch_invariant;
  auto ex = CudaExecutor::create(*manifest, *weights, kvPoolConfigFor(*manifest, 64), 256, options);
  if (noGpu(ex, "the CUDA engine")) return nullptr;
  const int64_t vocab = (*ex)->vocabSize();
  EngineOptions engine_options;
  engine_options.max_sequences = 8;
  engine_options.prefix_cache = false;
  engine_options.draft_head = draft_head;
  auto engine = Engine::fromBackend(std::make_unique<ExecutorBackend<CudaExecutor>>(ex.take(), "cuda"),
                                    fixtureTokenizer(vocab), 256, engine_options);
  EXPECT_TRUE(engine.ok()) << engine.error().message;
  return engine.ok() ? engine.take() : nullptr;
}

GenerationRequest request(const std::vector<int32_t>& prompt, std::vector<int64_t> widths = {},
                          SpecMethod method = SpecMethod::kNgram) {
  GenerationRequest r;
  r.prompt_tokens = prompt;
  r.sampling.max_tokens = 48;
  r.sampling.ignore_eos = true;
  if (!widths.empty()) {
    r.speculation.method = method;
    r.speculation.tree.widths = std::move(widths);
  }
  return r;
}

std::vector<std::vector<int32_t>> runAll(Engine& engine, const std::vector<GenerationRequest>& requests,
                                         std::vector<int64_t>* ids = nullptr) {
  std::map<int64_t, std::vector<int32_t>> tokens;
  std::vector<int64_t> order;
  for (const GenerationRequest& r : requests) {
    auto id = engine.submit(r, [&](int64_t id, int32_t token, std::string_view) {
      if (token >= 0) tokens[id].push_back(token);
    });
    EXPECT_TRUE(id.ok()) << (id.ok() ? "" : id.error().message);
    if (id.ok()) order.push_back(*id);
  }
  Status status = engine.runUntilIdle();
  EXPECT_TRUE(status.ok()) << (status.ok() ? "" : status.error().message);
  std::vector<std::vector<int32_t>> out;
  for (int64_t id : order) out.push_back(tokens[id]);
  if (ids) *ids = order;
  return out;
}

// Prompts that repeat (n-gram drafts find matches) and one that does not.
const std::vector<std::vector<int32_t>> kEnginePrompts = {
    {1, 10, 20, 30, 40, 10, 20, 30, 40, 10, 20, 30, 40, 10, 20},
    {1, 5, 6, 7, 5, 6, 7, 5, 6, 7, 5, 6},
    {1, 17, 42, 99, 5, 23, 61, 8}};

TEST(CudaVerify, EngineSpeculationKeepsTheGreedyTokens) {
  auto engine = cudaEngine();
  if (!engine) return;
  std::vector<std::vector<int32_t>> plain;
  for (const auto& prompt : kEnginePrompts) plain.push_back(runAll(*engine, {request(prompt)})[0]);
  for (const std::vector<int64_t>& widths : {std::vector<int64_t>{1, 1, 1}, std::vector<int64_t>{2, 2, 1}}) {
    const EngineMetrics before = engine->metrics();
    for (size_t i = 0; i < kEnginePrompts.size(); ++i)
      EXPECT_EQ(runAll(*engine, {request(kEnginePrompts[i], widths)})[0], plain[i])
          << "prompt " << i << ", tree of " << widths.size() << " levels, alone";
    // All of them at once, each beside a plain copy of another.
    std::vector<GenerationRequest> batch;
    for (size_t i = 0; i < kEnginePrompts.size(); ++i) {
      batch.push_back(request(kEnginePrompts[i], widths));
      batch.push_back(request(kEnginePrompts[(i + 1) % kEnginePrompts.size()]));
    }
    const std::vector<std::vector<int32_t>> batched = runAll(*engine, batch);
    for (size_t i = 0; i < kEnginePrompts.size(); ++i) {
      EXPECT_EQ(batched[2 * i], plain[i]) << "prompt " << i << " speculating in a batch";
      EXPECT_EQ(batched[2 * i + 1], plain[(i + 1) % kEnginePrompts.size()]) << "plain prompt in a batch";
    }
    const EngineMetrics after = engine->metrics();
    EXPECT_GT(after.spec_rows, before.spec_rows) << "no verify row carried drafts";
    std::printf("widths of %zu levels: %lld verify rows with drafts, %lld of %lld drafted tokens accepted\n",
                widths.size(), (long long)(after.spec_rows - before.spec_rows),
                (long long)(after.spec_accepted_tokens - before.spec_accepted_tokens),
                (long long)(after.spec_drafted_tokens - before.spec_drafted_tokens));
  }
  const EngineMetrics m = engine->metrics();
  EXPECT_EQ(m.kv_blocks_free + m.kv_blocks_cached, m.kv_blocks_total);
}

// The default kernels (skinny and cuBLASLt choices by row count): a row's
// logits may round differently in a verify batch than alone, so on a model
// with near ties a token may flip. The fixture's prompts have no tie within
// that rounding, so here too every speculative completion equals the plain
// one; a flip means a verify row's logits moved by more than rounding.
TEST(CudaVerify, EngineSpeculationWithDefaultKernelsKeepsTheGreedyTokens) {
  auto engine = cudaEngine(/*batch_invariant=*/false);
  if (!engine) return;
  for (const auto& prompt : kEnginePrompts) {
    const auto plain = runAll(*engine, {request(prompt)})[0];
    for (const std::vector<int64_t>& widths : {std::vector<int64_t>{1, 1, 1}, std::vector<int64_t>{2, 2, 1}})
      EXPECT_EQ(runAll(*engine, {request(prompt, widths)})[0], plain) << "tree of " << widths.size() << " levels";
  }
}

// A Medusa head of random weights over the CUDA executor's hidden states:
// its drafts are mostly rejected, the greedy tokens stay, alone and batched.
TEST(CudaVerify, DraftHeadSpeculationKeepsTheGreedyTokens) {
  const std::string head = spec::testing::writeDraftHead("cuda", 64, 3, 0.1f, 11);
  ASSERT_FALSE(head.empty());
  auto engine = cudaEngine(/*batch_invariant=*/true, head);
  if (!engine) return;
  std::vector<std::vector<int32_t>> plain;
  for (const auto& prompt : kEnginePrompts) plain.push_back(runAll(*engine, {request(prompt)})[0]);
  for (const std::vector<int64_t>& widths : {std::vector<int64_t>{1, 1, 1}, std::vector<int64_t>{2, 2, 1}}) {
    const EngineMetrics before = engine->metrics();
    std::vector<GenerationRequest> batch;
    for (const auto& prompt : kEnginePrompts) batch.push_back(request(prompt, widths, SpecMethod::kDraftHead));
    EXPECT_EQ(runAll(*engine, batch), plain) << "tree of " << widths.size() << " levels";
    const EngineMetrics after = engine->metrics();
    EXPECT_GT(after.spec_drafted_tokens, before.spec_drafted_tokens) << "the head drafted nothing";
    std::printf("draft head, widths of %zu levels: %lld of %lld drafted tokens accepted\n", widths.size(),
                (long long)(after.spec_accepted_tokens - before.spec_accepted_tokens),
                (long long)(after.spec_drafted_tokens - before.spec_drafted_tokens));
  }
}

// A sampled request walks its tree with speculative sampling: its RNG is
// drawn from differently than without speculation, but a seed gives the
// same tokens every time, alone or beside a greedy request.
TEST(CudaVerify, SampledRequestSpeculatesReproducibly) {
  auto engine = cudaEngine();
  if (!engine) return;
  GenerationRequest sampled = request(kEnginePrompts[0], {2, 2, 1});
  sampled.sampling.temperature = 0.7f;
  sampled.sampling.top_k = 20;
  sampled.sampling.seed = 1234;
  const EngineMetrics before = engine->metrics();
  const std::vector<int32_t> first = runAll(*engine, {sampled})[0];
  EXPECT_GT(engine->metrics().spec_rows, before.spec_rows) << "no verify row carried drafts";
  EXPECT_EQ(first.size(), 48u);
  EXPECT_EQ(runAll(*engine, {sampled})[0], first) << "alone, again";
  EXPECT_EQ(runAll(*engine, {sampled, request(kEnginePrompts[1], {1, 1, 1})})[0], first) << "beside a greedy one";
}

}  // namespace
}  // namespace kiln::cuda
