// Families from GGUFs as llama.cpp names them, made by
// test/reference/make_family_ggufs.py and compiled by kiln-compile (ctest
// fixtures): Qwen3 (general.architecture "qwen3", attn_q_norm /
// attn_k_norm, attention.key_length != hidden / heads), Qwen3-MoE
// ("qwen3moe": ffn_gate_inp and the stacked ffn_*_exps, the expert_*
// metadata), Mixtral ("llama" with experts, Q/K rows permuted into adjacent
// rotary pairs) and Gemma 3 ("gemma3": norms stored with their 1 added,
// sliding_window_pattern, q scaled by key_length^-1/2), from tiny-qwen3's,
// tiny-qwen3-moe's, tiny-mixtral's and tiny-gemma3's weights. The CPU
// executor against the float64 reference with llama.cpp's semantics of
// each: logits within 1e-4 at every position of a chunked prefill, decode
// steps and a ragged batch, and the greedy continuations identical.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <fstream>

#include "test/e2e/artifact_runner.h"

namespace kiln {
namespace {

using e2e::ArtifactRunner;

struct Sequence : e2e::Sequence {
  std::vector<std::vector<double>> logits;  // reference, [len, vocab]
};

class FamilyGguf : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    const char* dir = std::getenv("KILN_FAMILY_GGUF_DIR");
    ASSERT_NE(dir, nullptr) << "KILN_FAMILY_GGUF_DIR is not set (ctest sets it to the folder its fixture writes)";
    const std::string root = std::string(dir) + "/" + GetParam();
    auto runner = ArtifactRunner::load(root + "/artifact");
    ASSERT_TRUE(runner.ok()) << runner.error().message;
    runner_ = std::make_unique<ArtifactRunner>(runner.take());
    ASSERT_EQ(runner_->manifest().model.source_format, "gguf");
    std::ifstream file(root + "/reference.json");
    reference_ = nlohmann::json::parse(file);
  }

  Sequence sequence(const std::string& name) {
    Sequence s;
    static_cast<e2e::Sequence&>(s) = runner_->sequence(reference_["sequences"][name]["tokens"].get<std::vector<int32_t>>());
    s.logits = reference_["sequences"][name]["logits"].get<std::vector<std::vector<double>>>();
    return s;
  }

  std::vector<std::vector<float>> run(const std::vector<std::pair<Sequence*, int64_t>>& chunks) {
    std::vector<std::pair<e2e::Sequence*, int64_t>> plain(chunks.begin(), chunks.end());
    return runner_->run(plain);
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

  std::unique_ptr<ArtifactRunner> runner_;
  nlohmann::json reference_;
};

TEST_P(FamilyGguf, LogitsMatchTheReference) {
  EXPECT_EQ(runner_->manifest().kv_cache.head_dim, 64);
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
    e2e::Sequence s = runner_->sequence(g["prompt"].get<std::vector<int32_t>>());
    const auto want = g["tokens"].get<std::vector<int32_t>>();
    std::vector<int32_t> got;
    auto logits = runner_->run({{&s, int64_t(s.tokens.size())}});
    for (size_t step = 0; step < want.size(); ++step) {
      const int32_t next = int32_t(std::max_element(logits[0].begin(), logits[0].end()) - logits[0].begin());
      got.push_back(next);
      if (step + 1 == want.size()) break;
      s.tokens.push_back(next);
      logits = runner_->run({{&s, 1}});
    }
    EXPECT_EQ(got, want);
    s.table.release(runner_->executor().blockPool());
  }
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyGguf, ::testing::Values("tiny-qwen3", "tiny-qwen3-moe", "tiny-mixtral",
                                                                   "tiny-gemma3"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

}  // namespace
}  // namespace kiln
