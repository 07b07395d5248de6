// kiln-compile --quant-method=rtn|gptq|awq on two tiny random Llamas,
// calibrated on test/fixtures/tiny-llama/calibration.json and compiled by
// ctest fixtures into $KILN_CALIBRATED_DIR/<model>/<variant>:
//   tiny-llama  the f32 checkpoint test/fixtures/tiny-llama (the quantized
//               model is written as a GPTQ checkpoint)
//   gguf        the K-quant GGUF of make_kquant_llama.py made float by
//               scripts/dequantize_gguf.py (written as a q4_0/q4_1 GGUF)
// Each artifact loads its written model as the int4 blocks its grid packs
// into and runs, and on tokens the calibration never saw its logits are
// closer to the float model's than round-to-nearest's on the same grid.
// The GEMMs run dequantize + sgemm (f32 activations), so the logits differ
// from the float model's by the weights alone.
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/artifact/manifest.h"
#include "runtime/backend/plan_kv_pool.h"
#include "runtime/cpu/executor/executor.h"
#include "runtime/cpu/kernels/linear.h"
#include "runtime/weights/weight_store.h"

namespace kiln {
namespace {

constexpr int kSequences = 12, kLength = 48;

std::string artifactDir(const std::string& name) {
  const char* root = std::getenv("KILN_CALIBRATED_DIR");
  return std::string(root ? root : "$KILN_CALIBRATED_DIR") + "/" + name;
}

// Held-out tokens: a fixed LCG, not the calibration file's generator.
std::vector<int32_t> heldOutTokens(int64_t vocab) {
  std::vector<int32_t> ids;
  uint64_t state = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < kSequences * kLength; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    ids.push_back(int32_t((state >> 33) % uint64_t(vocab)));
  }
  return ids;
}

// Every prefix of every held-out sequence as its own sequence, in one
// batch: the logits of each position, [kSequences * kLength, vocab].
std::vector<float> allLogits(const std::string& name, std::map<std::string, int>* weight_types) {
  auto manifest = Manifest::load(artifactDir(name));
  EXPECT_TRUE(manifest.ok()) << manifest.error().message;
  if (!manifest.ok()) return {};
  auto weights = WeightStore::open(*manifest);
  EXPECT_TRUE(weights.ok()) << weights.error().message;
  if (!weights.ok()) return {};
  if (weight_types)  // what each GEMM's weight operand is bound as
    for (const Step& step : manifest->findEntry("forward")->steps)
      if (step.kind == StepKind::kGemm)
        ++(*weight_types)[std::string(weightTypeName(weights->find(step.args[1].id)->type))];
  const int64_t page = manifest->kv_cache.page_size;
  const int64_t blocks_per_seq = (kLength + page - 1) / page;
  const int64_t count = int64_t(kSequences) * kLength;
  std::vector<int32_t> tokens, positions, slots, tables, query_start{0}, kv_lens;
  const std::vector<int32_t> ids = heldOutTokens(manifest->model.vocab_size);
  for (int64_t s = 0; s < count; ++s) {
    const int64_t seq = s / kLength, len = s % kLength + 1;
    for (int64_t p = 0; p < len; ++p) {
      tokens.push_back(ids[size_t(seq * kLength + p)]);
      positions.push_back(int32_t(p));
      slots.push_back(int32_t((s * blocks_per_seq + p / page) * page + p % page));
    }
    for (int64_t b = 0; b < blocks_per_seq; ++b) tables.push_back(int32_t(s * blocks_per_seq + b));
    query_start.push_back(int32_t(tokens.size()));
    kv_lens.push_back(int32_t(len));
  }
  auto executor = cpu::CpuExecutor::create(*manifest, *weights,
                                           kvPoolConfigFor(*manifest, count * blocks_per_seq),
                                           int64_t(tokens.size()));
  EXPECT_TRUE(executor.ok()) << executor.error().message;
  if (!executor.ok()) return {};
  BatchInputs batch{tokens, positions, slots, tables, int(blocks_per_seq), query_start, kv_lens};
  std::vector<float> logits(size_t(count * (*executor)->vocabSize()));
  cpu::setQuantizedWeightPath(cpu::LinearPath::kDequantSgemm);
  Status status = (*executor)->forward(batch, logits);
  cpu::setQuantizedWeightPath(cpu::LinearPath::kQuantDot);
  EXPECT_TRUE(status.ok()) << status.error().message;
  return logits;
}

// sum (a - b)^2 / sum b^2
double relativeError(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < b.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return num / den;
}

class CalibratedInt4 : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { float_ = allLogits(GetParam() + "/float", nullptr); }

  // The variant's relative logits error against the float model, after
  // checking its GEMMs read `type` weights (the decoder linears) or f32 (the
  // LM head).
  double errorOf(const std::string& variant, const std::string& type) {
    const std::string name = GetParam() + "/" + variant;
    std::map<std::string, int> types;
    const std::vector<float> logits = allLogits(name, &types);
    EXPECT_EQ(logits.size(), float_.size()) << name;
    EXPECT_EQ(types.size(), 2u) << name;
    EXPECT_GT(types[type], 0) << name << " has no " << type << " weights";
    EXPECT_EQ(types["f32"], 1) << name << ": the LM head stays f32";
    const double error = relativeError(logits, float_);
    std::printf("%-33s relative logits error %.3g\n", name.c_str(), error);
    EXPECT_GT(error, 0.0) << name << ": nothing was quantized";
    EXPECT_LT(error, 0.05) << name;
    return error;
  }

  std::vector<float> float_;
};

TEST_P(CalibratedInt4, GptqSymmetricBeatsRoundToNearest) {
  const double rtn = errorOf("rtn", "q4_0");
  EXPECT_LT(errorOf("gptq", "q4_0"), rtn);
}

TEST_P(CalibratedInt4, GptqWithZeroPointsAndActOrderBeatsRoundToNearest) {
  const double rtn = errorOf("rtn-asym-g64", "q4_1");
  EXPECT_LT(errorOf("gptq-asym-actorder-g64", "q4_1"), rtn);
}

TEST_P(CalibratedInt4, AwqBeatsRoundToNearest) {
  const double rtn = errorOf("rtn-asym", "q4_1");
  EXPECT_LT(errorOf("awq", "q4_1"), rtn);
}

TEST_P(CalibratedInt4, AwqSymmetricWithoutClippingBeatsRoundToNearest) {
  const double rtn = errorOf("rtn-g64", "q4_0");
  EXPECT_LT(errorOf("awq-sym-noclip-g64", "q4_0"), rtn);
}

INSTANTIATE_TEST_SUITE_P(Models, CalibratedInt4, ::testing::Values("tiny-llama", "gguf"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

}  // namespace
}  // namespace kiln
