#include "tools/kiln/request_json.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "runtime/request/generation_fields.h"
#include "runtime/support/json_describe.h"

namespace kiln {
namespace {

using nlohmann::json;

Error expected(std::string_view field, std::string_view what, const json& got) {
  return makeError("{}: expected {}, got {}", field, what, describeJson(got));
}

Status statusOf(const FieldStatus& error) {
  if (error) return makeError("{}", error->message);
  return Status::success();
}

// The fields only `kiln generate` reads; the rest are generationFields().
struct OwnField {
  std::string_view name;
  Status (*read)(const json& v, JsonRequest& out);
};

constexpr OwnField kLeadingFields[] = {
    {"id",
     [](const json& v, JsonRequest& out) -> Status {
       if (!v.is_string() && !v.is_number_integer()) return expected("id", "a string or an integer", v);
       out.id = v;
       return Status::success();
     }},
    {"prompt",
     [](const json& v, JsonRequest& out) -> Status {
       if (v.is_string() && !v.get_ref<const std::string&>().empty()) {
         out.request.prompt = v.get<std::string>();
         return Status::success();
       }
       if (!v.is_array() || v.empty()) return expected("prompt", "a non-empty string or list of token ids", v);
       FieldStatus error;
       for (size_t i = 0; i < v.size(); ++i) {
         auto id = readInteger(fmt::format("prompt[{}]", i), v[i], 0, std::numeric_limits<int32_t>::max(), error);
         if (!id) return statusOf(error);
         out.request.prompt_tokens.push_back(int32_t(*id));
       }
       return Status::success();
     }},
    {"messages",
     [](const json& v, JsonRequest& out) {
       out.request.chat = true;
       return statusOf(readMessages(v, out.request.messages));
     }},
};

constexpr OwnField kTrailingFields[] = {
    {"tools", [](const json& v, JsonRequest& out) { return statusOf(readTools(v, out.request.tools)); }},
    {"chat_template_kwargs",
     [](const json& v, JsonRequest& out) {
       return statusOf(readChatTemplateKwargs(v, out.request.chat_template_kwargs));
     }},
};

bool isField(std::string_view name) {
  for (const OwnField& f : kLeadingFields)
    if (f.name == name) return true;
  for (const OwnField& f : kTrailingFields)
    if (f.name == name) return true;
  return findGenerationField(name) != nullptr;
}

}  // namespace

std::span<const std::string_view> requestJsonFields() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> out;
    for (const OwnField& f : kLeadingFields) out.push_back(f.name);
    for (const GenerationField& f : generationFields()) out.push_back(f.name);
    for (const OwnField& f : kTrailingFields) out.push_back(f.name);
    return out;
  }();
  return names;
}

Result<JsonRequest> requestFromJson(const json& body) {
  if (!body.is_object()) return makeError("expected a JSON object, got {}", describeJson(body));
  // Unknown fields first: a misspelt "promt" is reported as itself, not as a missing prompt.
  std::vector<std::string> unknown;
  for (const auto& [key, value] : body.items())
    if (!isField(key)) unknown.push_back(fmt::format("\"{}\"", key));
  if (!unknown.empty())
    return makeError("unknown field{} {}; expected {}", unknown.size() > 1 ? "s" : "", fmt::join(unknown, ", "),
                     fmt::join(requestJsonFields(), ", "));
  const bool has_prompt = body.contains("prompt"), has_messages = body.contains("messages");
  if (has_prompt && has_messages) return makeError("prompt and messages: expected one of them, not both");
  if (!has_prompt && !has_messages) return makeError("missing prompt or messages: expected one of them");

  JsonRequest out;
  for (const OwnField& f : kLeadingFields)
    if (auto it = body.find(f.name); it != body.end())
      if (Status s = f.read(*it, out); !s.ok()) return s.error();
  for (const GenerationField& f : generationFields())
    if (auto it = body.find(f.name); it != body.end())
      if (FieldStatus e = f.read(*it, out.request)) return makeError("{}", e->message);
  for (const OwnField& f : kTrailingFields)
    if (auto it = body.find(f.name); it != body.end())
      if (Status s = f.read(*it, out); !s.ok()) return s.error();
  if (Status valid = out.request.sampling.validate(); !valid.ok()) return valid.error();
  return out;
}

Result<JsonRequest> requestFromJsonText(std::string_view text) {
  json body;
  try {
    body = json::parse(text);
  } catch (const json::parse_error& e) {
    return makeError("invalid JSON at column {}: {}", e.byte, parseErrorReason(e));
  }
  auto request = requestFromJson(body);
  // json sorts object keys; a tool schema goes to the template in the
  // order it was written (the order the model saw in training).
  if (request.ok() && body.contains("tools")) request->request.tools = toolsInWrittenOrder(text);
  return request;
}

}  // namespace kiln
