#include "runtime/server/api_error.h"

namespace kiln::server {

nlohmann::json ApiError::toJson() const {
  auto orNull = [](const std::string& s) { return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s); };
  return {{"error", {{"message", message}, {"type", type}, {"param", orNull(param)}, {"code", orNull(code)}}}};
}

ApiError invalidRequest(std::string message, std::string param) {
  return ApiError{400, std::move(message), "invalid_request_error", std::move(param), {}};
}

ApiError unsupportedField(const std::string& param, const std::string& what) {
  return ApiError{400, param + ": " + what + " is not supported by kiln yet", "invalid_request_error", param,
                  "unsupported_field"};
}

}  // namespace kiln::server
