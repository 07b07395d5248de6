// SmolLM2-135M-Instruct (Q4_1 GGUF) on kiln's CPU backend against llama.cpp,
// the outside reference: fixtures in test/fixtures/llamacpp/ were written by
// test/reference/make_llamacpp_fixtures.py from llama-cpp-python on the same
// file. kiln's CPU backend reproduces llama.cpp's CPU arithmetic (8-bit
// activation blocks, ggml's rms_norm, rope, softmax and SiLU rounding; see
// docs/design/cpu-numerics.md), so the checks are tight: full-vocabulary
// logits at cosine >= 0.999 with equal top-5 sets (bit-identical top-50 on the
// fixtures' CPU variant), and 32-token greedy continuations identical on at
// least 9 of 10 prompts, any divergence sitting on a near-tie.
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <numeric>
#include <map>
#include <optional>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/artifact/manifest.h"
#include "test/e2e/logit_metrics.h"
#include "runtime/backend/plan_kv_pool.h"
#include "runtime/cpu/executor/executor.h"
#include "runtime/engine/engine.h"
#include "runtime/cpu/kernels/ggml_vec.h"
#include "runtime/cpu/kernels/linear.h"
#include "runtime/kv/block_pool.h"
#include "runtime/numerics/quant.h"
#include "runtime/weights/weight_store.h"
#include "test/source_root.h"

namespace kiln {
namespace {

using e2e::cosine;

nlohmann::json loadFixture(const std::string& name) {
  std::ifstream in(checkoutPath("test/fixtures/llamacpp/" + name));
  return nlohmann::json::parse(in);
}

std::vector<uint8_t> base64Decode(const std::string& text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::vector<uint8_t> out;
  uint32_t buffer = 0;
  int bits = 0;
  for (char c : text) {
    int v = value(c);
    if (v < 0) continue;
    buffer = (buffer << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(uint8_t(buffer >> bits));
    }
  }
  return out;
}

// llama.cpp's full logits row: f16, zlib-compressed, base64.
std::vector<float> referenceLogits(const std::string& encoded, size_t vocab) {
  std::vector<uint8_t> compressed = base64Decode(encoded);
  std::vector<uint16_t> halves(vocab);
  uLongf size = uLongf(vocab * 2);
  int rc = uncompress(reinterpret_cast<Bytef*>(halves.data()), &size, compressed.data(),
                      uLong(compressed.size()));
  EXPECT_EQ(rc, Z_OK);
  EXPECT_EQ(size, vocab * 2);
  std::vector<float> out(vocab);
  for (size_t i = 0; i < vocab; ++i) out[i] = f16ToF32(halves[i]);
  return out;
}

std::vector<int> topK(std::span<const float> row, int k) {
  std::vector<int> ids(row.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                    [&](int a, int b) { return row[a] > row[b]; });
  ids.resize(k);
  return ids;
}

// One sequence run through the CPU executor token by token after a prefill.
class SmolLM2 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* dir = std::getenv("KILN_SMOLLM2_ARTIFACT");
    if (!dir) return;  // SetUp fails each test, saying so
    auto manifest = Manifest::load(dir);
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
    auto executor = cpu::CpuExecutor::create(*manifest_, *weights_,
                                             kvPoolConfigFor(*manifest_, 256), 256);
    if (!executor.ok()) {
      setup_error_ = executor.error().message;
      return;
    }
    executor_ = executor.take().release();
  }
  static void TearDownTestSuite() {
    delete executor_;
    delete weights_;
    delete manifest_;
  }
  void SetUp() override {
    if (!std::getenv("KILN_SMOLLM2_ARTIFACT"))
      FAIL() << "KILN_SMOLLM2_ARTIFACT is not set (ctest sets it to the artifact its fixture compiles)";
    if (!setup_error_.empty()) {
      if (std::getenv("KILN_REQUIRE_MODELS") && std::string(std::getenv("KILN_REQUIRE_MODELS")) == "1")
        FAIL() << "KILN_REQUIRE_MODELS=1 but the SmolLM2 artifact cannot be loaded: " << setup_error_;
      GTEST_SKIP() << "SmolLM2 artifact not available (run scripts/setup.sh): " << setup_error_;
    }
  }

  // Feeds `tokens[begin, end)` of one sequence; returns the logits of the last.
  std::vector<float> feed(BlockTable& table, const std::vector<int32_t>& tokens, int64_t begin,
                          int64_t end) {
    BlockPool& pool = executor_->blockPool();
    EXPECT_TRUE(table.append(pool, end - table.numTokens()).ok());
    std::vector<int32_t> ids(tokens.begin() + begin, tokens.begin() + end);
    std::vector<int32_t> positions(end - begin), slots(end - begin);
    std::iota(positions.begin(), positions.end(), int32_t(begin));
    EXPECT_TRUE(table.slots(begin, slots).ok());
    std::vector<int32_t> blocks(table.blocks().begin(), table.blocks().end());
    std::vector<int32_t> query_start = {0, int32_t(end - begin)}, kv_lens = {int32_t(end)};
    BatchInputs in{ids, positions, slots, blocks, int(blocks.size()), query_start, kv_lens};
    std::vector<float> logits(executor_->vocabSize());
    Status status = executor_->forward(in, logits);
    EXPECT_TRUE(status.ok()) << (status.ok() ? "" : status.error().message);
    return logits;
  }

  // One checked position: kiln's logits there and both references' rows.
  struct CheckedPosition {
    std::string where;  // "prompt @label"
    const std::vector<float>& kiln;
    std::vector<float> llama;  // f16-rounded, the whole vocabulary
    std::vector<float> exact;
    std::vector<std::pair<int, float>> llama_top;  // top 50, exact f32
  };

  // Feeds every logits-fixture prompt as llama.cpp evaluated it
  // (make_llamacpp_fixtures.py: the prompt in one batch, then each generated
  // token alone) and calls `check` at each recorded position.
  void forEachCheckedPosition(const std::function<void(const CheckedPosition&)>& check) {
    nlohmann::json fixture = loadFixture("logits.json");
    std::ifstream exact_in(checkoutPath("test/fixtures/numpy/smollm2_logits.json"));
    nlohmann::json exact = nlohmann::json::parse(exact_in);
    size_t vocab = size_t(executor_->vocabSize());
    for (size_t p = 0; p < fixture["prompts"].size(); ++p) {
      const auto& prompt = fixture["prompts"][p];
      ASSERT_EQ(exact["prompts"][p]["name"], prompt["name"]);
      std::vector<int32_t> tokens = prompt["prompt_ids"].get<std::vector<int32_t>>();
      const int64_t prompt_len = int64_t(tokens.size());
      for (int32_t t : prompt["generated_ids"].get<std::vector<int32_t>>()) tokens.push_back(t);
      BlockTable table(manifest_->kv_cache.page_size);
      std::vector<float> mine = feed(table, tokens, 0, prompt_len);
      int64_t fed = prompt_len;
      for (size_t a = 0; a < prompt["positions"].size(); ++a) {
        const auto& at = prompt["positions"][a];
        const int64_t position = at["position"].get<int64_t>();
        // Several labels can name one position (the last prompt position is
        // also the one whose logits chose generated token 0).
        for (; fed < position + 1; ++fed) mine = feed(table, tokens, fed, fed + 1);
        CheckedPosition checked{prompt["name"].get<std::string>() + " @" +
                                    at["label"].get<std::string>(),
                                mine,
                                referenceLogits(at["logits_f16_zlib_b64"].get<std::string>(), vocab),
                                referenceLogits(exact["prompts"][p]["positions"][a]
                                                     ["logits_f16_zlib_b64"].get<std::string>(),
                                                vocab)};
        for (size_t k = 0; k < at["top_ids"].size(); ++k)
          checked.llama_top.emplace_back(at["top_ids"][k].get<int>(),
                                         at["top_values"][k].get<float>());
        check(checked);
      }
      table.release(executor_->blockPool());
    }
  }

  static inline Manifest* manifest_ = nullptr;
  static inline WeightStore* weights_ = nullptr;
  static inline cpu::CpuExecutor* executor_ = nullptr;
  static inline std::string setup_error_;
};

double meanAbsDiff(std::span<const float> a, std::span<const float> b) {
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += std::fabs(double(a[i]) - b[i]);
  return sum / double(a.size());
}

std::vector<int> sortedTop5(std::span<const float> row) {
  std::vector<int> top = topK(row, 5);
  std::sort(top.begin(), top.end());
  return top;
}

// Whether kiln runs the ggml code variant the fixtures were made with:
// llama.cpp compiled natively on an AVX-512 machine (its system_info). Then
// kiln reproduces its arithmetic bit for bit; on other CPUs kiln follows the
// ggml variant for that CPU, which rounds a little differently from the
// fixtures' machine.
bool sameArithmeticAsFixtures() {
  const std::string info =
      loadFixture("logits.json")["provenance"]["system_info"].get<std::string>();
  return std::string(cpu::ggmlVec().isa) == "avx512" &&
         info.find("AVX512 = 1") != std::string::npos;
}

// llama.cpp's logits at every recorded position: cosine >= 0.999 and equal
// top-5 sets everywhere, and where kiln runs the fixtures' ggml variant,
// llama.cpp's top-50 logits (stored as exact f32) to the bit. The float64
// NumPy reference (test/reference/make_smollm2_numpy_reference.py) is
// printed alongside: both engines round activations to 8 bits, which moves
// them up to ~0.002 in cosine from exact arithmetic.
TEST_F(SmolLM2, LogitsMatchLlamaCpp) {
  const bool bitwise = sameArithmeticAsFixtures();
  int checked = 0;
  forEachCheckedPosition([&](const CheckedPosition& at) {
    const std::string& where = at.where;
    const double kiln_llama = cosine(at.kiln, at.llama), kiln_exact = cosine(at.kiln, at.exact);
    float top50_diff = 0.0f;
    for (const auto& [id, value] : at.llama_top)
      top50_diff = std::max(top50_diff, std::fabs(at.kiln[size_t(id)] - value));
    std::printf("%-24s cos(kiln, llama.cpp) %.6f  max|diff| over llama.cpp's top 50 %.2g  "
                "cos(kiln, exact) %.6f  cos(llama.cpp, exact) %.6f\n",
                where.c_str(), kiln_llama, top50_diff, kiln_exact, cosine(at.llama, at.exact));
    EXPECT_GE(kiln_llama, 0.999) << where;
    // llama.cpp's top 5 from its exact f32 values (the f16 row can tie).
    std::vector<int> llama_top5;
    for (size_t k = 0; k < 5; ++k) llama_top5.push_back(at.llama_top[k].first);
    std::sort(llama_top5.begin(), llama_top5.end());
    EXPECT_EQ(sortedTop5(at.kiln), llama_top5) << where;
    if (bitwise) EXPECT_EQ(top50_diff, 0.0f) << where << ": not bit-identical to llama.cpp";
    // Still the model: 8-bit activations stay within a few 1e-3 of exact.
    EXPECT_GE(kiln_exact, 0.995) << where;
    ++checked;
  });
  EXPECT_EQ(checked, 12);
}

// With f32 activations (weights dequantized, no 8-bit activation rounding)
// kiln computes the model's graph exactly: within f32 rounding of the
// float64 NumPy reference at every checked position.
TEST_F(SmolLM2, F32ActivationsMatchExactReference) {
  cpu::setQuantizedWeightPath(cpu::LinearPath::kDequantSgemm);
  int checked = 0;
  forEachCheckedPosition([&](const CheckedPosition& at) {
    EXPECT_GE(cosine(at.kiln, at.exact), 0.99999) << at.where;
    // The fixture stores f16 logits: 0.02 is a few f16 ulps at |logit| ~ 20.
    EXPECT_LT(meanAbsDiff(at.kiln, at.exact), 0.02) << at.where;
    EXPECT_EQ(topK(at.kiln, 1), topK(at.exact, 1)) << at.where;
    ++checked;
  });
  cpu::setQuantizedWeightPath(cpu::LinearPath::kQuantDot);
  EXPECT_EQ(checked, 12);
}

// Engine::scoreTokens (kiln bench ppl's pass: each position a sequence of
// its own over shared KV blocks) against llama.cpp's logits: at every
// recorded position the log-probability of the token that follows equals
// llama.cpp's log-softmax there, within the fixture's f16 rounding.
TEST_F(SmolLM2, ScoredTokensMatchLlamaCppLogSoftmax) {
  auto engine = Engine::open(std::getenv("KILN_SMOLLM2_ARTIFACT"),
                             EngineOptions{.threads = 2, .progress = false, .device = "cpu"});
  ASSERT_TRUE(engine.ok()) << engine.error().message;
  nlohmann::json fixture = loadFixture("logits.json");
  const size_t vocab = size_t(executor_->vocabSize());
  int checked = 0;
  for (const auto& prompt : fixture["prompts"]) {
    std::vector<int32_t> tokens = prompt["prompt_ids"].get<std::vector<int32_t>>();
    for (int32_t t : prompt["generated_ids"].get<std::vector<int32_t>>()) tokens.push_back(t);
    for (const auto& at : prompt["positions"]) {
      const int64_t position = at["position"].get<int64_t>();
      if (position + 1 >= int64_t(tokens.size())) continue;
      const std::vector<float> llama = referenceLogits(at["logits_f16_zlib_b64"].get<std::string>(), vocab);
      double max = -INFINITY, sum = 0.0;
      for (float x : llama) max = std::max(max, double(x));
      for (float x : llama) sum += std::exp(double(x) - max);
      const double want = double(llama[size_t(tokens[size_t(position) + 1])]) - max - std::log(sum);
      auto scored = (*engine)->scoreTokens(std::span(tokens).first(size_t(position) + 2));
      ASSERT_TRUE(scored.ok()) << scored.error().message;
      ASSERT_EQ(scored->size(), size_t(position) + 1);
      EXPECT_NEAR(scored->back(), want, 0.03) << prompt["name"] << " @" << at["label"];
      ++checked;
    }
  }
  EXPECT_GE(checked, 8);
}

TEST_F(SmolLM2, GreedyContinuationsMatchLlamaCpp) {
  nlohmann::json fixture = loadFixture("greedy.json");
  std::ifstream exact_in(checkoutPath("test/fixtures/numpy/smollm2_logits.json"));
  nlohmann::json exact = nlohmann::json::parse(exact_in)["greedy"];
  int identical = 0, total = 0;
  for (size_t p = 0; p < fixture["prompts"].size(); ++p) {
    const auto& prompt = fixture["prompts"][p];
    ASSERT_EQ(exact[p]["name"], prompt["name"]);
    std::vector<int32_t> tokens = prompt["prompt_ids"].get<std::vector<int32_t>>();
    std::vector<int32_t> expected = prompt["generated_ids"].get<std::vector<int32_t>>();
    BlockTable table(manifest_->kv_cache.page_size);
    std::vector<float> logits = feed(table, tokens, 0, int64_t(tokens.size()));
    std::optional<size_t> divergence;
    double margin = 0;
    int32_t kiln_token = -1;
    for (size_t i = 0; i < expected.size(); ++i) {
      std::vector<int> top = topK(logits, 2);
      int32_t next = top[0];
      if (next != expected[i] && !divergence) {
        divergence = i;
        // How close kiln's own choice was to llama.cpp's token.
        margin = logits[next] - logits[expected[i]];
        kiln_token = next;
      }
      tokens.push_back(next);
      logits = feed(table, tokens, int64_t(tokens.size()) - 1, int64_t(tokens.size()));
    }
    table.release(executor_->blockPool());
    ++total;
    if (!divergence) {
      ++identical;
    } else {
      // A divergence must be one exact arithmetic does not decide for
      // llama.cpp: in the float64 reference's logits at that step (same
      // prefix), kiln's token is within 0.5 logits of llama.cpp's or ahead.
      const auto& step = exact[p]["steps"][*divergence];
      std::map<int, double> exact_logit;
      for (size_t j = 0; j < step["top_ids"].size(); ++j)
        exact_logit[step["top_ids"][j].get<int>()] = step["top_values"][j].get<double>();
      ASSERT_TRUE(exact_logit.count(kiln_token))
          << prompt["name"] << ": kiln's token " << kiln_token << " at step " << *divergence
          << " is not in the exact reference's top 10";
      double exact_gap = exact_logit.count(expected[*divergence])
                             ? exact_logit[expected[*divergence]] - exact_logit[kiln_token]
                             : 0.0;
      EXPECT_LT(margin, 0.5) << prompt["name"] << " diverges at token " << *divergence
                             << ": kiln prefers its token by " << margin << " logits";
      EXPECT_LT(exact_gap, 0.5) << prompt["name"] << " diverges at token " << *divergence
                                << ": exact arithmetic prefers llama.cpp's token by " << exact_gap;
      std::printf("%s: diverges at token %zu; kiln's margin %.3f logits, exact reference "
                  "prefers llama.cpp's token by %.3f\n",
                  prompt["name"].get<std::string>().c_str(), *divergence, margin, exact_gap);
    }
  }
  EXPECT_EQ(total, 10);
  std::printf("%d of %d greedy continuations identical to llama.cpp for 32 tokens\n", identical,
              total);
  // With llama.cpp's arithmetic reproduced, all 10 match on the fixtures'
  // machine; another CPU's ggml variant may flip a near-tie (asserted above).
  EXPECT_GE(identical, 9);
}

}  // namespace
}  // namespace kiln
