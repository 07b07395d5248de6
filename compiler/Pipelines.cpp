//===- Pipelines.cpp - kiln's named pass pipelines -------------------------===//

#include "compiler/Pipelines.h"

#include "compiler/Passes.h"

#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/StringExtras.h"

namespace kiln {

void buildDefaultPipeline(mlir::OpPassManager& pm, const CompileOptions& options) {
  pm.addPass(mlir::createCanonicalizerPass());
  pm.addPass(createFuseAttention());
  // Sharded after fusion, which merges QKV and gate/up and forms the regions
  // whose types the shard rewrites, and before paging, which then sizes each
  // rank's KV pools from its past KV: every later pass sees an ordinary
  // (narrower) model plus all_reduce ops.
  if (options.tensor_parallel > 1) {
    ShardTensorParallelOptions shard;
    shard.size = options.tensor_parallel;
    shard.rank = options.tp_rank;
    pm.addPass(createShardTensorParallel(shard));
  }
  PageKvCacheOptions paging;
  paging.pageSize = options.page_size;
  pm.addPass(createPageKvCache(paging));
  // Cut after paging: each layer is found by its KV pool.
  if (options.pipeline_parallel > 1) {
    SplitPipelineStagesOptions stages;
    stages.size = options.pipeline_parallel;
    stages.stage = options.pp_stage;
    pm.addPass(createSplitPipelineStages(stages));
  }
  // After paging: attention layers' query_start is the one the scans take.
  pm.addPass(createPoolSsmState());
  if (options.sparsity != "none") {
    SparsifyOptions sparsify;
    sparsify.pattern = options.sparsity;
    sparsify.method = options.sparsity_method;
    pm.addPass(createSparsify(sparsify));
  }
  InsertQuantizationOptions quant;
  quant.weights = options.quant_weights;
  quant.groupSize = options.quant_group_size;
  quant.kv = options.quant_kv;
  pm.addPass(createInsertQuantization(quant));
  if (options.spec_tree != "none") {
    ExpandSpecVerifyOptions spec;
    spec.tree = options.spec_tree;
    spec.mode = options.spec_mode;
    pm.addPass(createExpandSpecVerify(spec));
    if (options.spec_layerskip > 0) {
      ExpandSpecDraftOptions draft;
      draft.layers = options.spec_layerskip;
      pm.addPass(createExpandSpecDraft(draft));
    }
  }
  LowerToKernelsOptions lowering;
  lowering.activationType = options.activation_type;
  pm.addPass(createLowerToKernels(lowering));
  pm.addPass(mlir::createCanonicalizerPass());
  pm.addPass(mlir::createCSEPass());
  // Last: the choice reads the final values' numbering and arena rows.
  SelectKernelsOptions selection;
  selection.target = options.target;
  selection.activationType = options.activation_type;
  pm.addPass(createSelectKernels(selection));
  // Reads the same layout the selection did.
  if (options.megakernel) pm.addPass(createPlanMegakernel());
}

namespace {
struct DefaultPipelineOptions
    : public mlir::PassPipelineOptions<DefaultPipelineOptions> {
  Option<std::string> quantWeights{*this, "quant-weights",
                                   llvm::cl::desc("none, int8, int4, fp8"),
                                   llvm::cl::init(std::string(PlanOptions::kDefaultQuantWeights))};
  Option<unsigned> quantGroupSize{*this, "quant-group-size",
                                  llvm::cl::desc("int4 group size"),
                                  llvm::cl::init(PlanOptions::kDefaultQuantGroupSize)};
  Option<std::string> quantKv{*this, "quant-kv",
                              llvm::cl::desc("none, f16, bf16, int8, fp8"),
                              llvm::cl::init(std::string(PlanOptions::kDefaultQuantKv))};
  Option<std::string> sparsity{*this, "sparsity", llvm::cl::desc("none, 2:4"),
                               llvm::cl::init(std::string(PlanOptions::kDefaultSparsity))};
  Option<std::string> sparsityMethod{*this, "sparsity-method", llvm::cl::desc("magnitude, sparsegpt"),
                                     llvm::cl::init(std::string(PlanOptions::kDefaultSparsityMethod))};
  Option<unsigned> pageSize{*this, "page-size", llvm::cl::desc("KV page size"),
                            llvm::cl::init(PlanOptions::kDefaultPageSize)};
  Option<std::string> specTree{*this, "spec-tree",
                               llvm::cl::desc("none, chain:K, widths:..."),
                               llvm::cl::init(std::string(PlanOptions::kDefaultSpecTree))};
  Option<std::string> specMode{*this, "spec-mode",
                               llvm::cl::desc("greedy, rejection"),
                               llvm::cl::init(std::string(PlanOptions::kDefaultSpecMode))};
  Option<std::string> activationType{*this, "activation-type",
                                     llvm::cl::desc("f32, bf16, f16"),
                                     llvm::cl::init(std::string(PlanOptions::kDefaultActivationType))};
  Option<bool> megakernel{*this, "megakernel",
                          llvm::cl::desc("Cut @forward into the megakernel's tasks (xfmr-plan-megakernel)"),
                          llvm::cl::init(false)};
  Option<unsigned> tensorParallel{*this, "tensor-parallel", llvm::cl::desc("Tensor-parallel ranks"),
                                  llvm::cl::init(PlanOptions::kDefaultTensorParallel)};
  Option<unsigned> tpRank{*this, "tp-rank", llvm::cl::desc("This plan's tensor-parallel rank"),
                          llvm::cl::init(0)};
  Option<unsigned> pipelineParallel{*this, "pipeline-parallel", llvm::cl::desc("Pipeline stages"),
                                    llvm::cl::init(PlanOptions::kDefaultPipelineParallel)};
  Option<unsigned> ppStage{*this, "pp-stage", llvm::cl::desc("This plan's pipeline stage"),
                           llvm::cl::init(0)};
  Option<std::string> target{*this, "target",
                             llvm::cl::desc(llvm::StringRef(kTargets.data(), kTargets.size())),
                             llvm::cl::init(std::string(PlanOptions::kDefaultTarget))};
};
}  // namespace

void registerPipelines() {
  mlir::PassPipelineRegistration<DefaultPipelineOptions>(
      "kiln-default-pipeline",
      "Fuse, page, quantize, [expand speculative verify], lower a model and choose its kernels",
      [](mlir::OpPassManager& pm, const DefaultPipelineOptions& o) {
        CompileOptions options;
        options.quant_weights = o.quantWeights;
        options.quant_group_size = o.quantGroupSize;
        options.quant_kv = o.quantKv;
        options.page_size = o.pageSize;
        options.sparsity = o.sparsity;
        options.sparsity_method = o.sparsityMethod;
        options.spec_tree = o.specTree;
        options.spec_mode = o.specMode;
        options.activation_type = o.activationType;
        options.target = o.target;
        options.megakernel = o.megakernel;
        options.tensor_parallel = o.tensorParallel;
        options.tp_rank = o.tpRank;
        options.pipeline_parallel = o.pipelineParallel;
        options.pp_stage = o.ppStage;
        buildDefaultPipeline(pm, options);
      });
}

}  // namespace kiln
