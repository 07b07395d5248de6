// libFuzzer entry for kiln serve's request readers: one HTTP body through
// every endpoint's reader (completions, chat completions, tokenize,
// detokenize) and the tool-order scan of the raw text. Each must give a
// request or an ApiError naming a field, never a crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "runtime/request/generation_fields.h"
#include "runtime/server/openai_request.h"

using namespace kiln::server;

namespace {

void check(const ParsedRequest& parsed) {
  if (parsed.error && (parsed.error->status < 400 || parsed.error->message.empty())) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view body(reinterpret_cast<const char*>(data), size);
  RequestContext context;
  context.model_id = "smollm2";
  context.context_length = 2048;
  context.max_messages = 8;
  context.tool_call_format = kiln::ToolCallFormat::kHermes;
  check(parseOpenAiRequest(Endpoint::kCompletions, body, context));
  check(parseOpenAiRequest(Endpoint::kChatCompletions, body, context));
  check(parseTokenizeRequest(body, context));
  DetokenizeRequest detokenize = parseDetokenizeRequest(body, context);
  if (detokenize.error && detokenize.error->status < 400) __builtin_trap();
  (void)kiln::toolsInWrittenOrder(body);
  return 0;
}
