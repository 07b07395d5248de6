// A step's params as JSON, the form kernel instances are generated from
// (codegen/cuda/instance_source.h) and the manifest writes.
#pragma once

#include <nlohmann/json.hpp>

#include "runtime/artifact/step_params.h"

namespace kiln {

nlohmann::json toJson(const StepParams& params);

}  // namespace kiln
