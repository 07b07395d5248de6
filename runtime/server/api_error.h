// An OpenAI-style API error: the HTTP status and the body clients parse,
//   {"error": {"message": "...", "type": "invalid_request_error", "param": "top_p", "code": null}}
// Every refusal of the server is one of these, so the OpenAI client libraries
// raise their own typed exceptions (BadRequestError, NotFoundError, ...).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace kiln::server {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the request field at fault; empty: null
  std::string code;   // a machine-readable reason ("model_not_found"); empty: null

  nlohmann::json toJson() const;
};

// 400: a field is missing, of the wrong type, out of range or unknown.
ApiError invalidRequest(std::string message, std::string param = {});
// 400: a field OpenAI defines that kiln does not implement yet (logprobs, ...).
ApiError unsupportedField(const std::string& param, const std::string& what);

}  // namespace kiln::server
