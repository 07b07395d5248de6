#include "runtime/artifact/step_params_json.h"

namespace kiln {

nlohmann::json toJson(const StepParams& params) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, value] : stepParamsMap(params))
    std::visit([&, &name = name](const auto& v) { out[name] = v; }, value);
  return out;
}

}  // namespace kiln
