// Gemma 3 read two more ways, each against the same model imported from a
// Hugging Face text-only checkpoint (gemma3_text), logits within 1e-5 at
// every position of a chunked prefill, a ragged batch and decode steps:
//  - from llama.cpp's GGUF (make_family_ggufs.py's tiny-gemma3/model.gguf:
//    norms stored with Gemma's 1 added, gemma3.* metadata) against its
//    Hugging Face twin (tiny-gemma3/hf, query_pre_attn_scalar 64 as the GGUF
//    implies);
//  - as the image-text model (Gemma3ForConditionalGeneration, both tensor
//    spellings, make_gemma3_image_text.py) against the committed
//    tiny-gemma3 fixture's artifact, and its float64 reference within 1e-4.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <fstream>

#include "test/e2e/artifact_runner.h"
#include "test/source_root.h"

namespace kiln {
namespace {

using e2e::ArtifactRunner;
using e2e::Sequence;

constexpr double kSameModel = 1e-5;  // max |logit difference|, one model read two ways, f32

std::string envDir(const char* name) {
  const char* dir = std::getenv(name);
  return dir ? dir : "";
}

// Sequences "a" and "b" of `reference` through both runners in the same
// chunks (a prefill, a ragged batch, then decode steps side by side): the
// largest logit difference between them, and between `a`'s and the
// reference's float64 logits.
struct Differences {
  double between = 0, to_reference = 0;
};

Differences compare(ArtifactRunner& a, ArtifactRunner& b, const nlohmann::json& reference) {
  std::vector<std::vector<double>> ref[2];
  Sequence sa[2], sb[2];
  for (int i = 0; i < 2; ++i) {
    const auto& seq = reference["sequences"][i == 0 ? "a" : "b"];
    sa[i] = a.sequence(seq["tokens"].get<std::vector<int32_t>>());
    sb[i] = b.sequence(sa[i].tokens);
    ref[i] = seq["logits"].get<std::vector<std::vector<double>>>();
  }
  Differences d;
  auto step = [&](std::vector<std::pair<int, int64_t>> chunks) {
    std::vector<std::pair<Sequence*, int64_t>> ca, cb;
    for (auto [i, n] : chunks) {
      ca.push_back({&sa[i], n});
      cb.push_back({&sb[i], n});
    }
    auto la = a.run(ca), lb = b.run(cb);
    for (size_t c = 0; c < chunks.size(); ++c) {
      const int i = chunks[c].first;
      const std::vector<double>& r = ref[i][size_t(sa[i].done - 1)];
      for (size_t v = 0; v < r.size(); ++v) {
        d.between = std::max(d.between, double(std::fabs(la[c][v] - lb[c][v])));
        d.to_reference = std::max(d.to_reference, std::fabs(double(la[c][v]) - r[v]));
      }
    }
  };
  step({{0, 20}});
  step({{0, 3}, {1, 16}});
  while (sa[0].done < int64_t(sa[0].tokens.size())) {
    std::vector<std::pair<int, int64_t>> chunks{{0, 1}};
    if (sa[1].done < int64_t(sa[1].tokens.size())) chunks.push_back({1, 1});
    step(chunks);
  }
  return d;
}

nlohmann::json readJson(const std::string& path) {
  std::ifstream file(path);
  EXPECT_TRUE(file.good()) << path;
  return nlohmann::json::parse(file);
}

TEST(Gemma3Gguf, LogitsEqualTheHuggingFaceImport) {
  const std::string dir = envDir("KILN_FAMILY_GGUF_DIR");
  ASSERT_FALSE(dir.empty()) << "KILN_FAMILY_GGUF_DIR is not set (ctest sets it to the folder its fixture writes)";
  auto gguf = ArtifactRunner::load(dir + "/tiny-gemma3/artifact");
  ASSERT_TRUE(gguf.ok()) << gguf.error().message;
  auto hf = ArtifactRunner::load(dir + "/tiny-gemma3/hf-artifact");
  ASSERT_TRUE(hf.ok()) << hf.error().message;
  ASSERT_EQ(gguf->manifest().model.source_format, "gguf");
  ASSERT_NE(hf->manifest().model.source_format, "gguf");
  Differences d = compare(*gguf, *hf, readJson(dir + "/tiny-gemma3/reference.json"));
  EXPECT_LE(d.between, kSameModel);
  EXPECT_LE(d.to_reference, 1e-4);
  std::printf("tiny-gemma3 GGUF: max |logits - HF import's| = %.3g, - float64 reference = %.3g\n", d.between,
              d.to_reference);
}

class Gemma3ImageText : public ::testing::TestWithParam<const char*> {};

TEST_P(Gemma3ImageText, LogitsEqualTheTextModel) {
  const std::string dir = envDir("KILN_FAMILY_GGUF_DIR");
  ASSERT_FALSE(dir.empty()) << "KILN_FAMILY_GGUF_DIR is not set (ctest sets it to the folder its fixtures write)";
  const std::string text_fixture = checkoutPath("test/fixtures/tiny-gemma3");
  auto image_text = ArtifactRunner::load(dir + "/" + GetParam() + "/artifact");
  ASSERT_TRUE(image_text.ok()) << image_text.error().message;
  auto text = ArtifactRunner::load(text_fixture + "/artifact", text_fixture);
  ASSERT_TRUE(text.ok()) << text.error().message;
  Differences d = compare(*image_text, *text, readJson(text_fixture + "/reference.json"));
  EXPECT_LE(d.between, kSameModel);
  EXPECT_LE(d.to_reference, 1e-4);
  std::printf("%s: max |logits - text model's| = %.3g, - float64 reference = %.3g\n", GetParam(), d.between,
              d.to_reference);
}

INSTANTIATE_TEST_SUITE_P(Spellings, Gemma3ImageText,
                         ::testing::Values("tiny-gemma3-image-text", "tiny-gemma3-image-text-legacy"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

}  // namespace
}  // namespace kiln
