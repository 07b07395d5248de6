#include "runtime/support/json_describe.h"

namespace kiln {

std::string describeJson(const nlohmann::json& value) {
  using nlohmann::json;
  switch (value.type()) {
    case json::value_t::null: return "null";
    case json::value_t::object: return "an object";
    case json::value_t::array: return "a list";
    case json::value_t::boolean: return value.get<bool>() ? "true" : "false";
    case json::value_t::string: {
      std::string text = value.dump();
      if (text.size() > 42) text = text.substr(0, 38) + "...\"";
      return "string " + text;
    }
    default: return value.dump();
  }
}

std::string parseErrorReason(const nlohmann::json::parse_error& error) {
  const std::string what = error.what();
  const size_t colon = what.find(": ", what.find("column"));
  return colon == std::string::npos ? what : what.substr(colon + 2);
}

}  // namespace kiln
