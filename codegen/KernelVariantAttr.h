//===- KernelVariantAttr.h - kernel variants as IR attributes --*- C++ -*-===//
//
// The kernel variants xfmr-select-kernels chooses for a step
// (runtime/artifact/kernel_variant.h) as the attribute the step's op
// carries: `xfmr.variants`, an array of dictionaries in the manifest's shape
// (toJson(KernelVariant)),
//
//   xfmr.variants = [{role = "single_row", rows = array<i64: 1, 1>,
//                     needs = ["stream_gemv"], kind = "gemm",
//                     params = {gemv_max_rows = 1 : i64, ...},
//                     instance = "gemm_..."},
//                    {role = "cublaslt", rows = array<i64: 9, -1>}]
//
// needs only when not empty; kind, params and instance only for roles that
// run a kernel of their own; own_storage = true only when set. The module
// carries the target they were chosen for as `xfmr.target`. The artifact
// writer turns the attribute back into the step's "variants".
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/artifact/kernel_variant.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Operation.h"
#include "mlir/Support/LogicalResult.h"
#include "llvm/Support/JSON.h"

#include <optional>

namespace kiln {

inline constexpr llvm::StringLiteral kVariantsAttrName = "xfmr.variants";
inline constexpr llvm::StringLiteral kTargetAttrName = "xfmr.target";

/// `variant` as one element of `xfmr.variants`; emits an error at `op` and
/// fails if its params are not plan params (integers, numbers, booleans,
/// strings, integer lists).
mlir::FailureOr<mlir::DictionaryAttr> variantAttr(mlir::Operation* op, const KernelVariant& variant);

/// The manifest's "variants" array for `op`'s `xfmr.variants`; emits an
/// error at `op` and returns nullopt if the attribute is not of the shape
/// above (a role, rows and needs the plan does not know included).
std::optional<llvm::json::Array> variantsJson(mlir::Operation* op, mlir::Attribute variants);

}  // namespace kiln
