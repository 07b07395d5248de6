// The megakernel's task graph (runtime/artifact/megakernel_graph.h) run by
// the CPU task interpreter against the step-by-step executor on the same
// plan and weights: prefill and greedy decode of a ragged batch, every
// forward in many random task orders, must give bit-identical logits (each
// task runs the same kernel on its tile, and every output element is the
// same arithmetic). And the counters are necessary: dropping any one wait
// the compiler emits lets some order read a value before it is written or
// after it was overwritten, which the interpreter reports.
#include "runtime/cpu/executor/executor.h"
#include "test/source_root.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>

#include "runtime/artifact/megakernel_graph.h"
#include "runtime/backend/plan_kv_pool.h"

namespace kiln::cpu {
namespace {

// One executor with its sequences' block tables.
struct Runner {
  std::unique_ptr<CpuExecutor> executor;
  std::vector<BlockTable> tables;
};

class TaskInterpreterTest : public ::testing::Test {
 protected:
  // Loads `artifact` and its weights (from `weights_dir`, or the manifest's
  // model.source when empty) into two executors.
  void open(const std::string& artifact, const std::string& weights_dir) {
    auto manifest = Manifest::load(artifact);
    ASSERT_TRUE(manifest.ok()) << manifest.error().message;
    manifest_ = std::make_unique<Manifest>(manifest.take());
    WeightStoreOptions options;
    if (!weights_dir.empty()) options = {.source_path = weights_dir, .check_source_stamp = false};
    auto weights = WeightStore::open(*manifest_, options);
    ASSERT_TRUE(weights.ok()) << weights.error().message;
    weights_ = std::make_unique<WeightStore>(weights.take());
    exact_ = true;
    for (const Step& step : forward().steps)
      if (step.kind == StepKind::kGemm) {
        const std::string& type = step.as<GemmParams>().weight_type;
        exact_ = exact_ && type != "f32" && type != "f16" && type != "bf16" && type != "fp8e4m3";
      }
    for (Runner* r : {&steps_, &tasks_}) {
      auto executor = CpuExecutor::create(*manifest_, *weights_, kvPoolConfigFor(*manifest_, 16), /*max_tokens=*/32);
      ASSERT_TRUE(executor.ok()) << executor.error().message;
      r->executor = executor.take();
    }
  }

  const Entry& forward() const { return *manifest_->findEntry("forward"); }

  // The batch of `chunks` (sequence index, tokens) for `r`, growing its
  // block tables; `next` holds each sequence's position.
  struct Batch {
    std::vector<int32_t> tokens, positions, slots, query_start{0}, kv_lens, tables;
    BatchInputs in;
  };
  void makeBatch(Runner& r, const std::vector<std::pair<size_t, std::vector<int32_t>>>& chunks,
                 const std::vector<int64_t>& next, Batch& batch) {
    int max_blocks = 0;
    for (const auto& [seq, tokens] : chunks) {
      while (r.tables.size() <= seq) r.tables.emplace_back(manifest_->kv_cache.page_size);
      Status grown = r.tables[seq].append(r.executor->blockPool(), int64_t(tokens.size()));
      ASSERT_TRUE(grown.ok()) << grown.error().message;
      max_blocks = std::max(max_blocks, int(r.tables[seq].blocks().size()));
    }
    for (const auto& [seq, tokens] : chunks) {
      for (size_t i = 0; i < tokens.size(); ++i) {
        const int64_t p = next[seq] + int64_t(i);
        batch.tokens.push_back(tokens[i]);
        batch.positions.push_back(int32_t(p));
        batch.slots.push_back(int32_t(*r.tables[seq].slot(p)));
      }
      batch.query_start.push_back(int32_t(batch.tokens.size()));
      batch.kv_lens.push_back(int32_t(next[seq] + int64_t(tokens.size())));
      auto blocks = r.tables[seq].blocks();
      batch.tables.insert(batch.tables.end(), blocks.begin(), blocks.end());
      batch.tables.resize(batch.tables.size() + size_t(max_blocks) - blocks.size(), 0);
    }
    batch.in.tokens = batch.tokens;
    batch.in.positions = batch.positions;
    batch.in.slot_mapping = batch.slots;
    batch.in.block_tables = batch.tables;
    batch.in.query_start = batch.query_start;
    batch.in.kv_lens = batch.kv_lens;
    batch.in.max_blocks = max_blocks;
  }

  // Prefills `prompts` as one ragged batch, then decodes `decode_steps`
  // greedy tokens for all of them; every forward runs step by step once and
  // as tasks in `orders` random orders, whose logits must equal it bit for
  // bit. Returns the number of forwards compared.
  int compareGeneration(const MegakernelPlan& plan, const std::vector<std::vector<int32_t>>& prompts,
                        int decode_steps, int orders) {
    const int64_t vocab = steps_.executor->vocabSize();
    std::vector<std::pair<size_t, std::vector<int32_t>>> chunks;
    for (size_t s = 0; s < prompts.size(); ++s) chunks.push_back({s, prompts[s]});
    std::vector<int64_t> next(prompts.size(), 0);
    int compared = 0;
    for (int step = 0; step <= decode_steps; ++step) {
      Batch a, b;
      makeBatch(steps_, chunks, next, a);
      makeBatch(tasks_, chunks, next, b);
      if (::testing::Test::HasFatalFailure()) return compared;
      std::vector<float> expected(prompts.size() * size_t(vocab)), got(expected.size());
      Status ran = steps_.executor->forward(a.in, expected);
      EXPECT_TRUE(ran.ok()) << ran.error().message;
      for (int order = 0; order < orders; ++order) {
        // Each order appends the same keys and values at the same slots.
        const uint64_t seed = uint64_t(step) * 1000 + uint64_t(order);
        Status tasked = tasks_.executor->forwardTasks(b.in, got, plan, seed);
        EXPECT_TRUE(tasked.ok()) << tasked.error().message;
        if (!tasked.ok()) return compared;
        if (exact_) {
          EXPECT_EQ(0, std::memcmp(expected.data(), got.data(), expected.size() * 4))
              << "forward " << step << ", order seed " << seed << ": logits differ from the step-by-step executor";
        } else {
          EXPECT_LE(relativeDiff(expected, got), 1e-6)
              << "forward " << step << ", order seed " << seed << ": logits differ from the step-by-step executor";
        }
      }
      ++compared;
      for (size_t s = 0; s < prompts.size(); ++s) {
        next[s] += int64_t(chunks[s].second.size());
        const float* row = expected.data() + s * size_t(vocab);
        chunks[s].second = {int32_t(std::max_element(row, row + vocab) - row)};
      }
    }
    return compared;
  }

  // Runs one prefill of `prompts` as tasks with `plan` in up to `orders`
  // orders; the first error, or "" when every order ran.
  std::string firstError(const MegakernelPlan& plan, const std::vector<std::vector<int32_t>>& prompts, int orders) {
    const int64_t vocab = steps_.executor->vocabSize();
    std::vector<std::pair<size_t, std::vector<int32_t>>> chunks;
    for (size_t s = 0; s < prompts.size(); ++s) chunks.push_back({s, prompts[s]});
    std::vector<int64_t> next(prompts.size(), 0);
    Batch a, b;
    releaseTables();
    makeBatch(steps_, chunks, next, a);
    makeBatch(tasks_, chunks, next, b);
    std::vector<float> expected(prompts.size() * size_t(vocab)), got(expected.size());
    Status ran = steps_.executor->forward(a.in, expected);
    if (!ran.ok()) return "step-by-step: " + ran.error().message;
    std::string error;
    for (int order = 0; order < orders && error.empty(); ++order) {
      Status tasked = tasks_.executor->forwardTasks(b.in, got, plan, uint64_t(order));
      if (!tasked.ok()) error = tasked.error().message;
      else if (exact_ ? std::memcmp(expected.data(), got.data(), expected.size() * 4) != 0
                      : relativeDiff(expected, got) > 1e-6)
        error = "logits differ";
    }
    releaseTables();
    return error;
  }

  // Gives every sequence's blocks back to its executor's pool.
  void releaseTables() {
    for (Runner* r : {&steps_, &tasks_}) {
      for (BlockTable& t : r->tables) t.release(r->executor->blockPool());
      r->tables.clear();
    }
  }

  // Max |a - b| over the logits, relative to their scale (max |a|, at least 1).
  static double relativeDiff(const std::vector<float>& a, const std::vector<float>& b) {
    double scale = 1.0, diff = 0.0;
    for (size_t i = 0; i < a.size(); ++i) {
      scale = std::max(scale, double(std::fabs(a[i])));
      diff = std::max(diff, double(std::fabs(a[i] - b[i])));
    }
    return diff / scale;
  }

  std::unique_ptr<Manifest> manifest_;
  std::unique_ptr<WeightStore> weights_;
  // Block-quantized weights: a tile's outputs are the whole GEMM's integer
  // dots, bit for bit. Float weights go through OpenBLAS sgemm, whose
  // kernels for a narrower N block the sums differently: within 1e-6.
  bool exact_ = true;
  Runner steps_, tasks_;
};

const std::vector<std::vector<int32_t>> kPrompts = {{1, 17, 42, 99, 5}, {7, 3, 64}, {120, 2, 2, 8, 31, 77, 9}};

TEST_F(TaskInterpreterTest, TinyLlamaTaskOrdersGiveTheStepByStepLogits) {
  const std::string fixture = checkoutPath("test/fixtures/tiny-llama");
  open(fixture + "/artifact", fixture);
  ASSERT_FALSE(HasFatalFailure());
  // Tiles of 64 and of 48 (a narrower last tile); batches of 3 in 4 slots.
  for (int64_t tile : {64, 48}) {
    auto plan = planMegakernel(forward(), {.max_batch = 4, .tile = tile});
    ASSERT_TRUE(plan.ok()) << plan.error().message;
    releaseTables();
    EXPECT_EQ(compareGeneration(*plan, kPrompts, /*decode_steps=*/5, /*orders=*/8), 6) << "tile " << tile;
  }
}

TEST_F(TaskInterpreterTest, QuantizedWeightsTaskOrdersGiveTheStepByStepLogits) {
  const std::string fixture = checkoutPath("test/fixtures/tiny-llama");
  open(fixture + "/artifact-int8", fixture);
  ASSERT_FALSE(HasFatalFailure());
  auto plan = planMegakernel(forward(), {.max_batch = 4, .tile = 32});
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_EQ(compareGeneration(*plan, kPrompts, /*decode_steps=*/3, /*orders=*/6), 4);
}

// SmolLM2-135M (q4_1/q8_0 GGUF) when the e2e fixture compiled it.
TEST_F(TaskInterpreterTest, SmolLm2TaskOrdersGiveTheStepByStepLogits) {
  const char* artifact = std::getenv("KILN_SMOLLM2_ARTIFACT");
  if (!artifact || !*artifact) GTEST_SKIP() << "KILN_SMOLLM2_ARTIFACT is not set (ctest sets it)";
  open(artifact, "");
  ASSERT_FALSE(HasFatalFailure());
  auto plan = planMegakernel(forward(), {.max_batch = 8, .tile = 64});
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_EQ(compareGeneration(*plan, {{1, 9906, 28, 253}, {1, 504, 3458}}, /*decode_steps=*/3, /*orders=*/3), 4);
}

// Every wait the compiler emits is needed: with the waits of one step on
// one counter dropped, some order reads a value too early or too late.
TEST_F(TaskInterpreterTest, EveryDroppedWaitIsCaught) {
  const std::string fixture = checkoutPath("test/fixtures/tiny-llama");
  open(fixture + "/artifact", fixture);
  ASSERT_FALSE(HasFatalFailure());
  auto plan = planMegakernel(forward(), {.max_batch = 3, .tile = 64});
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  ASSERT_EQ(firstError(*plan, kPrompts, 4), "");
  // Each (step, counter) pair some task of the step waits on.
  std::set<std::pair<int64_t, int64_t>> waits;
  for (const MegakernelTask& t : plan->tasks)
    for (const MegakernelWait& w : t.waits) waits.insert({t.step, w.counter});
  ASSERT_GT(waits.size(), forward().steps.size() - 2);
  for (auto [step, counter] : waits) {
    MegakernelPlan mutated = *plan;
    for (MegakernelTask& t : mutated.tasks)
      if (t.step == step)
        std::erase_if(t.waits, [&](const MegakernelWait& w) { return w.counter == counter; });
    const std::string error = firstError(mutated, kPrompts, 40);
    EXPECT_NE(error, "") << "step " << step << " (" << stepKindName(forward().steps[size_t(step)].kind)
                         << ") ran 40 orders without its wait on counter " << counter << " and nothing went wrong";
  }
}

TEST_F(TaskInterpreterTest, ReadOfAnUnfinishedTileNamesTheTaskAndValue) {
  const std::string fixture = checkoutPath("test/fixtures/tiny-llama");
  open(fixture + "/artifact", fixture);
  ASSERT_FALSE(HasFatalFailure());
  auto plan = planMegakernel(forward(), {.max_batch = 3, .tile = 64});
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  // The o_proj tiles of layer 0 (the first gemm after attention) lose their
  // wait on the attention tasks and are listed first.
  int64_t attention = -1, o_proj = -1;
  for (size_t s = 0; s < forward().steps.size() && o_proj < 0; ++s) {
    if (forward().steps[s].kind == StepKind::kPagedAttention) attention = int64_t(s);
    else if (attention >= 0 && forward().steps[s].kind == StepKind::kGemm) o_proj = int64_t(s);
  }
  ASSERT_GE(o_proj, 0);
  MegakernelPlan mutated = *plan;
  for (MegakernelTask& t : mutated.tasks)
    if (t.step == o_proj) t.waits.clear();
  const std::string error = firstError(mutated, kPrompts, 40);
  EXPECT_NE(error.find(fmt::format("gemm step {}", o_proj)), std::string::npos) << error;
  EXPECT_NE(error.find("before any task wrote it"), std::string::npos) << error;
}

}  // namespace
}  // namespace kiln::cpu
