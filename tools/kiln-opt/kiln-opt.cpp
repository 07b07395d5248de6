//===- kiln-opt.cpp - kiln's opt-style driver ------------------------------===//
//
// Runs any kiln pass, or any pipeline, on xfmr IR:
//   kiln-opt model.mlir --xfmr-fuse-attention
//
//===----------------------------------------------------------------------===//

#include "compiler/Passes.h"
#include "dialects/xfmr/IR/XfmrDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char** argv) {
  mlir::DialectRegistry registry;
  registry.insert<kiln::xfmr::XfmrDialect, mlir::func::FuncDialect,
                  mlir::arith::ArithDialect, mlir::tensor::TensorDialect>();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::registerSymbolDCEPass();
  kiln::registerKilnPasses();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "kiln optimizer driver\n", registry));
}
