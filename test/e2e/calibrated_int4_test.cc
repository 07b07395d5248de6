// kiln-compile --quant-method=rtn|gptq|awq on two tiny random Llamas,
// calibrated on test/fixtures/tiny-llama/calibration.json and compiled by
// ctest fixtures into $KILN_CALIBRATED_DIR/<model>/<variant>:
//   tiny-llama  the f32 checkpoint test/fixtures/tiny-llama (the quantized
//               model is written as a GPTQ checkpoint)
//   gguf        the K-quant GGUF of make_kquant_llama.py made float by
//               scripts/dequantize_gguf.py (written as a q4_0/q4_1 GGUF)
// Each artifact loads its written model as the int4 blocks its grid packs
// into and runs, and on tokens the calibration never saw
// (held_out_logits.h) its logits are closer to the float model's than
// round-to-nearest's on the same grid.
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/artifact/manifest.h"
#include "runtime/weights/weight_store.h"
#include "test/e2e/held_out_logits.h"

namespace kiln {
namespace {

std::string artifactDir(const std::string& name) {
  const char* root = std::getenv("KILN_CALIBRATED_DIR");
  return std::string(root ? root : "$KILN_CALIBRATED_DIR") + "/" + name;
}

// The held-out logits of artifact `name`, [kSequences * kLength, vocab].
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
  return e2e::heldOutLogits(*manifest, *weights);
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
    const double error = e2e::relativeError(logits, float_);
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
