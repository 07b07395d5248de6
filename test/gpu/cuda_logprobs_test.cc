// Log probabilities through the engine on the CUDA executor (tiny-llama,
// the f32 plan artifact-spec, device argmax on): a request that asks for
// them takes its logits row back to the host while the others in its batch
// would take the on-device argmax; every request's tokens equal those of a
// run without logprobs, and the logprobs equal a log-softmax (in double,
// here) of the CPU executor's logits for the same prompt and tokens.
// Without a GPU the test checks the CUDA executor's error and stops.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <vector>

#include "runtime/backend/backend.h"
#include "runtime/backend/plan_kv_pool.h"
#include "runtime/cpu/executor/executor.h"
#include "runtime/cuda/executor/executor.h"
#include "runtime/engine/engine.h"
#include "runtime/tokenizer/tokenizer.h"
#include "test/source_root.h"

namespace kiln::cuda {
namespace {

const std::string kFixture = checkoutPath("test/fixtures/tiny-llama");
constexpr int kPage = 16;
constexpr int kBlocks = 8;  // one sequence's 128 keys in blocks 0..7

Tokenizer numberTokenizer(int64_t vocab) {
  TokenizerVocab v;
  v.model = TokenizerModel::kByteLevelBpe;
  v.pre = PreTokenizerKind::kGpt2;
  for (int64_t i = 0; i < vocab; ++i) v.tokens.push_back("<" + std::to_string(i) + ">");
  v.token_types.assign(v.tokens.size(), TokenType::kNormal);
  return Tokenizer::create(std::move(v)).take();
}

// The CPU executor's log-softmax rows before each of `generated`: the
// prompt in one forward, then each generated token but the last alone.
std::vector<std::vector<double>> cpuLogSoftmax(const std::vector<int32_t>& prompt,
                                               const std::vector<int32_t>& generated) {
  auto manifest = Manifest::load(kFixture + "/artifact-spec");
  auto weights = WeightStore::open(*manifest, {.source_path = kFixture, .check_source_stamp = false});
  auto ex = cpu::CpuExecutor::create(*manifest, *weights, kvPoolConfigFor(*manifest, 64), 128);
  EXPECT_TRUE(ex.ok()) << ex.error().message;
  std::vector<int32_t> tokens = prompt;
  std::vector<int32_t> tables(kBlocks);
  std::iota(tables.begin(), tables.end(), 0);
  std::vector<float> logits(size_t((*ex)->vocabSize()));
  std::vector<std::vector<double>> rows;
  int32_t done = 0;
  for (size_t i = 0; i < generated.size(); ++i) {
    std::vector<int32_t> ids(tokens.begin() + done, tokens.end()), positions(ids.size());
    std::iota(positions.begin(), positions.end(), done);
    std::vector<int32_t> slots = positions;  // blocks 0.. in order: slot == position
    std::vector<int32_t> query_start = {0, int32_t(ids.size())}, kv_lens = {int32_t(tokens.size())};
    Status s = (*ex)->forward({ids, positions, slots, tables, kBlocks, query_start, kv_lens}, logits);
    EXPECT_TRUE(s.ok()) << s.error().message;
    const double max = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (float x : logits) sum += std::exp(double(x) - max);
    std::vector<double> row;
    for (float x : logits) row.push_back(double(x) - max - std::log(sum));
    rows.push_back(std::move(row));
    done = int32_t(tokens.size());
    tokens.push_back(generated[i]);
  }
  return rows;
}

TEST(CudaLogprobs, HostRowsBesideDeviceArgmaxMatchTheCpuExecutor) {
  auto manifest = Manifest::load(kFixture + "/artifact-spec");
  ASSERT_TRUE(manifest.ok()) << manifest.error().message;
  auto weights = WeightStore::open(*manifest, {.source_path = kFixture, .check_source_stamp = false});
  ASSERT_TRUE(weights.ok()) << weights.error().message;
  CudaExecutorOptions options;
  options.progress = false;
  options.tuning.batch_invariant = true;
  auto ex = CudaExecutor::create(*manifest, *weights, kvPoolConfigFor(*manifest, 64), 256, options);
  if (!ex.ok()) {
    EXPECT_NE(ex.error().message.find("no CUDA backend"), std::string::npos) << ex.error().message;
    std::printf("no GPU: checked the error; the logprobs run needs the GPU machine\n");
    return;
  }
  const int64_t vocab = (*ex)->vocabSize();
  EngineOptions engine_options;
  engine_options.max_sequences = 8;
  engine_options.prefix_cache = false;
  auto engine = Engine::fromBackend(
      std::make_unique<ExecutorBackend<CudaExecutor>>(ex.take(), "cuda", /*greedy_on_device=*/true),
      numberTokenizer(vocab), 256, engine_options);
  ASSERT_TRUE(engine.ok()) << engine.error().message;

  const std::vector<std::vector<int32_t>> prompts = {{1, 17, 42, 99, 5, 23}, {1, 5, 6, 7, 5, 6}, {1, 8, 8, 30}};
  auto run = [&](int with_logprobs, std::map<int64_t, std::vector<sampling::TokenLogprobs>>* logprobs) {
    std::map<int64_t, std::vector<int32_t>> tokens;
    std::vector<int64_t> ids;
    for (size_t i = 0; i < prompts.size(); ++i) {
      GenerationRequest r;
      r.prompt_tokens = prompts[i];
      r.sampling.max_tokens = 12;
      r.sampling.ignore_eos = true;
      if (int(i) == with_logprobs) r.sampling.logprobs = 5;
      auto id = (*engine)->submit(
          r, [&](int64_t id, int32_t token, std::string_view) { if (token >= 0) tokens[id].push_back(token); },
          [&](int64_t id, const sampling::TokenLogprobs& lp) { (*logprobs)[id].push_back(lp); });
      EXPECT_TRUE(id.ok());
      ids.push_back(*id);
    }
    EXPECT_TRUE((*engine)->runUntilIdle().ok());
    std::vector<std::vector<int32_t>> out;
    for (int64_t id : ids) out.push_back(tokens[id]);
    return std::make_pair(out, ids);
  };
  std::map<int64_t, std::vector<sampling::TokenLogprobs>> none, with;
  const auto plain = run(-1, &none).first;
  EXPECT_TRUE(none.empty());
  const auto [tokens, ids] = run(0, &with);
  EXPECT_EQ(tokens, plain);  // the device argmax rows and the host row agree
  ASSERT_EQ(with.size(), 1u);
  const std::vector<sampling::TokenLogprobs>& got = with[ids[0]];
  ASSERT_EQ(got.size(), tokens[0].size());
  const auto reference = cpuLogSoftmax(prompts[0], tokens[0]);
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].token, tokens[0][i]);
    worst = std::max(worst, std::abs(got[i].logprob - reference[i][size_t(got[i].token)]));
    ASSERT_EQ(got[i].top.size(), 5u);
    EXPECT_EQ(got[i].top[0].first, got[i].token) << "greedy: the chosen token is the most likely";
    for (const auto& [id, logprob] : got[i].top) worst = std::max(worst, std::abs(logprob - reference[i][size_t(id)]));
  }
  std::printf("logprobs on CUDA vs the CPU executor's log-softmax: max |difference| %.2e\n", worst);
  EXPECT_LT(worst, 2e-3);
}

}  // namespace
}  // namespace kiln::cuda
