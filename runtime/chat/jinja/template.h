// kiln's Jinja interpreter: the subset of jinja2 that Hugging Face chat
// templates are written in, rendered as transformers renders them
// (jinja2's ImmutableSandboxedEnvironment with trim_blocks and
// lstrip_blocks, loop controls, its tojson, raise_exception and
// strftime_now). runtime/chat/testdata holds the real templates this is
// checked against, byte for byte, with jinja2's renders of them.
//
//   auto t = jinja::Template::parse(source);          // syntax errors here
//   jinja::Dict vars;
//   vars.set("messages", messages);                      // jinja::Value lists/dicts
//   auto text = t->render(vars);                         // raise_exception etc. here
//
// What it accepts: {{ }}, {% %}, {# #} with '-'/'+' whitespace control;
// if/elif/else, for (loop.*, else, `if` filter, unpacking), set (names,
// namespace attributes, blocks), macro, break/continue; literals, names,
// attributes, subscripts, slices, calls, filters, tests, arithmetic,
// comparison, and/or/not, in, ~, ternaries. Anything else is an error
// naming its line, column and the construct.
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "runtime/chat/jinja/value.h"

namespace kiln::jinja {

struct Node;

struct RenderOptions {
  // strftime_now's clock; unset: the current local time, as transformers.
  std::optional<std::time_t> now;
};

class Template {
 public:
  // Errors: "line L column C: <what>" (bad syntax, unknown filter or test,
  // a tag outside the subset).
  static Result<Template> parse(std::string_view source);

  // Renders with `variables` (messages, tools, add_generation_prompt,
  // bos_token, ...) beside the globals raise_exception, strftime_now,
  // namespace, range and dict. A raise_exception in the template fails
  // with its message; so does any runtime error, with line and column.
  Result<std::string> render(const Dict& variables, const RenderOptions& options = {}) const;

 private:
  std::shared_ptr<const std::vector<std::unique_ptr<Node>>> body_;
};

}  // namespace kiln::jinja
