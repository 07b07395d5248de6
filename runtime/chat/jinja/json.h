// JSON in and out of template values: messages and tool schemas arrive as
// JSON; the tojson filter writes values back the way transformers' tojson
// does, i.e. Python's json.dumps (ensure_ascii=False, its separators and
// float repr), which is what the models saw in training.
#pragma once

#include <string>
#include <string_view>

#include "runtime/chat/jinja/value.h"

namespace kiln::jinja {

// Objects keep their key order.
Result<Value> parseJson(std::string_view text);

struct JsonFormat {
  // Pretty-printing: "" writes one line; otherwise each nested item on its
  // own line, indented by this string per level (json.dumps' indent).
  std::string indent;
  bool pretty = false;
  std::string item_separator = ", ";  // json.dumps' defaults: ", " and ": ",
  std::string key_separator = ": ";   // "," and ": " when indenting
  bool sort_keys = false;
  bool ensure_ascii = false;
};

// Fails for values JSON cannot hold (Undefined, functions).
Result<std::string> toJson(const Value& value, const JsonFormat& format);

}  // namespace kiln::jinja
