// Walks a parsed template with jinja2's semantics: scopes (a for loop's
// body has its own; if does not), Undefined, Python's operators.
#pragma once

#include <string>

#include "runtime/chat/jinja/ast.h"
#include "runtime/chat/jinja/template.h"

namespace kiln::jinja {

Result<std::string> renderTemplate(const Body& body, const Dict& variables, const RenderOptions& options);

}  // namespace kiln::jinja
