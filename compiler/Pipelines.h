//===- Pipelines.h - kiln's named pass pipelines ---------------*- C++ -*-===//
#pragma once

#include "mlir/Pass/PassManager.h"
#include "runtime/artifact/plan_options.h"

#include <string>

namespace kiln {

/// Everything a user can choose when compiling a model, with its defaults
/// and validation (validatePlanOptions), shared with the runtime side.
using CompileOptions = PlanOptions;

/// canonicalize → fuse-attention → [shard-tensor-parallel] → page-kv-cache →
/// [split-pipeline-stages] → pool-ssm-state → [sparsify] → insert-quantization →
/// [expand-spec-verify] → lower-to-kernels → canonicalize/CSE →
/// select-kernels [→ plan-megakernel].
void buildDefaultPipeline(mlir::OpPassManager& pm, const CompileOptions& options);

/// Registers `kiln-default-pipeline` for kiln-opt.
void registerPipelines();

}  // namespace kiln
