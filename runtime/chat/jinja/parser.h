// Template source -> statements: the jinja2 grammar the Hugging Face chat
// templates use. Unknown filters and tests, and tags outside the subset,
// are errors at parse time naming the line, column and construct.
#pragma once

#include <string_view>

#include "runtime/chat/jinja/ast.h"

namespace kiln::jinja {

Result<Body> parseTemplate(std::string_view source);

}  // namespace kiln::jinja
