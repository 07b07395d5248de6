// GPTQ and AWQ checkpoints of a tiny random Llama (test/fixtures/int4-llama:
// GPTQ symmetric, GPTQ with act-order, AWQ; packed by the packages' own code,
// test/reference/make_int4_checkpoints.py), compiled by kiln-compile (a
// ctest fixture) and run on the CPU backend, token by token, every step's
// logits against the float64 numpy forward pass the script wrote over the
// packages' dequantized weights:
//  - with f32 activations (dequantize + sgemm), to f32 rounding for GPTQ,
//    and for AWQ to the f16 rounding of the q4_1 minimums it loads as
//    (up to 6e-3 of the logits' scale on this model);
//  - with the quantized dots (8-bit activation blocks, the default), to the
//    few 1e-4 in cosine that 8-bit activations cost.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <span>

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

using e2e::cosine;
using e2e::relativeDiff;

class Int4Llama : public ::testing::TestWithParam<std::string> {
 protected:
  // Every step of both sequences: kiln's logits beside the reference's.
  void forEachStep(cpu::LinearPath path, const std::function<void(std::span<const float>, std::span<const float>,
                                                                    const std::string&)>& check) {
    const char* root = std::getenv("KILN_INT4_LLAMA_DIR");
    ASSERT_NE(root, nullptr) << "KILN_INT4_LLAMA_DIR is not set (ctest sets it to the folder its fixtures compile "
                                "the artifacts into)";
    const char* source = std::getenv("KILN_SOURCE_ROOT");
    ASSERT_NE(source, nullptr) << "KILN_SOURCE_ROOT is not set";
    auto manifest = Manifest::load(std::string(root) + "/" + GetParam());
    ASSERT_TRUE(manifest.ok()) << manifest.error().message;
    auto weights = WeightStore::open(*manifest);
    ASSERT_TRUE(weights.ok()) << weights.error().message;
    auto executor = cpu::CpuExecutor::create(*manifest, *weights, kvPoolConfigFor(*manifest, 64), 64);
    ASSERT_TRUE(executor.ok()) << executor.error().message;
    std::ifstream in(std::string(source) + "/test/fixtures/int4-llama/" + GetParam() + "/reference.json");
    const nlohmann::json reference = nlohmann::json::parse(in);
    cpu::setQuantizedWeightPath(path);
    BlockPool& pool = (*executor)->blockPool();
    for (auto& [name, seq] : reference["sequences"].items()) {
      const auto tokens = seq["tokens"].get<std::vector<int32_t>>();
      const auto logits = seq["logits"].get<std::vector<std::vector<float>>>();
      ASSERT_EQ(tokens.size(), logits.size());
      BlockTable table(manifest->kv_cache.page_size);
      for (size_t p = 0; p < tokens.size(); ++p) {
        ASSERT_TRUE(table.append(pool, 1).ok());
        std::vector<int32_t> ids{tokens[p]}, positions{int32_t(p)}, slots(1);
        ASSERT_TRUE(table.slots(int64_t(p), slots).ok());
        std::vector<int32_t> blocks(table.blocks().begin(), table.blocks().end());
        std::vector<int32_t> query_start{0, 1}, kv_lens{int32_t(p + 1)};
        BatchInputs batch{ids, positions, slots, blocks, int(blocks.size()), query_start, kv_lens};
        std::vector<float> out(size_t((*executor)->vocabSize()));
        Status status = (*executor)->forward(batch, out);
        ASSERT_TRUE(status.ok()) << status.error().message;
        check(out, logits[p], GetParam() + " sequence " + name + " position " + std::to_string(p));
      }
      table.release(pool);
    }
    cpu::setQuantizedWeightPath(cpu::LinearPath::kQuantDot);
  }
};

TEST_P(Int4Llama, F32ActivationsMatchThePackagesDequantizedModel) {
  double worst = 0.0;
  forEachStep(cpu::LinearPath::kDequantSgemm,
              [&](std::span<const float> kiln, std::span<const float> ref, const std::string& where) {
                worst = std::max(worst, relativeDiff(kiln, ref));
                // AWQ's minimums are q4_1's f16 m = -scale·zero: off by up to
                // 15·scale·2^-11, the same for a whole group.
                EXPECT_LT(relativeDiff(kiln, ref), GetParam() == "awq" ? 1e-2 : 1e-5) << where;
              });
  std::printf("%s, f32 activations: worst relative logit difference %.2g\n", GetParam().c_str(), worst);
}

TEST_P(Int4Llama, QuantizedDotsStayCloseToThePackagesDequantizedModel) {
  double worst = 1.0;
  forEachStep(cpu::LinearPath::kQuantDot,
              [&](std::span<const float> kiln, std::span<const float> ref, const std::string& where) {
                worst = std::min(worst, cosine(kiln, ref));
                EXPECT_GE(cosine(kiln, ref), GetParam() == "awq" ? 0.998 : 0.999) << where;
              });
  std::printf("%s, 8-bit activations: worst cosine %.6f\n", GetParam().c_str(), worst);
}

INSTANTIATE_TEST_SUITE_P(Formats, Int4Llama, ::testing::Values("gptq", "gptq-actorder", "awq"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace kiln
