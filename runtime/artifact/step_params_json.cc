#include "runtime/artifact/step_params_json.h"

namespace kiln {

nlohmann::json toJson(const StepParams& params) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, value] : stepParamsMap(params))
    std::visit([&, &name = name](const auto& v) { out[name] = v; }, value);
  return out;
}

Result<ParamMap> paramsFromJson(const nlohmann::json& params, const std::string& path) {
  if (!params.is_object()) return makeError("{}: expected an object, got {}", path, params.type_name());
  ParamMap values;
  for (auto it = params.begin(); it != params.end(); ++it) {
    const nlohmann::json& v = it.value();
    const std::string p = path + "." + it.key();
    if (v.is_boolean()) {
      values[it.key()] = v.get<bool>();
    } else if (v.is_number_integer()) {
      values[it.key()] = v.get<int64_t>();
    } else if (v.is_number_float()) {
      values[it.key()] = v.get<double>();
    } else if (v.is_string()) {
      values[it.key()] = v.get<std::string>();
    } else if (v.is_array()) {
      std::vector<int64_t> list;
      for (size_t i = 0; i < v.size(); ++i) {
        if (!v[i].is_number_integer())
          return makeError("{}[{}]: expected an integer, got {}", p, i, v[i].type_name());
        list.push_back(v[i].get<int64_t>());
      }
      values[it.key()] = std::move(list);
    } else {
      return makeError("{}: expected a number, boolean, string or integer list, got {}", p, v.type_name());
    }
  }
  return values;
}

}  // namespace kiln
