// A step's params as JSON, the form kernel instances are generated from
// (codegen/cuda/instance_source.h) and the manifest writes.
#pragma once

#include <nlohmann/json.hpp>

#include "runtime/artifact/step_params.h"

namespace kiln {

nlohmann::json toJson(const StepParams& params);

// A params object's values as parseStepParams takes them; a value that is
// not an integer, number, boolean, string or integer list is an error
// naming it ("PATH.sizes[1]: expected an integer, got string").
Result<ParamMap> paramsFromJson(const nlohmann::json& params, const std::string& path);

}  // namespace kiln
