//===- kiln-compile.cpp - model -> xfmr IR -> artifact ---------------------===//
//
//   kiln-compile MODEL -o DIR [options]      write the artifact (manifest.json)
//   kiln-compile MODEL --emit=xfmr           the imported, unfused module
//   kiln-compile MODEL --emit=kernels        the module after the pipeline
//   kiln-compile MODEL --emit=manifest       the manifest, to stdout
//
// MODEL is a .gguf file, a Hugging Face checkpoint directory, or the name of
// a model in the cache (`smollm2`). Only the config and the tensor table are
// read, never the weight data, except when quantizing with a method:
//
//   kiln-compile MODEL -o DIR --quant-weights=int4 --quant-method=gptq|awq
//                --calibration FILE [--quant-group-size=G] [--quant-sym=B]
//   kiln-compile MODEL -o DIR --quant-weights=int4 --quant-sym=false
//
//   kiln-compile MODEL -o DIR --sparsity=2:4 --sparsity-method=sparsegpt
//                --calibration FILE [--quant-weights=int8|int4]
//
// which quantize or prune the decoder linears first (models/quantize: GPTQ,
// AWQ and SparseGPT run the model's f32 plan on the CPU over the
// calibration tokens), write the model into DIR (model.gguf, or a
// checkpoint in DIR/model) and compile that. Symmetric round-to-nearest,
// the default, quantizes at load instead (xfmr-insert-quantization), as
// magnitude 2:4 pruning prunes at load (xfmr-sparsify).
//
//===----------------------------------------------------------------------===//

#include "codegen/ArtifactWriter.h"
#include "codegen/cuda/artifact_kernels.h"
#include "compiler/Passes.h"
#include "compiler/Pipelines.h"
#include "dialects/xfmr/IR/XfmrDialect.h"
#include "models/formats/model_source.h"
#include "models/importer/LlamaImporter.h"
#include "models/importer/SsmImporter.h"
#include "models/quantize/model_quantizer.h"
#include "runtime/artifact/manifest.h"
#include "runtime/support/model_cache.h"
#include "runtime/weights/weight_store.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <filesystem>

namespace cl = llvm::cl;

namespace {

cl::opt<std::string> modelPath(cl::Positional, cl::desc("<model.gguf | hf-dir | cached name>"),
                               cl::Required);
cl::opt<std::string> outputDir("o", cl::desc("Write the artifact directory here"),
                               cl::value_desc("dir"));

enum class EmitStage { Xfmr, Kernels, Manifest, Artifact };
cl::opt<EmitStage> emit(
    "emit", cl::desc("Stop after a stage and print its output to stdout"),
    cl::values(clEnumValN(EmitStage::Xfmr, "xfmr", "the imported, unfused xfmr module"),
               clEnumValN(EmitStage::Kernels, "kernels",
                          "the kernel-level module after the pipeline"),
               clEnumValN(EmitStage::Manifest, "manifest", "the artifact's manifest.json")),
    cl::init(EmitStage::Artifact));

cl::opt<std::string> activationType("activation-type",
                                    cl::desc("Activation element type: f32, bf16 or f16"),
                                    cl::init(std::string(kiln::PlanOptions::kDefaultActivationType)));
cl::opt<std::string> residualType(
    "residual-type",
    cl::desc("Residual-stream element type (embedding output and residual sums): "
             "f32, bf16 or f16; default f32 for bf16/f16 activations, else the "
             "activation type"),
    cl::init(""));
cl::opt<std::string> quantWeights("quant-weights",
                                  cl::desc("Weight quantization: none, int8, int4, fp8"),
                                  cl::init(std::string(kiln::PlanOptions::kDefaultQuantWeights)));
cl::opt<unsigned> quantGroupSize("quant-group-size", cl::desc("int4 group size"),
                                 cl::init(kiln::PlanOptions::kDefaultQuantGroupSize));
cl::opt<std::string> quantKv("quant-kv", cl::desc("KV cache type: none, f16, bf16, int8, fp8"),
                             cl::init(std::string(kiln::PlanOptions::kDefaultQuantKv)));
cl::opt<std::string> sparsity("sparsity",
                              cl::desc("Structured sparsity of the decoder linears: none, 2:4 "
                                       "(docs/design/sparsity.md)"),
                              cl::init(std::string(kiln::PlanOptions::kDefaultSparsity)));
cl::opt<std::string> sparsityMethod(
    "sparsity-method",
    cl::desc("How the kept 2:4 weights are chosen: magnitude (at load), sparsegpt (needs --calibration)"),
    cl::init(std::string(kiln::PlanOptions::kDefaultSparsityMethod)));
cl::opt<unsigned> pageSize("page-size", cl::desc("KV cache page size in tokens"),
                           cl::init(kiln::PlanOptions::kDefaultPageSize));
cl::opt<std::string> specTree("spec-tree",
                              cl::desc("Speculative verify tree: none, chain:K, widths:W1,W2,..."),
                              cl::init(std::string(kiln::PlanOptions::kDefaultSpecTree)));
cl::opt<unsigned> specLayerskip("spec-layerskip",
                                cl::desc("LayerSkip self-draft entry: the first K layers + final norm + LM head "
                                         "(0: none; needs --spec-tree)"),
                                cl::init(0));
cl::opt<std::string> specMode("spec-mode", cl::desc("Speculative acceptance: greedy, rejection"),
                              cl::init(std::string(kiln::PlanOptions::kDefaultSpecMode)));
// The help text names every accepted target (kTargets, the list the
// validation checks).
const std::string targetHelp = "Device the CUDA kernel variants are chosen for: " +
                               std::string(kiln::kTargets) + " (cpu: none, a CPU-only plan)";
cl::opt<std::string> target("target", cl::desc(targetHelp),
                            cl::init(std::string(kiln::PlanOptions::kDefaultTarget)));
cl::opt<bool> megakernel("megakernel",
                          cl::desc("Cut the forward entry into the persistent decode kernel's tasks, counters "
                                   "and order (the manifest's megakernel section; default off: "
                                   "--megakernel=false)"),
                          cl::init(false));
cl::opt<unsigned> tensorParallel("tensor-parallel",
                                 cl::desc("Tensor-parallel ranks: each layer's heads and MLP features split N "
                                          "ways (-o writes one artifact per rank, DIR/rank-K/)"),
                                 cl::init(kiln::PlanOptions::kDefaultTensorParallel));
cl::opt<unsigned> pipelineParallel("pipeline-parallel",
                                   cl::desc("Pipeline stages: the layer stack cut M ways (-o writes one "
                                            "artifact per rank, DIR/rank-K/)"),
                                   cl::init(kiln::PlanOptions::kDefaultPipelineParallel));
cl::opt<unsigned> emitRank("rank",
                           cl::desc("With --emit and --tensor-parallel/--pipeline-parallel: the rank K "
                                    "(stage K / N, shard K % N) to print"),
                           cl::init(0));
cl::opt<bool> printIrAfterAll("print-ir-after-all",
                              cl::desc("Print the IR after every pass (to stderr)"));

using kiln::quantize::QuantizeOptions;
cl::opt<std::string> quantMethod(
    "quant-method",
    cl::desc("How int4 weights are quantized: rtn (round to nearest), gptq or awq (both need "
             "--calibration)"),
    cl::init("rtn"));
cl::opt<cl::boolOrDefault> quantSym(
    "quant-sym",
    cl::desc("Symmetric int4 groups (q4_0) or with zero points (false: q4_1); default true, "
             "false for awq"));
cl::opt<bool> quantActOrder("quant-act-order",
                            cl::desc("GPTQ: quantize columns by decreasing activation energy"));
cl::opt<double> quantDamp("quant-damp",
                          cl::desc("GPTQ, SparseGPT: dampening added to the Hessian's diagonal, a "
                                   "fraction of its mean"),
                          cl::init(QuantizeOptions::kDefaultDamp));
cl::opt<bool> quantClip("quant-clip", cl::desc("AWQ: search each group's clipping range"),
                        cl::init(true));
cl::opt<std::string> calibration(
    "calibration",
    cl::desc("Calibration data for gptq, awq and sparsegpt: text (the model's tokenizer), or a "
             ".json array of token ids"),
    cl::value_desc("file"));
cl::opt<int64_t> calibrationCtx("calibration-ctx", cl::desc("Tokens a calibration sequence"),
                                cl::init(QuantizeOptions::kDefaultCalibrationCtx));
cl::opt<int64_t> calibrationTokens(
    "calibration-tokens",
    cl::desc("Calibration tokens at most, all run in one forward pass (memory: the plan's bytes "
             "per token times this)"),
    cl::init(QuantizeOptions::kDefaultCalibrationTokens));

int fail(const std::string& message) {
  llvm::errs() << "kiln-compile: error: " << message << "\n";
  return 1;
}

// Size and newest mtime of the model's files, and each file's sampled
// content hash (the runtime's own stamp), so the runtime can tell when the
// weights changed after compilation.
kiln::Result<kiln::ModelIdentity> identify(const std::string& path, bool gguf) {
  auto stamp = kiln::sourceStamp(path);
  if (!stamp.ok()) return stamp.error();
  kiln::ModelIdentity identity;
  std::error_code ec;
  identity.path = std::filesystem::absolute(path, ec).lexically_normal().string();
  identity.format = gguf ? "gguf" : "safetensors";
  identity.sizeBytes = stamp->size;
  identity.mtimeSeconds = stamp->mtime;
  for (const kiln::SourceFileStamp& f : stamp->files)
    identity.files.push_back({f.file, f.size, f.mtime, f.sampled_hash});
  return identity;
}

// The model at `path` through the importer (a state-space checkpoint's,
// Mamba / Mamba-2 / Nemotron-H, or the transformer one), the pipeline and
// the manifest builder: 0 with `manifest` set; 0 with it unset after
// printing the module where `emit` (xfmr, kernels) stops; 1 after printing
// an error.
int compileModel(const std::string& path, const kiln::CompileOptions& options, EmitStage emit,
                 bool printIr, std::optional<llvm::json::Value>& manifest) {
  mlir::MLIRContext context;
  kiln::ImportOptions importOptions;
  importOptions.activationType = options.activation_type;
  // The residual stream defaults to f32 whatever the activation type: with
  // bf16 activations it keeps 16 layers of sums from being rounded to bf16.
  importOptions.residualType = residualType.empty() ? std::string("f32")
                                                    : residualType.getValue();
  mlir::OwningOpRef<mlir::ModuleOp> module;
  bool gguf = false;
  if (kiln::formats::SsmSource::isSsmCheckpoint(path)) {
    auto source = kiln::formats::SsmSource::open(path, kiln::formats::OpenMode::kHeaderOnly);
    if (!source.ok()) return fail(source.error().message);
    if (kiln::Status status = source->checkWeights(); !status.ok()) return fail(status.error().message);
    module = kiln::importSsmModel(context, *source, importOptions);
  } else {
    auto source = kiln::formats::ModelSource::open(path, kiln::formats::OpenMode::kHeaderOnly);
    if (!source.ok()) return fail(source.error().message);
    if (kiln::Status status = source->checkWeights(); !status.ok())
      return fail(status.error().message);
    for (const std::string& notice : source->notices()) llvm::errs() << "kiln-compile: note: " << notice << "\n";
    gguf = source->format() == kiln::formats::ModelSource::Format::kGguf;
    module = kiln::importModel(context, *source, importOptions);
  }
  if (!module) return 1;  // the diagnostic handler has printed why
  if (mlir::failed(mlir::verify(*module))) return 1;
  if (emit == EmitStage::Xfmr) {
    module->print(llvm::outs());
    llvm::outs() << "\n";
    return 0;
  }

  mlir::PassManager pm(&context);
  if (mlir::failed(mlir::applyPassManagerCLOptions(pm))) return 1;
  if (printIr) {
    context.disableMultithreading();
    pm.enableIRPrinting(
        /*shouldPrintBeforePass=*/[](mlir::Pass*, mlir::Operation*) { return false; },
        /*shouldPrintAfterPass=*/[](mlir::Pass*, mlir::Operation*) { return true; },
        /*printModuleScope=*/true, /*printAfterOnlyOnChange=*/false);
  }
  kiln::buildDefaultPipeline(pm, options);
  if (mlir::failed(pm.run(*module))) return 1;
  if (emit == EmitStage::Kernels) {
    module->print(llvm::outs());
    llvm::outs() << "\n";
    return 0;
  }

  kiln::Result<kiln::ModelIdentity> identity = identify(path, gguf);
  if (!identity.ok()) return fail(identity.error().message);
  manifest = kiln::buildManifest(*module, *identity, options, options.activation_type);
  return manifest ? 0 : 1;
}

// manifest.json in `dir`, and beside it a bf16 plan's kernel instances
// (readable sources; the CUDA runtime JIT-compiles them at load).
int writeArtifact(const std::string& dir, const llvm::json::Value& manifest) {
  if (std::error_code ec = llvm::sys::fs::create_directories(dir))
    return fail("cannot create " + dir + ": " + ec.message());
  llvm::SmallString<256> manifestPath(dir);
  llvm::sys::path::append(manifestPath, "manifest.json");
  std::error_code ec;
  llvm::raw_fd_ostream out(manifestPath, ec);
  if (ec) return fail("cannot write " + manifestPath.str().str() + ": " + ec.message());
  out << llvm::formatv("{0:2}", manifest) << "\n";
  out.close();
  if (out.has_error()) return fail("cannot write " + manifestPath.str().str());
  llvm::errs() << "kiln-compile: wrote " << manifestPath << "\n";
  if (activationType == "bf16") {
    auto kernels = kiln::cuda_codegen::writeInstanceSources(dir);
    if (!kernels.ok()) return fail(kernels.error().message);
    llvm::errs() << "kiln-compile: kernels/: " << kernels->written.size() << " written, "
                 << kernels->unchanged.size() << " unchanged\n";
    for (const std::string& missing : kernels->unsupported)
      llvm::errs() << "kiln-compile: note: no CUDA kernel yet for " << missing << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  llvm::InitLLVM init(argc, argv);
  mlir::registerPassManagerCLOptions();
  mlir::registerAsmPrinterCLOptions();
  mlir::registerMLIRContextCLOptions();
  kiln::registerKilnPasses();
  cl::ParseCommandLineOptions(argc, argv, "kiln model compiler\n");

  kiln::CompileOptions options;
  options.quant_weights = quantWeights;
  options.quant_group_size = quantGroupSize;
  options.quant_kv = quantKv;
  options.page_size = pageSize;
  options.sparsity = sparsity;
  options.sparsity_method = sparsityMethod;
  options.spec_tree = specTree;
  options.spec_mode = specMode;
  options.spec_layerskip = specLayerskip;
  options.activation_type = activationType;
  options.target = target;
  options.megakernel = megakernel;
  options.tensor_parallel = tensorParallel;
  options.pipeline_parallel = pipelineParallel;
  if (emit != EmitStage::Artifact) {
    options.tp_rank = emitRank % std::max(1u, tensorParallel.getValue());
    options.pp_stage = emitRank / std::max(1u, tensorParallel.getValue());
  }
  if (kiln::Status status = kiln::validatePlanOptions(options); !status.ok())
    return fail(status.error().message);
  if (emit == EmitStage::Artifact && outputDir.empty())
    return fail("no output: give -o DIR for the artifact, or --emit=xfmr|kernels|manifest");

  QuantizeOptions quant;
  quant.method = quantMethod;
  quant.sparsegpt = sparsityMethod == "sparsegpt";
  quant.grid = {.group = int64_t(quantGroupSize.getValue()),
                .sym = quantSym == cl::BOU_UNSET ? quantMethod != "awq" : quantSym == cl::BOU_TRUE};
  quant.act_order = quantActOrder;
  quant.damp = quantDamp;
  quant.clip = quantClip;
  quant.calibration = calibration;
  quant.calibration_ctx = calibrationCtx;
  quant.calibration_tokens = calibrationTokens;
  kiln::quantize::GivenFlags given;
  given.act_order = quantActOrder.getNumOccurrences() > 0;
  given.damp = quantDamp.getNumOccurrences() > 0;
  given.clip = quantClip.getNumOccurrences() > 0;
  given.calibration = calibration.getNumOccurrences() > 0;
  given.calibration_ctx = calibrationCtx.getNumOccurrences() > 0;
  given.calibration_tokens = calibrationTokens.getNumOccurrences() > 0;
  given.sym = quantSym != cl::BOU_UNSET;
  if (kiln::Status status = kiln::quantize::validateQuantizeOptions(quant, quantWeights, sparsity, given);
      !status.ok())
    return fail(status.error().message);
  if (quant.writesModel() && emit != EmitStage::Artifact)
    return fail(quant.writerFlag() + " writes the " + (quant.sparsegpt ? "pruned" : "quantized") +
                " model into the artifact: give -o DIR, not --emit");

  kiln::Result<std::string> path = kiln::resolveModel(modelPath);
  if (!path.ok()) return fail(path.error().message);
  // A checkpoint pruned to 2:4 (compressed-tensors' sparsity_config) stays 2:4 unless told
  // otherwise; not through a quantizer, whose rewritten weights are no longer the pruned ones.
  if (sparsity.getNumOccurrences() == 0 && !quant.writesModel()) {
    auto source = kiln::formats::ModelSource::open(*path, kiln::formats::OpenMode::kHeaderOnly);
    if (source.ok() && source->decoderLinearsAre24()) {
      options.sparsity = "2:4";
      llvm::errs() << "kiln-compile: " << *path
                   << ": sparsity_config says 2:4; compiling with --sparsity=2:4\n";
      if (kiln::Status status = kiln::validatePlanOptions(options); !status.ok())
        return fail(status.error().message);
    }
  }
  if (quant.writesModel()) {
    auto log = [](const std::string& line) { llvm::errs() << "kiln-compile: " << line << "\n"; };
    std::optional<kiln::Manifest> plan;
    if (quant.calibrated()) {
      // SparseGPT prunes a GGUF's block-typed linears as f32: the plan runs a
      // copy with them dequantized.
      if (quant.sparsegpt) {
        path = kiln::quantize::floatLinearsModel(*path, quant, outputDir, log);
        if (!path.ok()) return fail(path.error().message);
      }
      // The model as it is, f32 on the CPU: what calibration runs.
      kiln::CompileOptions planOptions;
      planOptions.target = "cpu";
      std::optional<llvm::json::Value> planJson;
      if (int status = compileModel(*path, planOptions, EmitStage::Artifact, /*printIr=*/false,
                                    planJson);
          status != 0 || !planJson)
        return 1;
      auto parsed = kiln::Manifest::parse(llvm::formatv("{0}", *planJson).str(),
                                          *path + " (calibration plan)");
      if (!parsed.ok()) return fail(parsed.error().message);
      plan.emplace(parsed.take());
    }
    auto written = kiln::quantize::quantizeModel(*path, plan ? &*plan : nullptr, quant, outputDir, log);
    if (!written.ok()) return fail(written.error().message);
    path = *written;
  }

  const unsigned worldSize = options.tensor_parallel * options.pipeline_parallel;
  if (emit != EmitStage::Artifact || worldSize == 1) {
    std::optional<llvm::json::Value> manifest;
    if (int status = compileModel(*path, options, emit, printIrAfterAll, manifest); status != 0)
      return status;
    if (!manifest) return 0;  // a stage was printed
    if (emit == EmitStage::Manifest) {
      llvm::outs() << llvm::formatv("{0:2}", *manifest) << "\n";
      return 0;
    }
    return writeArtifact(outputDir, *manifest);
  }

  // One artifact per rank, each compiled for its own shard and stage; rank
  // K is stage K / N, shard K % N (a stage's shards are neighbours).
  llvm::json::Array ranks;
  for (unsigned rank = 0; rank < worldSize; ++rank) {
    kiln::CompileOptions rankOptions = options;
    rankOptions.tp_rank = rank % options.tensor_parallel;
    rankOptions.pp_stage = rank / options.tensor_parallel;
    std::optional<llvm::json::Value> manifest;
    if (int status = compileModel(*path, rankOptions, emit, printIrAfterAll, manifest); status != 0)
      return status;
    const std::string dir = "rank-" + std::to_string(rank);
    llvm::SmallString<256> rankDir(outputDir);
    llvm::sys::path::append(rankDir, dir);
    if (int status = writeArtifact(rankDir.str().str(), *manifest); status != 0) return status;
    ranks.push_back(llvm::json::Object{{"rank", int64_t(rank)},
                                       {"tp_rank", int64_t(rankOptions.tp_rank)},
                                       {"pp_stage", int64_t(rankOptions.pp_stage)},
                                       {"artifact", dir}});
  }
  llvm::json::Object layout{{"world_size", int64_t(worldSize)},
                            {"tensor_parallel", int64_t(options.tensor_parallel)},
                            {"pipeline_parallel", int64_t(options.pipeline_parallel)},
                            {"ranks", std::move(ranks)}};
  llvm::SmallString<256> layoutPath(outputDir);
  llvm::sys::path::append(layoutPath, "parallel.json");
  std::error_code ec;
  llvm::raw_fd_ostream out(layoutPath, ec);
  if (ec) return fail("cannot write " + layoutPath.str().str() + ": " + ec.message());
  out << llvm::formatv("{0:2}", llvm::json::Value(std::move(layout))) << "\n";
  out.close();
  if (out.has_error()) return fail("cannot write " + layoutPath.str().str());
  llvm::errs() << "kiln-compile: wrote " << layoutPath << "\n";
  return 0;
}
