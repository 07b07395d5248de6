//===- EntryLayout.h - one entry's values, steps and arena -----*- C++ -*-===//
//
// One kernel-level function (after xfmr-lower-to-kernels) as the plan lays
// it out: its activations numbered in program order and placed in the arena,
// and its steps (xfmr.kernel and xfmr.gemm ops) with typed params, operands
// and results. The artifact writer writes the manifest's entry from it and
// xfmr-select-kernels chooses kernels over it, so both see the same value
// ids, arena rows and steps.
//
// Arena offsets are in bytes per row of the token budget: a value of
// row_bytes bytes per row at offset o lives at [o * T, (o + row_bytes) * T)
// for a budget of T rows. Values whose live ranges (in steps) overlap never
// share rows; a view (xfmr.reshape of a value) shares its source's storage
// and keeps it alive; entry outputs live to the end.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/artifact/step_params.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Support/LogicalResult.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

/// One activation of the entry.
struct PlannedValue {
  int id = 0;
  mlir::RankedTensorType type;
  bool perSequence = false;  // rows are sequences (after gather_last_tokens)
  int64_t rowBytes = 0;      // bytes of one row (all of it for fixed-shape values)
  int viewOf = -1;           // the value whose storage it shares (never itself a view)
  int defined = 0, lastUse = 0;  // its live range, in step indices
  int64_t offset = 0;        // bytes per row of the token budget; views: unused
};

/// What a step operand is: an entry argument (an input or a KV pool), a
/// weight (a checkpoint tensor or its load-time preparation), or a value.
struct StepOperand {
  enum class Kind { kArgument, kWeight, kValue };
  Kind kind = Kind::kValue;
  mlir::Value value;
  int valueId = -1;  // kValue
};

/// One step: an xfmr.kernel or xfmr.gemm.
struct PlannedStep {
  mlir::Operation* op = nullptr;
  std::string kind;
  /// The params as the IR names them; a gemm's are made from its operand
  /// types (n, k, weight_type, bias, scales) and its role.
  mlir::DictionaryAttr params;
  /// The same, parsed by the plan schema; nullopt for kinds it does not
  /// have (speculative verify's tree_positions, tree_mask, accept).
  std::optional<StepParams> typedParams;
  std::string instance;  // kernelInstanceName of the kind and params (a gemm's without role)
  std::vector<StepOperand> operands;
  std::vector<int> results;  // value ids
};

struct PlannedOutput {
  std::string name;  // "logits", its xfmr.name, or "resultN"
  int value = 0;
};

struct EntryLayout {
  std::vector<PlannedValue> values;  // by id
  std::vector<PlannedStep> steps;    // in program order
  std::vector<PlannedOutput> outputs;
  /// Every weight value the entry reads, each once, in the order the
  /// manifest numbers them: a load-time preparation (concat, quantize) where
  /// its op stands, any other weight at the first step reading it.
  std::vector<mlir::Value> weights;
  int64_t bytesPerToken = 0;  // the arena's size per row of the token budget
};

/// Lays out `func`; emits a diagnostic at the offending op and fails if it
/// is not at kernel level or a value cannot be planned.
mlir::FailureOr<EntryLayout> layoutEntry(mlir::func::FuncOp func);

/// Whether `value` is computed from weights alone in a form the artifact
/// prepares at load time: a checkpoint tensor, a row concat or a quantize.
bool isWeightValue(mlir::Value value);

/// A readable, file-name-safe name for one kernel instance: its kind and
/// compile-time parameters, e.g. "rms_norm_epsilon1em05_hidden576".
std::string kernelInstanceName(llvm::StringRef kind, mlir::DictionaryAttr params);

}  // namespace kiln
