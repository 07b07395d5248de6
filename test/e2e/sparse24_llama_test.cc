// kiln-compile --sparsity=2:4 on the tiny random Llama (test/fixtures/tiny-llama),
// compiled by ctest fixtures into $KILN_SPARSE24_DIR:
//   sparse       --sparsity=2:4 (magnitude, at load)
//   pruned       the checkpoint pruned 2:4 by NumPy (test/reference/prune_24.py), compiled dense
//   dense        the checkpoint as it is
//   sparse-int8  --sparsity=2:4 --quant-weights=int8
//   sparse-int4  --sparsity=2:4 --quant-weights=int4 --quant-group-size=64
//   ct-bitmask24 test/models/sparse24-llama/bitmask24, compressed by the
//                compressed-tensors package (kiln-compile's default: 2:4)
//   ct-dense     the package's decompression of it, compiled dense
// The sparse plan's logits are the NumPy-pruned dense model's up to f32
// rounding (the selection and the sparse GEMM both checked against an
// outside implementation), differ from the unpruned model's, and the
// quantized kept values stay near the float ones.
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "test/e2e/artifact_runner.h"

namespace kiln {
namespace {

using e2e::ArtifactRunner;

std::string artifact(const std::string& name) {
  const char* root = std::getenv("KILN_SPARSE24_DIR");
  return std::string(root ? root : "$KILN_SPARSE24_DIR") + "/" + name;
}

// The last logits of three prompts prefilled together, then four decode
// steps of the first, as one list of rows.
std::vector<std::vector<float>> logitsOf(const std::string& name) {
  auto runner = ArtifactRunner::load(artifact(name));
  EXPECT_TRUE(runner.ok()) << name << ": " << runner.error().message;
  if (!runner.ok()) return {};
  e2e::Sequence a = runner->sequence({1, 17, 33, 5, 90, 12, 7, 64, 3, 101, 44, 2});
  e2e::Sequence b = runner->sequence({9, 8, 7, 6, 5});
  e2e::Sequence c = runner->sequence({120, 3, 77, 77, 15, 31, 60});
  std::vector<std::vector<float>> rows = runner->run({{&a, 8}, {&b, 5}, {&c, 7}});
  for (int step = 0; step < 4; ++step)
    for (std::vector<float>& row : runner->run({{&a, 1}})) rows.push_back(std::move(row));
  return rows;
}

double maxAbsDiff(const std::vector<std::vector<float>>& x, const std::vector<std::vector<float>>& y) {
  EXPECT_EQ(x.size(), y.size());
  double worst = 0;
  for (size_t r = 0; r < std::min(x.size(), y.size()); ++r)
    for (size_t i = 0; i < x[r].size(); ++i) worst = std::max(worst, std::fabs(double(x[r][i]) - double(y[r][i])));
  return worst;
}

double maxAbs(const std::vector<std::vector<float>>& x) {
  double m = 0;
  for (const auto& row : x)
    for (float v : row) m = std::max(m, std::fabs(double(v)));
  return m;
}

TEST(Sparse24Llama, SparsePlanComputesTheNumpyPrunedModel) {
  auto manifest = Manifest::load(artifact("sparse"));
  ASSERT_TRUE(manifest.ok()) << manifest.error().message;
  int sparse_gemms = 0, dense_gemms = 0;
  for (const Step& step : manifest->findEntry("forward")->steps)
    if (step.kind == StepKind::kGemm) ++(step.as<GemmParams>().weight_type == "sp24" ? sparse_gemms : dense_gemms);
  // Per layer: merged QKV, o, merged gate/up, down; the LM head stays dense.
  EXPECT_EQ(sparse_gemms, 2 * 4);
  EXPECT_EQ(dense_gemms, 1);
  EXPECT_EQ(manifest->options.at("sparsity"), "2:4");

  auto sparse = logitsOf("sparse"), pruned = logitsOf("pruned"), dense = logitsOf("dense");
  ASSERT_FALSE(sparse.empty());
  std::cerr << "max |logit|: " << maxAbs(pruned) << ", sparse vs pruned: " << maxAbsDiff(sparse, pruned)
            << ", sparse vs dense: " << maxAbsDiff(sparse, dense) << "\n";
  EXPECT_LE(maxAbsDiff(sparse, pruned), 1e-5 * (1 + maxAbs(pruned)));
  // Pruning half the weights of a random model moves its logits.
  EXPECT_GT(maxAbsDiff(sparse, dense), 1e-2);
}

TEST(Sparse24Llama, QuantizedKeptValuesStayNearTheFloatOnes) {
  auto sparse = logitsOf("sparse");
  ASSERT_FALSE(sparse.empty());
  const double scale = maxAbs(sparse);
  const double int8 = maxAbsDiff(logitsOf("sparse-int8"), sparse);
  const double int4 = maxAbsDiff(logitsOf("sparse-int4"), sparse);
  std::cerr << "max |logit|: " << scale << ", int8sp24 vs sp24: " << int8 << ", int4sp24 vs sp24: " << int4 << "\n";
  EXPECT_GT(int8, 0.0);
  EXPECT_LE(int8, 0.02 * scale);
  EXPECT_GT(int4, int8);
  EXPECT_LE(int4, 0.25 * scale);
}

// A compressed-tensors sparse-24-bitmask checkpoint compiles 2:4 by default
// and computes what the package's own decompression does, compiled dense.
TEST(Sparse24Llama, CompressedTensorsCheckpointRunsSparse) {
  auto manifest = Manifest::load(artifact("ct-bitmask24"));
  ASSERT_TRUE(manifest.ok()) << manifest.error().message;
  EXPECT_EQ(manifest->options.at("sparsity"), "2:4");
  auto sparse = logitsOf("ct-bitmask24"), dense = logitsOf("ct-dense");
  ASSERT_FALSE(sparse.empty());
  EXPECT_LE(maxAbsDiff(sparse, dense), 1e-5 * (1 + maxAbs(dense)));
}

}  // namespace
}  // namespace kiln
