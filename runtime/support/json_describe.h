// What a JSON value is, for request errors of the form "expected X, got Y":
// `string "warm"`, `a list`, `16.5`. Shared by the request readers of
// `kiln generate` and `kiln serve`, whose messages must read alike.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace kiln {

// Long strings are cut: the message stays one line.
std::string describeJson(const nlohmann::json& value);

}  // namespace kiln
