//===- Passes.h - kiln's compiler passes -----------------------*- C++ -*-===//
#pragma once

#include "dialects/xfmr/IR/XfmrDialect.h"
#include "runtime/artifact/plan_options.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

#include <memory>

namespace kiln {

#define GEN_PASS_DECL
#include "compiler/Passes.h.inc"

/// Registers every kiln pass and named pipeline with the global registry, so
/// kiln-opt and kiln-compile can run them by flag.
void registerKilnPasses();

}  // namespace kiln
