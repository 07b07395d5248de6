#include "runtime/chat/jinja/template.h"

#include "runtime/chat/jinja/parser.h"
#include "runtime/chat/jinja/renderer.h"

namespace kiln::jinja {

Result<Template> Template::parse(std::string_view source) {
  auto body = parseTemplate(source);
  if (!body.ok()) return body.error();
  Template t;
  t.body_ = std::make_shared<const Body>(body.take());
  return t;
}

Result<std::string> Template::render(const Dict& variables, const RenderOptions& options) const {
  return renderTemplate(*body_, variables, options);
}

}  // namespace kiln::jinja
