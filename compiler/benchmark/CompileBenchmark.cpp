//===- CompileBenchmark.cpp - compile time of whole models -----------------===//
//
// The compiler's own speed: import + default pipeline + manifest for the
// Llama-3-8B and Llama-3.2-1B configs (header-only checkpoints: no weight
// data). The budget is 2 s for Llama-3-8B; the `budget_ratio`
// counter prints the measured time over that budget (< 1 meets it).
//
//===----------------------------------------------------------------------===//

#include "codegen/ArtifactWriter.h"
#include "compiler/Passes.h"
#include "compiler/Pipelines.h"
#include "models/formats/model_source.h"
#include "models/importer/LlamaImporter.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>

namespace {

constexpr double kBudgetSeconds = 2.0;

void compileModel(benchmark::State& state, const std::string& path) {
  double seconds = 0;
  for (auto _ : state) {
    auto start = std::chrono::steady_clock::now();
    auto source = kiln::formats::ModelSource::open(path, kiln::formats::OpenMode::kHeaderOnly);
    if (!source.ok()) {
      state.SkipWithError(source.error().message.c_str());
      return;
    }
    mlir::MLIRContext context;
    context.disableMultithreading();
    auto module = kiln::importModel(context, *source);
    mlir::PassManager pm(&context);
    kiln::CompileOptions options;
    kiln::buildDefaultPipeline(pm, options);
    if (!module || mlir::failed(pm.run(*module))) {
      state.SkipWithError("compilation failed");
      return;
    }
    auto manifest = kiln::buildManifest(*module, {path, "safetensors", 0, 0}, options, "f32");
    benchmark::DoNotOptimize(manifest);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  // Mean compile time over the 2 s budget: below 1 meets it.
  state.counters["budget_ratio"] = seconds / double(state.iterations()) / kBudgetSeconds;
}

}  // namespace

// The header-only checkpoints in the checkout: $KILN_SOURCE_ROOT, else the
// current folder (run from the checkout's root).
std::string checkoutModel(const char* name) {
  const char* root = std::getenv("KILN_SOURCE_ROOT");
  return std::string(root && *root ? root : ".") + "/test/models/" + name;
}

BENCHMARK_CAPTURE(compileModel, llama3_8b, checkoutModel("llama3-8b"))
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);
BENCHMARK_CAPTURE(compileModel, llama3_2_1b,
                  checkoutModel("llama3.2-1b"))
    ->Unit(benchmark::kMillisecond)
    ->MinTime(1.0);

BENCHMARK_MAIN();
