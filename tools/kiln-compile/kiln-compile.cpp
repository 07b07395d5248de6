//===- kiln-compile.cpp - model -> xfmr IR -> artifact ---------------------===//
//
//   kiln-compile MODEL --emit=xfmr          print the imported (unfused) module
//
// MODEL is a .gguf file or a Hugging Face checkpoint directory. Only the
// config and the tensor table are read, never the weight data.
//
//===----------------------------------------------------------------------===//

#include "compiler/Passes.h"
#include "dialects/xfmr/IR/XfmrDialect.h"
#include "models/formats/model_source.h"
#include "models/importer/LlamaImporter.h"
#include "runtime/support/model_cache.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/raw_ostream.h"

namespace cl = llvm::cl;

namespace {

cl::opt<std::string> modelPath(cl::Positional, cl::desc("<model.gguf | hf-dir>"),
                               cl::Required);

enum class EmitStage { Xfmr };
cl::opt<EmitStage> emit(
    "emit", cl::desc("Stop after a stage and print its output"),
    cl::values(clEnumValN(EmitStage::Xfmr, "xfmr",
                          "the imported, unfused xfmr module")),
    cl::init(EmitStage::Xfmr));

cl::opt<std::string> activationType(
    "activation-type", cl::desc("Activation element type: f32, bf16 or f16"),
    cl::init("f32"));

int fail(const std::string& message) {
  llvm::errs() << "kiln-compile: error: " << message << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  llvm::InitLLVM init(argc, argv);
  mlir::registerPassManagerCLOptions();
  mlir::registerAsmPrinterCLOptions();
  mlir::registerMLIRContextCLOptions();
  cl::ParseCommandLineOptions(argc, argv, "kiln model compiler\n");

  kiln::Result<std::string> path = kiln::resolveModel(modelPath);
  if (!path.ok()) return fail(path.error().message);
  auto source = kiln::formats::ModelSource::open(
      *path, kiln::formats::OpenMode::kHeaderOnly);
  if (!source.ok()) return fail(source.error().message);
  if (kiln::Status status = source->checkWeights(); !status.ok())
    return fail(status.error().message);

  mlir::MLIRContext context;
  kiln::ImportOptions options;
  options.activationType = activationType;
  mlir::OwningOpRef<mlir::ModuleOp> module =
      kiln::importModel(context, *source, options);
  if (!module) return 1;  // the diagnostic handler has printed why
  if (mlir::failed(mlir::verify(*module))) return 1;

  switch (emit) {
  case EmitStage::Xfmr:
    module->print(llvm::outs());
    llvm::outs() << "\n";
    return 0;
  }
  return 0;
}
