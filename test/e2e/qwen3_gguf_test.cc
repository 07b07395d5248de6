// Qwen3 from a GGUF as llama.cpp names it (general.architecture "qwen3",
// attn_q_norm / attn_k_norm, attention.key_length != hidden / heads), and
// Qwen3-MoE ("qwen3moe": ffn_gate_inp and the stacked ffn_*_exps, the
// expert_* metadata) and Mixtral ("llama" with experts, Q/K rows permuted
// into adjacent rotary pairs), made by test/reference/make_family_ggufs.py
// from tiny-qwen3's, tiny-qwen3-moe's and tiny-mixtral's shapes and
// compiled by kiln-compile (ctest fixtures), run by the CPU executor against
// the float64 reference with llama.cpp's qwen3 semantics: logits within 1e-4
// at every position of a chunked prefill, decode steps and a ragged batch,
// and the greedy continuations identical.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <fstream>

#include "runtime/artifact/manifest.h"
#include "runtime/backend/plan_kv_pool.h"
#include "runtime/cpu/executor/executor.h"
#include "runtime/weights/weight_store.h"

namespace kiln {
namespace {

struct Sequence {
  std::vector<int32_t> tokens;
  std::vector<std::vector<double>> logits;  // reference, [len, vocab]
  BlockTable table{16};
  int64_t done = 0;
};

class FamilyGguf : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    const char* dir = std::getenv("KILN_FAMILY_GGUF_DIR");
    ASSERT_NE(dir, nullptr) << "KILN_FAMILY_GGUF_DIR is not set (ctest sets it to the folder its fixture writes)";
    const std::string root = std::string(dir) + "/" + GetParam();
    auto manifest = Manifest::load(root + "/artifact");
    ASSERT_TRUE(manifest.ok()) << manifest.error().message;
    manifest_ = std::make_unique<Manifest>(manifest.take());
    ASSERT_EQ(manifest_->model.source_format, "gguf");
    auto weights = WeightStore::open(*manifest_);
    ASSERT_TRUE(weights.ok()) << weights.error().message;
    weights_ = std::make_unique<WeightStore>(weights.take());
    auto executor = cpu::CpuExecutor::create(*manifest_, *weights_, kvPoolConfigFor(*manifest_, 16), 24);
    ASSERT_TRUE(executor.ok()) << executor.error().message;
    executor_ = executor.take();
    std::ifstream file(root + "/reference.json");
    reference_ = nlohmann::json::parse(file);
  }

  Sequence sequence(const std::string& name) {
    Sequence s;
    s.tokens = reference_["sequences"][name]["tokens"].get<std::vector<int32_t>>();
    s.logits = reference_["sequences"][name]["logits"].get<std::vector<std::vector<double>>>();
    s.table = BlockTable(manifest_->kv_cache.page_size);
    return s;
  }

  // One forward over (sequence, count) chunks; each chunk's last logits.
  std::vector<std::vector<float>> run(const std::vector<std::pair<Sequence*, int64_t>>& chunks) {
    std::vector<int32_t> tokens, positions, slots, query_start{0}, kv_lens, tables;
    int max_blocks = 0;
    for (auto [s, count] : chunks) {
      EXPECT_TRUE(s->table.append(executor_->blockPool(), count).ok());
      max_blocks = std::max(max_blocks, int(s->table.blocks().size()));
    }
    for (auto [s, count] : chunks) {
      for (int64_t p = s->done; p < s->done + count; ++p) {
        tokens.push_back(s->tokens[size_t(p)]);
        positions.push_back(int32_t(p));
        slots.push_back(int32_t(*s->table.slot(p)));
      }
      s->done += count;
      query_start.push_back(int32_t(tokens.size()));
      kv_lens.push_back(int32_t(s->done));
      auto blocks = s->table.blocks();
      tables.insert(tables.end(), blocks.begin(), blocks.end());
      tables.resize(tables.size() + size_t(max_blocks) - blocks.size(), 0);
    }
    const int64_t vocab = executor_->vocabSize();
    std::vector<float> logits(chunks.size() * size_t(vocab));
    Status status = executor_->forward({tokens, positions, slots, tables, max_blocks, query_start, kv_lens}, logits);
    EXPECT_TRUE(status.ok()) << status.error().message;
    std::vector<std::vector<float>> out;
    for (size_t b = 0; b < chunks.size(); ++b)
      out.emplace_back(logits.begin() + b * vocab, logits.begin() + (b + 1) * vocab);
    return out;
  }

  double check(const std::vector<std::pair<Sequence*, int64_t>>& chunks) {
    auto logits = run(chunks);
    double worst = 0;
    for (size_t b = 0; b < chunks.size(); ++b) {
      const std::vector<double>& ref = chunks[b].first->logits[size_t(chunks[b].first->done - 1)];
      for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::fabs(double(logits[b][i]) - ref[i]));
    }
    EXPECT_LE(worst, 1e-4);
    return worst;
  }

  std::unique_ptr<Manifest> manifest_;
  std::unique_ptr<WeightStore> weights_;
  std::unique_ptr<cpu::CpuExecutor> executor_;
  nlohmann::json reference_;
};

TEST_P(FamilyGguf, LogitsMatchTheReference) {
  EXPECT_EQ(manifest_->kv_cache.head_dim, 64);
  Sequence a = sequence("a"), b = sequence("b");
  double worst = check({{&a, 20}});
  worst = std::max(worst, check({{&a, 3}, {&b, 16}}));
  while (a.done < int64_t(a.tokens.size())) {
    std::vector<std::pair<Sequence*, int64_t>> chunks{{&a, 1}};
    if (b.done < int64_t(b.tokens.size())) chunks.push_back({&b, 1});
    worst = std::max(worst, check(chunks));
  }
  std::printf("%s GGUF: max |logits - float64 reference| = %.3g\n", GetParam(), worst);
}

TEST_P(FamilyGguf, GreedyContinuationsMatch) {
  ASSERT_GE(reference_["greedy"].size(), 3u);
  for (const auto& g : reference_["greedy"]) {
    Sequence s;
    s.tokens = g["prompt"].get<std::vector<int32_t>>();
    s.table = BlockTable(manifest_->kv_cache.page_size);
    const auto want = g["tokens"].get<std::vector<int32_t>>();
    std::vector<int32_t> got;
    auto logits = run({{&s, int64_t(s.tokens.size())}});
    for (size_t step = 0; step < want.size(); ++step) {
      const int32_t next = int32_t(std::max_element(logits[0].begin(), logits[0].end()) - logits[0].begin());
      got.push_back(next);
      if (step + 1 == want.size()) break;
      s.tokens.push_back(next);
      logits = run({{&s, 1}});
    }
    EXPECT_EQ(got, want);
    s.table.release(executor_->blockPool());
  }
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyGguf, ::testing::Values("tiny-qwen3", "tiny-qwen3-moe", "tiny-mixtral"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

}  // namespace
}  // namespace kiln
