#include "runtime/chat/chat_template.h"

#include "runtime/chat/jinja/json.h"
#include "runtime/chat/jinja/template.h"

namespace kiln {

namespace {

using jinja::Dict;
using jinja::List;
using jinja::Value;

// A message as transformers hands it to the template: role and content,
// plus tool_calls / tool_call_id / name / reasoning_content only when set (templates test them
// with `is defined` and `in`).
Value messageValue(const ChatMessage& m) {
  Dict d;
  d.set("role", Value(m.role));
  d.set("content", Value(m.content));
  if (!m.tool_calls.empty()) {
    List calls;
    for (const ChatToolCall& call : m.tool_calls) {
      auto parsed = jinja::parseJson(call.arguments);
      Value arguments = parsed.ok() && parsed->isDict() ? parsed.take() : Value(call.arguments);
      Dict function;
      function.set("name", Value(call.name));
      function.set("arguments", std::move(arguments));
      Dict entry;
      if (!call.id.empty()) entry.set("id", Value(call.id));
      entry.set("type", Value("function"));
      entry.set("function", Value(std::move(function)));
      calls.push_back(Value(std::move(entry)));
    }
    d.set("tool_calls", Value(std::move(calls)));
  }
  if (!m.tool_call_id.empty()) d.set("tool_call_id", Value(m.tool_call_id));
  if (!m.name.empty()) d.set("name", Value(m.name));
  if (!m.reasoning_content.empty()) d.set("reasoning_content", Value(m.reasoning_content));
  return Value(std::move(d));
}

}  // namespace

Result<ChatTemplate> ChatTemplate::fromTemplateString(const std::string& jinja_source,
                                                      const std::string& bos_text,
                                                      const std::string& eos_text) {
  auto parsed = jinja::Template::parse(jinja_source);
  if (!parsed.ok()) return makeError("chat template: {}", parsed.error().message);
  ChatTemplate t;
  t.template_ = std::make_shared<const jinja::Template>(parsed.take());
  t.bos_ = bos_text;
  t.eos_ = eos_text;
  t.source_ = jinja_source;
  return t;
}

Result<std::string> ChatTemplate::apply(const std::vector<ChatMessage>& messages,
                                        const ChatOptions& options) const {
  Dict vars;
  List list;
  for (const ChatMessage& m : messages) list.push_back(messageValue(m));
  vars.set("messages", Value(std::move(list)));
  if (options.tools.empty()) {
    vars.set("tools", Value::none());
  } else {
    List tools;
    for (size_t i = 0; i < options.tools.size(); ++i) {
      auto tool = jinja::parseJson(options.tools[i]);
      if (!tool.ok()) return makeError("chat template: tools[{}]: {}", i, tool.error().message);
      tools.push_back(tool.take());
    }
    vars.set("tools", Value(std::move(tools)));
  }
  vars.set("documents", Value::none());
  vars.set("add_generation_prompt", Value(options.add_generation_prompt));
  vars.set("bos_token", Value(bos_));
  vars.set("eos_token", Value(eos_));
  if (!options.extra_variables_json.empty()) {
    auto extra = jinja::parseJson(options.extra_variables_json);
    if (!extra.ok() || !extra->isDict())
      return makeError("chat template: extra variables must be a JSON object, got '{}'",
                       options.extra_variables_json.substr(0, 60));
    for (const auto& [key, value] : extra->asDict().entries()) vars.set(key, value);
  }
  jinja::RenderOptions render_options;
  render_options.now = options.now;
  auto text = template_->render(vars, render_options);
  if (!text.ok()) return makeError("chat template: {}", text.error().message);
  return text.take();
}

Result<std::string> ChatTemplate::apply(const std::vector<ChatMessage>& messages,
                                        bool add_generation_prompt) const {
  ChatOptions options;
  options.add_generation_prompt = add_generation_prompt;
  return apply(messages, options);
}

}  // namespace kiln
