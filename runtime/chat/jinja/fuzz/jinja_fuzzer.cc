// libFuzzer entry for the chat-template engine: a template, a messages JSON
// and a tools JSON (parts separated by "%%" lines, test/fuzz/fuzz_input.h),
// rendered as ChatTemplate renders a prompt (messages, tools,
// add_generation_prompt, bos_token, eos_token, a fixed clock). Parsing and
// rendering must give text or one Error, never a crash or a hang.
#include <cstddef>
#include <cstdint>

#include "runtime/chat/jinja/json.h"
#include "runtime/chat/jinja/template.h"
#include "test/fuzz/fuzz_input.h"

using namespace kiln::jinja;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parts = kiln::fuzz::splitParts(data, size, 3);
  auto tmpl = Template::parse(parts[0]);
  if (!tmpl.ok()) return 0;
  Dict vars;
  auto messages = parseJson(parts[1]);
  vars.set("messages", messages.ok() ? messages.take() : Value(List{}));
  auto tools = parseJson(parts[2]);
  vars.set("tools", tools.ok() ? tools.take() : Value::none());
  vars.set("add_generation_prompt", true);
  vars.set("bos_token", Value(std::string("<s>")));
  vars.set("eos_token", Value(std::string("</s>")));
  auto text = tmpl->render(vars, {.now = 1741953600});
  if (!text.ok() && text.error().message.empty()) __builtin_trap();
  return 0;
}
