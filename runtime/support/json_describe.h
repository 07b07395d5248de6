// What a JSON value is, for request errors of the form "expected X, got Y":
// `string "warm"`, `a list`, `16.5`. Shared by the request readers of
// `kiln generate` and `kiln serve`, whose messages must read alike.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace kiln {

// Long strings are cut: the message stays one line.
std::string describeJson(const nlohmann::json& value);

// What a parse error says after its position: nlohmann's what() is
// "[json.exception.parse_error.101] parse error at line 1, column 9: syntax
// error while parsing value - invalid literal; last read: '{"a": no'"; the
// readers name the byte themselves (error.byte).
std::string parseErrorReason(const nlohmann::json::parse_error& error);

}  // namespace kiln
