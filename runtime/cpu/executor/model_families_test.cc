// The CPU executor on the model families beyond Llama, against float64
// NumPy references written from transformers' semantics
// (test/reference/make_tiny_family_references.py):
//   tiny-qwen3        per-head q/k RMSNorm before RoPE, head_dim 64 with
//                     hidden 64, tied head; layer 1 slides over 12 keys
//   tiny-mistral-swa  sliding window 7 on every layer
//   tiny-phi3         q/k/v and gate/up fused in the checkpoint (qkv_proj,
//                     gate_up_proj), sliding window 9 on every layer
//   tiny-gemma3       Gemma 3: GeGLU, four (1 + w) norms a layer, scaled
//                     embeddings, query_pre_attn_scalar, q/k norm; layers
//                     0 and 1 slide over 10 keys at theta 1e4, layer 2 is
//                     global at theta 1e6 with linear RoPE scaling 8
//   tiny-mixtral      mixture of 4 experts, 2 routed a token, renormalized;
//                     sliding window 11
//   tiny-qwen3-moe    mixture of 8 experts, 3 routed a token, not
//                     renormalized; layer 1 a dense MLP (mlp_only_layers);
//                     q/k norm
// f32 logits within 1e-4 of the reference at every position a batch ends
// on (prefill chunks, decode steps, ragged batches, sequences well past the
// windows and the 16-key pages), and greedy continuations identical.
#include "runtime/cpu/executor/executor.h"
#include "test/source_root.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "runtime/backend/plan_kv_pool.h"

namespace kiln::cpu {
namespace {

constexpr double kTolerance = 1e-4;  // max |logit - reference|, f32 against float64

struct Reference {
  std::vector<int32_t> tokens;
  std::vector<std::vector<double>> logits;  // [len, vocab]
};

struct GreedyCase {
  std::vector<int32_t> prompt, tokens;
};

struct Sequence {
  std::vector<int32_t> tokens;
  BlockTable table;
  int64_t done = 0;
};

struct Chunk {
  Sequence* seq;
  int64_t count;
};

class ModelFamilyTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    fixture_ = checkoutPath(std::string("test/fixtures/") + GetParam());
    auto manifest = Manifest::load(fixture_ + "/artifact");
    ASSERT_TRUE(manifest.ok()) << manifest.error().message;
    manifest_ = std::make_unique<Manifest>(manifest.take());
    auto weights = WeightStore::open(*manifest_, {.source_path = fixture_, .check_source_stamp = false});
    ASSERT_TRUE(weights.ok()) << weights.error().message;
    weights_ = std::make_unique<WeightStore>(weights.take());
    auto executor = CpuExecutor::create(*manifest_, *weights_, kvPoolConfigFor(*manifest_, 16), /*max_tokens=*/24);
    ASSERT_TRUE(executor.ok()) << executor.error().message;
    executor_ = executor.take();
    std::ifstream file(fixture_ + "/reference.json");
    nlohmann::json j = nlohmann::json::parse(file);
    for (auto& [name, seq] : j["sequences"].items())
      reference_[name] = {seq["tokens"].get<std::vector<int32_t>>(),
                          seq["logits"].get<std::vector<std::vector<double>>>()};
    for (const auto& g : j["greedy"])
      greedy_.push_back({g["prompt"].get<std::vector<int32_t>>(), g["tokens"].get<std::vector<int32_t>>()});
    windows_ = j["windows"].get<std::vector<int64_t>>();
  }

  Sequence newSequence(const std::vector<int32_t>& tokens) {
    return Sequence{tokens, BlockTable(manifest_->kv_cache.page_size)};
  }

  // One forward over `chunks`; returns each chunk's last-token logits.
  std::vector<std::vector<float>> run(std::vector<Chunk> chunks) {
    std::vector<int32_t> tokens, positions, slots, query_start{0}, kv_lens, tables;
    int max_blocks = 0;
    for (Chunk& c : chunks) {
      Status grown = c.seq->table.append(executor_->blockPool(), c.count);
      EXPECT_TRUE(grown.ok()) << grown.error().message;
      max_blocks = std::max(max_blocks, int(c.seq->table.blocks().size()));
    }
    for (Chunk& c : chunks) {
      for (int64_t p = c.seq->done; p < c.seq->done + c.count; ++p) {
        tokens.push_back(c.seq->tokens[size_t(p)]);
        positions.push_back(int32_t(p));
        slots.push_back(int32_t(*c.seq->table.slot(p)));
      }
      c.seq->done += c.count;
      query_start.push_back(int32_t(tokens.size()));
      kv_lens.push_back(int32_t(c.seq->done));
      auto blocks = c.seq->table.blocks();
      tables.insert(tables.end(), blocks.begin(), blocks.end());
      tables.resize(tables.size() + size_t(max_blocks) - blocks.size(), 0);
    }
    BatchInputs in{tokens, positions, slots, tables, max_blocks, query_start, kv_lens};
    const int64_t vocab = executor_->vocabSize();
    std::vector<float> logits(chunks.size() * size_t(vocab));
    Status status = executor_->forward(in, logits);
    EXPECT_TRUE(status.ok()) << status.error().message;
    std::vector<std::vector<float>> out;
    for (size_t b = 0; b < chunks.size(); ++b)
      out.emplace_back(logits.begin() + b * vocab, logits.begin() + (b + 1) * vocab);
    return out;
  }

  // Runs `chunks` over reference sequences and checks every chunk's logits.
  double runAndCompare(std::vector<Chunk> chunks, const std::vector<const Reference*>& refs) {
    auto logits = run(chunks);
    double worst = 0;
    for (size_t b = 0; b < chunks.size(); ++b) {
      const std::vector<double>& ref = refs[b]->logits[size_t(chunks[b].seq->done - 1)];
      double diff = 0;
      for (size_t i = 0; i < ref.size(); ++i) diff = std::max(diff, std::fabs(double(logits[b][i]) - ref[i]));
      EXPECT_LE(diff, kTolerance) << GetParam() << ": sequence " << b << " at position " << chunks[b].seq->done - 1;
      worst = std::max(worst, diff);
    }
    return worst;
  }

  std::string fixture_;
  std::unique_ptr<Manifest> manifest_;
  std::unique_ptr<WeightStore> weights_;
  std::unique_ptr<CpuExecutor> executor_;
  std::map<std::string, Reference> reference_;
  std::vector<GreedyCase> greedy_;
  std::vector<int64_t> windows_;
};

// The plan carries each layer's window, the same in kv_cache and in the
// layer's paged_attention step (kv_cache lists none when no layer slides).
TEST_P(ModelFamilyTest, PlanCarriesTheLayerWindows) {
  const bool slides = std::any_of(windows_.begin(), windows_.end(), [](int64_t w) { return w > 0; });
  EXPECT_EQ(manifest_->kv_cache.sliding_windows, slides ? windows_ : std::vector<int64_t>{});
  std::vector<int64_t> from_steps;
  for (const Step& step : manifest_->findEntry("forward")->steps)
    if (step.kind == StepKind::kPagedAttention) from_steps.push_back(step.as<PagedAttentionParams>().sliding_window);
  EXPECT_EQ(from_steps, windows_);
}

// Chunked prefill and decode of two sequences side by side, 40 and 24
// tokens: past the windows (7, 12) and past two 16-key pages.
TEST_P(ModelFamilyTest, ChunkedPrefillDecodeAndRaggedBatches) {
  const Reference& ra = reference_.at("a");
  const Reference& rb = reference_.at("b");
  Sequence a = newSequence(ra.tokens), b = newSequence(rb.tokens);
  double worst = runAndCompare({{&a, 20}}, {&ra});
  worst = std::max(worst, runAndCompare({{&a, 3}, {&b, 16}}, {&ra, &rb}));
  worst = std::max(worst, runAndCompare({{&b, 5}, {&a, 1}}, {&rb, &ra}));
  while (a.done < int64_t(ra.tokens.size())) {
    std::vector<Chunk> chunks{{&a, 1}};
    std::vector<const Reference*> refs{&ra};
    if (b.done < int64_t(rb.tokens.size())) {
      chunks.push_back({&b, 1});
      refs.push_back(&rb);
    }
    worst = std::max(worst, runAndCompare(chunks, refs));
  }
  EXPECT_EQ(a.done, 40);
  EXPECT_EQ(b.done, 24);
  std::printf("%s: max |logits - float64 reference| = %.3g\n", GetParam(), worst);
  RecordProperty("max_abs_logit_diff", std::to_string(worst));
}

// Greedy continuations: prefill the prompt, then decode token by token,
// each time feeding back the argmax; the tokens are the reference's.
TEST_P(ModelFamilyTest, GreedyContinuationsMatch) {
  ASSERT_GE(greedy_.size(), 3u);
  for (const GreedyCase& g : greedy_) {
    Sequence s = newSequence(g.prompt);
    s.tokens.reserve(g.prompt.size() + g.tokens.size());
    std::vector<int32_t> produced;
    auto logits = run({{&s, int64_t(g.prompt.size())}});
    for (size_t step = 0; step < g.tokens.size(); ++step) {
      const auto& row = logits[0];
      const int32_t next = int32_t(std::max_element(row.begin(), row.end()) - row.begin());
      produced.push_back(next);
      if (step + 1 == g.tokens.size()) break;
      s.tokens.push_back(next);
      logits = run({{&s, 1}});
    }
    EXPECT_EQ(produced, g.tokens) << GetParam() << ": prompt of " << g.prompt.size() << " tokens";
    s.table.release(executor_->blockPool());
  }
}

INSTANTIATE_TEST_SUITE_P(Families, ModelFamilyTest, ::testing::Values("tiny-qwen3", "tiny-mistral-swa", "tiny-phi3", "tiny-gemma3",
                                                                      "tiny-mixtral", "tiny-qwen3-moe"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

}  // namespace
}  // namespace kiln::cpu
