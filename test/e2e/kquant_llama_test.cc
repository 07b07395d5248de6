// A GGUF whose every matrix is a K-quant (q4_k, q5_k, q6_k: the embedding,
// merged and unmerged projections, the MLP and the output head), imported,
// compiled by kiln-compile and run on the CPU backend. The reference is a
// float64 numpy forward pass over gguf-py's decoding of the same file
// (test/reference/make_kquant_llama.py, run by a ctest fixture that also
// compiles the artifact). Each sequence is prefilled, then decoded token by
// token, and every step's last-token logits are checked:
//  - with f32 activations (dequantize + sgemm), to f32 rounding;
//  - with the quantized dots (8-bit activation blocks, the default), to the
//    few 1e-4 in cosine that 8-bit activations cost;
// and the two sequences batched together get their solo logits to the bit.
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <numeric>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/artifact/manifest.h"
#include "test/e2e/logit_metrics.h"
#include "runtime/backend/plan_kv_pool.h"
#include "runtime/cpu/executor/executor.h"
#include "runtime/cpu/kernels/linear.h"
#include "runtime/kv/block_pool.h"
#include "runtime/weights/weight_store.h"

namespace kiln {
namespace {

using e2e::argmax;
using e2e::cosine;
using e2e::relativeDiff;

struct Sequence {
  std::string name;
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;  // [len, vocab], float64 rounded to f32
};

class KQuantLlama : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* dir = std::getenv("KILN_KQUANT_LLAMA_DIR");
    if (!dir) return;  // SetUp fails each test, saying so
    auto manifest = Manifest::load(std::string(dir) + "/artifact");
    if (!manifest.ok()) {
      setup_error_ = manifest.error().message;
      return;
    }
    manifest_ = new Manifest(manifest.take());
    auto weights = WeightStore::open(*manifest_);
    if (!weights.ok()) {
      setup_error_ = weights.error().message;
      return;
    }
    weights_ = new WeightStore(weights.take());
    auto executor =
        cpu::CpuExecutor::create(*manifest_, *weights_, kvPoolConfigFor(*manifest_, 64), 64);
    if (!executor.ok()) {
      setup_error_ = executor.error().message;
      return;
    }
    executor_ = executor.take().release();
    std::ifstream in(std::string(dir) + "/reference.json");
    nlohmann::json reference = nlohmann::json::parse(in);
    for (auto& [name, seq] : reference["sequences"].items())
      sequences_.push_back({name, seq["tokens"].get<std::vector<int32_t>>(),
                            seq["logits"].get<std::vector<std::vector<float>>>()});
  }
  static void TearDownTestSuite() {
    delete executor_;
    delete weights_;
    delete manifest_;
    executor_ = nullptr;
    weights_ = nullptr;
    manifest_ = nullptr;
  }
  void SetUp() override {
    if (!std::getenv("KILN_KQUANT_LLAMA_DIR"))
      FAIL() << "KILN_KQUANT_LLAMA_DIR is not set (ctest sets it to the folder its fixtures "
                "write the model, reference and artifact to)";
    ASSERT_TRUE(setup_error_.empty()) << setup_error_;
    ASSERT_EQ(sequences_.size(), 2u);
  }

  // Feeds tokens[begin, end) of one sequence; returns the last one's logits.
  std::vector<float> feed(BlockTable& table, const std::vector<int32_t>& tokens, int64_t begin,
                          int64_t end) {
    BlockPool& pool = executor_->blockPool();
    EXPECT_TRUE(table.append(pool, end - table.numTokens()).ok());
    std::vector<int32_t> ids(tokens.begin() + begin, tokens.begin() + end);
    std::vector<int32_t> positions(size_t(end - begin)), slots(size_t(end - begin));
    std::iota(positions.begin(), positions.end(), int32_t(begin));
    EXPECT_TRUE(table.slots(begin, slots).ok());
    std::vector<int32_t> blocks(table.blocks().begin(), table.blocks().end());
    std::vector<int32_t> query_start = {0, int32_t(end - begin)}, kv_lens = {int32_t(end)};
    BatchInputs in{ids, positions, slots, blocks, int(blocks.size()), query_start, kv_lens};
    std::vector<float> logits(size_t(executor_->vocabSize()));
    Status status = executor_->forward(in, logits);
    EXPECT_TRUE(status.ok()) << (status.ok() ? "" : status.error().message);
    return logits;
  }

  // One forward over several sequences: tokens [begin, end) of each, in
  // order; returns each sequence's last-token logits, [B, vocab].
  struct Chunk {
    const Sequence* seq;
    BlockTable* table;
    int64_t begin, end;
  };
  std::vector<float> feedBatch(const std::vector<Chunk>& chunks) {
    BlockPool& pool = executor_->blockPool();
    std::vector<int32_t> ids, positions, slots, query_start{0}, kv_lens, tables;
    int max_blocks = 0;
    for (const Chunk& c : chunks) {
      EXPECT_TRUE(c.table->append(pool, c.end - c.table->numTokens()).ok());
      max_blocks = std::max(max_blocks, int(c.table->blocks().size()));
    }
    for (const Chunk& c : chunks) {
      for (int64_t p = c.begin; p < c.end; ++p) {
        ids.push_back(c.seq->tokens[size_t(p)]);
        positions.push_back(int32_t(p));
        slots.push_back(int32_t(*c.table->slot(p)));
      }
      query_start.push_back(int32_t(ids.size()));
      kv_lens.push_back(int32_t(c.end));
      auto blocks = c.table->blocks();
      tables.insert(tables.end(), blocks.begin(), blocks.end());
      tables.resize(tables.size() + size_t(max_blocks) - blocks.size(), 0);
    }
    BatchInputs in{ids, positions, slots, tables, max_blocks, query_start, kv_lens};
    std::vector<float> logits(chunks.size() * size_t(executor_->vocabSize()));
    Status status = executor_->forward(in, logits);
    EXPECT_TRUE(status.ok()) << (status.ok() ? "" : status.error().message);
    return logits;
  }

  // Prefills the first half of each sequence, decodes the rest one token at
  // a time, and calls check(kiln, reference, where) at every step.
  template <typename Check>
  int forEachStep(const Check& check) {
    int steps = 0;
    for (const Sequence& seq : sequences_) {
      BlockTable table(manifest_->kv_cache.page_size);
      const int64_t len = int64_t(seq.tokens.size()), prompt = len / 2;
      for (int64_t end = prompt; end <= len; ++end) {
        std::vector<float> mine = feed(table, seq.tokens, end == prompt ? 0 : end - 1, end);
        check(mine, seq.logits[size_t(end - 1)], seq.name + " @" + std::to_string(end - 1));
        ++steps;
      }
      table.release(executor_->blockPool());
    }
    return steps;
  }

  static inline Manifest* manifest_ = nullptr;
  static inline WeightStore* weights_ = nullptr;
  static inline cpu::CpuExecutor* executor_ = nullptr;
  static inline std::vector<Sequence> sequences_;
  static inline std::string setup_error_;
};

TEST_F(KQuantLlama, WeightsBindAsKQuants) {
  int kquants = 0;
  for (const BoundWeight& w : weights_->weights())
    if (w.kernel_ready) kquants += isKQuant(w.type);
  // Per layer: merged QKV or q, k, v; o; merged gate/up; down. Plus the
  // embedding and the head.
  EXPECT_GE(kquants, 2 + 4 + 6);
}

TEST_F(KQuantLlama, F32ActivationsMatchExactReference) {
  cpu::setQuantizedWeightPath(cpu::LinearPath::kDequantSgemm);
  double worst = 0.0;
  const int steps = forEachStep([&](std::span<const float> kiln, std::span<const float> ref,
                                    const std::string& where) {
    worst = std::max(worst, relativeDiff(kiln, ref));
    EXPECT_LT(relativeDiff(kiln, ref), 1e-5) << where;
    EXPECT_EQ(argmax(kiln), argmax(ref)) << where;
  });
  cpu::setQuantizedWeightPath(cpu::LinearPath::kQuantDot);
  std::printf("f32 activations: worst relative logit difference %.2g over %d steps\n", worst, steps);
  EXPECT_EQ(steps, 12 + 5);  // positions 9..20 of a, 3..7 of b
}

TEST_F(KQuantLlama, QuantizedDotsStayCloseToExactReference) {
  cpu::setQuantizedWeightPath(cpu::LinearPath::kQuantDot);
  double worst = 1.0;
  const int steps = forEachStep([&](std::span<const float> kiln, std::span<const float> ref,
                                    const std::string& where) {
    const double c = cosine(kiln, ref);
    worst = std::min(worst, c);
    EXPECT_GE(c, 0.999) << where;
    EXPECT_LT(relativeDiff(kiln, ref), 0.05) << where;
  });
  std::printf("8-bit activations: worst cosine to the exact reference %.6f over %d steps\n", worst,
              steps);
  EXPECT_EQ(steps, 12 + 5);  // positions 9..20 of a, 3..7 of b
}

// Batch invariance: each activation row is quantized on its own and each
// dot sums in a fixed order, so two sequences prefilled, then decoded,
// together get the logits, to the bit, that each gets alone.
TEST_F(KQuantLlama, RaggedBatchGivesEachSequenceItsSoloLogits) {
  const Sequence& a = sequences_[0];
  const Sequence& b = sequences_[1];
  const int64_t vocab = executor_->vocabSize();
  BlockPool& pool = executor_->blockPool();
  // Alone: a's tokens [0, 10) then 10; b's [0, 4) then 4.
  std::vector<std::vector<float>> solo;
  for (const Sequence* seq : {&a, &b}) {
    const int64_t prompt = seq == &a ? 10 : 4;
    BlockTable table(manifest_->kv_cache.page_size);
    solo.push_back(feed(table, seq->tokens, 0, prompt));
    solo.push_back(feed(table, seq->tokens, prompt, prompt + 1));
    table.release(pool);
  }
  BlockTable ta(manifest_->kv_cache.page_size), tb(manifest_->kv_cache.page_size);
  const std::vector<float> prefill = feedBatch({{&a, &ta, 0, 10}, {&b, &tb, 0, 4}});
  const std::vector<float> decode = feedBatch({{&a, &ta, 10, 11}, {&b, &tb, 4, 5}});
  ta.release(pool);
  tb.release(pool);
  const auto row = [&](const std::vector<float>& rows, int i) {
    return std::vector<float>(rows.begin() + i * vocab, rows.begin() + (i + 1) * vocab);
  };
  EXPECT_EQ(row(prefill, 0), solo[0]) << "a's prefill";
  EXPECT_EQ(row(decode, 0), solo[1]) << "a's decode step";
  EXPECT_EQ(row(prefill, 1), solo[2]) << "b's prefill";
  EXPECT_EQ(row(decode, 1), solo[3]) << "b's decode step";
}

}  // namespace
}  // namespace kiln
