//===- XfmrDialect.h - xfmr dialect, types and ops -------------*- C++ -*-===//
#pragma once

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialects/xfmr/IR/XfmrDialect.h.inc"

#define GET_TYPEDEF_CLASSES
#include "dialects/xfmr/IR/XfmrTypes.h.inc"

// RopeAttr stores its frequencies as APFloat; MLIR 19 has no field parser for
// it, so parse a plain float literal and keep it in double precision.
namespace mlir {
template <>
struct FieldParser<llvm::APFloat> {
  static FailureOr<llvm::APFloat> parse(AsmParser& parser) {
    double value = 0;
    if (parser.parseFloat(value)) return failure();
    return llvm::APFloat(value);
  }
};
}  // namespace mlir

#define GET_ATTRDEF_CLASSES
#include "dialects/xfmr/IR/XfmrAttrs.h.inc"

#define GET_OP_CLASSES
#include "dialects/xfmr/IR/XfmrOps.h.inc"

namespace kiln::xfmr {
/// The element-type spelling kernels and the manifest use: a quantization
/// kind ("q4_1", "int8") or the builtin type ("f32", "bf16", "i32").
std::string elementTypeName(mlir::Type type);
/// A KV pool's type as kernels and the manifest's kv_cache spell it: the
/// i8 and f8E4M3FN pools, whose rows carry scales, by kiln's scheme names
/// "int8" and "fp8e4m3"; the float pools by elementTypeName.
std::string kvPoolTypeName(KvPoolType pool);
}  // namespace kiln::xfmr
