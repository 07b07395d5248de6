//===- ArtifactWriterTest.cpp - the written plan loads, variants included --===//
//
// Compiles checkout models through the default pipeline, writes the manifest
// and loads it as the runtime does (Manifest::parse). The kernel variants
// xfmr-select-kernels recorded must be exactly what the selection gives over
// the loaded plan (planEntryOf): the pass's layout of values, arena rows and
// steps is the one the writer wrote.
//
//===----------------------------------------------------------------------===//

#include "codegen/ArtifactWriter.h"
#include "codegen/cuda/kernel_selection.h"
#include "codegen/cuda/skinny_fusion.h"
#include "compiler/Pipelines.h"
#include "models/formats/model_source.h"
#include "models/importer/LlamaImporter.h"
#include "runtime/artifact/manifest.h"
#include "test/source_root.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/FormatVariadic.h"

#include <gtest/gtest.h>

#include <cctype>
#include <set>

namespace kiln {
namespace {

// `model` (a checkout path) compiled with `options`, loaded back.
Result<Manifest> compileAndLoad(const std::string& model, const CompileOptions& options) {
  const std::string path = checkoutPath(model);
  auto source = formats::ModelSource::open(path, formats::OpenMode::kHeaderOnly);
  if (!source.ok()) return source.error();
  mlir::MLIRContext context;
  context.disableMultithreading();
  ImportOptions import;
  import.activationType = options.activation_type;
  import.residualType = "f32";
  mlir::OwningOpRef<mlir::ModuleOp> module = importModel(context, *source, import);
  if (!module) return makeError("{}: import failed", path);
  mlir::PassManager pm(&context);
  buildDefaultPipeline(pm, options);
  if (mlir::failed(pm.run(*module))) return makeError("{}: the pipeline failed", path);
  std::optional<llvm::json::Value> manifest =
      buildManifest(*module, {path, "safetensors", 0, 0}, options, options.activation_type);
  if (!manifest) return makeError("{}: no manifest", path);
  return Manifest::parse(llvm::formatv("{0:2}", *manifest).str(), "manifest.json");
}

CompileOptions optionsFor(const std::string& activation_type, const std::string& target) {
  CompileOptions options;
  options.activation_type = activation_type;
  options.target = target;
  return options;
}

struct Case {
  std::string model, activation_type, target;
};

class WrittenVariants : public ::testing::TestWithParam<Case> {};

TEST_P(WrittenVariants, AreTheSelectionOverTheLoadedPlan) {
  const Case& c = GetParam();
  auto manifest = compileAndLoad(c.model, optionsFor(c.activation_type, c.target));
  ASSERT_TRUE(manifest.ok()) << manifest.error().message;
  EXPECT_EQ(manifest->target, c.target);
  const Entry& forward = *manifest->findEntry("forward");
  auto expected = cuda_codegen::selectKernels(cuda_codegen::planEntryOf(forward, c.activation_type),
                                              {c.target, c.activation_type});
  ASSERT_TRUE(expected.ok()) << expected.error().message;
  ASSERT_EQ(expected->size(), forward.steps.size());
  for (size_t i = 0; i < forward.steps.size(); ++i) {
    const std::vector<KernelVariant>& written = forward.steps[i].variants;
    ASSERT_EQ(written.size(), (*expected)[i].size()) << forward.steps[i].path;
    for (size_t v = 0; v < written.size(); ++v)
      EXPECT_EQ(toJson(written[v]), toJson((*expected)[i][v])) << forward.steps[i].path << ".variants[" << v << "]";
  }
}

INSTANTIATE_TEST_SUITE_P(Models, WrittenVariants,
                         ::testing::Values(Case{"test/models/tiny-llama", "bf16", "sm_90a"},
                                           Case{"test/models/tiny-llama", "bf16", "sm_80"},
                                           Case{"test/models/tiny-llama", "f32", "sm_90a"},
                                           Case{"test/models/tiny-qwen2", "bf16", "sm_90a"},
                                           Case{"test/models/llama3.2-1b", "bf16", "sm_90a"},
                                           Case{"test/models/llama3.2-1b", "bf16", "sm_100"}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           std::string name = info.param.model.substr(info.param.model.rfind('/') + 1) + "_" +
                                              info.param.activation_type + "_" + info.param.target;
                           for (char& c : name)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });

// A bf16 plan for Hopper: every gemm has its single-row and skinny kernels
// (fused ones where it folds a neighbour in) and cuBLASLt above 8 rows.
TEST(ArtifactWriterTest, Bf16GemmsHaveSkinnyAndCublasLtVariants) {
  auto manifest = compileAndLoad("test/models/tiny-llama", optionsFor("bf16", "sm_90a"));
  ASSERT_TRUE(manifest.ok()) << manifest.error().message;
  EXPECT_EQ(manifest->version, kManifestVersion);
  int gemms = 0;
  for (const Step& step : manifest->findEntry("forward")->steps) {
    if (step.kind != StepKind::kGemm) continue;
    ++gemms;
    std::set<std::string> roles;
    for (const KernelVariant& v : step.variants) roles.insert(variantRoleName(v.role));
    const bool fused = roles.count("fused");
    EXPECT_TRUE(roles.count(fused ? "fused_single_row" : "single_row")) << step.path;
    EXPECT_TRUE(roles.count(fused ? "fused" : "skinny")) << step.path;
    EXPECT_TRUE(roles.count("cublaslt")) << step.path;
  }
  EXPECT_EQ(gemms, 9);  // qkv, o, gate/up and down of two layers, and the logits
}

// Target cpu: a plan with no variants.
TEST(ArtifactWriterTest, CpuTargetHasNoVariants) {
  auto manifest = compileAndLoad("test/models/tiny-llama", optionsFor("f32", "cpu"));
  ASSERT_TRUE(manifest.ok()) << manifest.error().message;
  EXPECT_EQ(manifest->target, "cpu");
  for (const Step& step : manifest->findEntry("forward")->steps) EXPECT_TRUE(step.variants.empty()) << step.path;
}

}  // namespace
}  // namespace kiln
