//===- Passes.h - kiln's compiler passes -----------------------*- C++ -*-===//
#pragma once

#include "mlir/Pass/Pass.h"

namespace kiln {

/// Registers every kiln pass and named pipeline with the global registry, so
/// kiln-opt and kiln-compile can run them by flag.
void registerKilnPasses();

}  // namespace kiln
