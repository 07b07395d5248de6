//===- Pipelines.cpp - kiln's named pass pipelines -------------------------===//

#include "compiler/Pipelines.h"

#include "compiler/Passes.h"

#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/StringExtras.h"

namespace kiln {

namespace {
llvm::Error invalid(const std::string& option, const std::string& value,
                    const char* accepted) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "invalid value '" + value + "' for " + option +
                                     ", expected " + accepted);
}
}  // namespace

llvm::Error validateCompileOptions(const CompileOptions& options) {
  if (!llvm::is_contained({"none", "int8", "int4", "fp8"}, options.quantWeights))
    return invalid("--quant-weights", options.quantWeights, "one of: none, int8, int4, fp8");
  if (!llvm::is_contained({"none", "bf16", "int8", "fp8"}, options.quantKv))
    return invalid("--quant-kv", options.quantKv, "one of: none, bf16, int8, fp8");
  if (options.quantGroupSize == 0 || options.quantGroupSize % 32 != 0)
    return invalid("--quant-group-size", std::to_string(options.quantGroupSize),
                   "a positive multiple of 32 (32, 64, 128, ...)");
  if (!llvm::isPowerOf2_32(options.pageSize) || options.pageSize > 256)
    return invalid("--page-size", std::to_string(options.pageSize),
                   "a power of two from 1 to 256");
  if (!llvm::is_contained({"greedy", "rejection"}, options.specMode))
    return invalid("--spec-mode", options.specMode, "one of: greedy, rejection");
  llvm::StringRef tree = options.specTree;
  if (tree != "none" && !tree.starts_with("chain:") && !tree.starts_with("widths:"))
    return invalid("--spec-tree", options.specTree,
                   "one of: none, chain:K (e.g. chain:4), widths:W1,W2,... (e.g. widths:2,2,1)");
  return llvm::Error::success();
}

void buildDefaultPipeline(mlir::OpPassManager& pm, const CompileOptions& options) {
  pm.addPass(mlir::createCanonicalizerPass());
  pm.addPass(createFuseAttention());
  PageKvCacheOptions paging;
  paging.pageSize = options.pageSize;
  pm.addPass(createPageKvCache(paging));
  InsertQuantizationOptions quant;
  quant.weights = options.quantWeights;
  quant.groupSize = options.quantGroupSize;
  quant.kv = options.quantKv;
  pm.addPass(createInsertQuantization(quant));
  if (options.specTree != "none") {
    ExpandSpecVerifyOptions spec;
    spec.tree = options.specTree;
    spec.mode = options.specMode;
    pm.addPass(createExpandSpecVerify(spec));
  }
  LowerToKernelsOptions lowering;
  lowering.activationType = options.activationType;
  pm.addPass(createLowerToKernels(lowering));
  pm.addPass(mlir::createCanonicalizerPass());
  pm.addPass(mlir::createCSEPass());
}

namespace {
struct DefaultPipelineOptions
    : public mlir::PassPipelineOptions<DefaultPipelineOptions> {
  Option<std::string> quantWeights{*this, "quant-weights",
                                   llvm::cl::desc("none, int8, int4, fp8"),
                                   llvm::cl::init("none")};
  Option<unsigned> quantGroupSize{*this, "quant-group-size",
                                  llvm::cl::desc("int4 group size"),
                                  llvm::cl::init(128)};
  Option<std::string> quantKv{*this, "quant-kv",
                              llvm::cl::desc("none, bf16, int8, fp8"),
                              llvm::cl::init("none")};
  Option<unsigned> pageSize{*this, "page-size", llvm::cl::desc("KV page size"),
                            llvm::cl::init(16)};
  Option<std::string> specTree{*this, "spec-tree",
                               llvm::cl::desc("none, chain:K, widths:..."),
                               llvm::cl::init("none")};
  Option<std::string> specMode{*this, "spec-mode",
                               llvm::cl::desc("greedy, rejection"),
                               llvm::cl::init("greedy")};
  Option<std::string> activationType{*this, "activation-type",
                                     llvm::cl::desc("f32, bf16, f16"),
                                     llvm::cl::init("f32")};
};
}  // namespace

void registerPipelines() {
  mlir::PassPipelineRegistration<DefaultPipelineOptions>(
      "kiln-default-pipeline",
      "Fuse, page, quantize, [expand speculative verify] and lower a model",
      [](mlir::OpPassManager& pm, const DefaultPipelineOptions& o) {
        CompileOptions options;
        options.quantWeights = o.quantWeights;
        options.quantGroupSize = o.quantGroupSize;
        options.quantKv = o.quantKv;
        options.pageSize = o.pageSize;
        options.specTree = o.specTree;
        options.specMode = o.specMode;
        options.activationType = o.activationType;
        buildDefaultPipeline(pm, options);
      });
}

}  // namespace kiln
