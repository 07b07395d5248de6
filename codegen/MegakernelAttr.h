//===- MegakernelAttr.h - the megakernel's task graph as an attribute -*- C++ -*-===//
//
// The task graph xfmr-plan-megakernel makes for an entry
// (runtime/artifact/megakernel.h) as the attribute the entry's func carries,
// `xfmr.megakernel`, which kiln-opt prints and the artifact writer turns
// into the entry's "megakernel" section:
//
//   func.func @forward(...) attributes {xfmr.megakernel = {
//       max_batch = 2 : i64, tile = 64 : i64,
//       counters = [{final = 1 : i64, id = 0 : i64, step = 0 : i64}, ...],
//       tasks = [{kind = "gemm", step = 2 : i64, columns = array<i64: 0, 64>,
//                 waits = array<i64: 1, 1>, signals = array<i64: 2>},
//                {kind = "paged_attention", step = 4 : i64, sequence = 0 : i64,
//                 kv_head = 1 : i64, waits = array<i64: 3, 1>, signals = array<i64: 4>}, ...]}}
//
// `waits` is flat (counter, value) pairs; columns only for gemm tasks,
// sequence and kv_head only for paged_attention tasks.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/artifact/megakernel.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Operation.h"
#include "mlir/Support/LogicalResult.h"
#include "llvm/Support/JSON.h"

#include <optional>

namespace kiln {

inline constexpr llvm::StringLiteral kMegakernelAttrName = "xfmr.megakernel";

mlir::DictionaryAttr megakernelAttr(mlir::MLIRContext* context, const MegakernelPlan& plan);

/// The plan `attr` holds; emits an error at `op` naming the field and fails
/// if it is not of the shape above.
mlir::FailureOr<MegakernelPlan> megakernelFromAttr(mlir::Operation* op, mlir::DictionaryAttr attr);

/// The entry's "megakernel" section for `op`'s `xfmr.megakernel`
/// (toJson(MegakernelPlan)); nullopt after an error at `op`.
std::optional<llvm::json::Value> megakernelJson(mlir::Operation* op, mlir::Attribute attr);

}  // namespace kiln
