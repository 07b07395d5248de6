//===- StepParamAttrs.h - plan params as IR attributes ---------*- C++ -*-===//
//
// A step's params in the compiler's three forms: the attributes the
// kernel-level IR carries (`xfmr.kernel`'s params, a kernel variant's), the
// plan schema's typed struct (runtime/artifact/step_params.h) and the
// manifest's JSON. The IR's params are parsed into the schema here only, so
// the artifact writer and xfmr-select-kernels read the same typed params.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/artifact/step_params.h"

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Operation.h"
#include "mlir/Support/LogicalResult.h"
#include "llvm/Support/JSON.h"

#include <optional>

namespace kiln {

/// A param attribute as the plan schema takes it: integer, float, bool,
/// string, element type (by its plan spelling) or integer list; nullopt for
/// any other attribute.
std::optional<ParamValue> paramValue(mlir::Attribute attr);

/// The attribute for a plan param: i64, f64, bool, string or array<i64>.
mlir::Attribute paramAttr(mlir::MLIRContext* context, const ParamValue& value);

/// The manifest's JSON for a plan param.
llvm::json::Value paramJson(const ParamValue& value);

/// The typed params of a step of `kind` whose IR params are `params`,
/// parsed and range-checked as the runtime will read them, so a plan the
/// runtime would reject is a compile error at `op`. nullopt (no error) for
/// kinds the schema does not have (speculative verify's tree_positions,
/// tree_mask, accept).
mlir::FailureOr<std::optional<StepParams>>
typedStepParams(mlir::Operation* op, llvm::StringRef kind, mlir::DictionaryAttr params);

}  // namespace kiln
