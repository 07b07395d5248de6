#include "tools/kiln/request_json.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "runtime/support/json_describe.h"

namespace kiln {
namespace {

using nlohmann::json;

Error expected(std::string_view field, std::string_view what, const json& got) {
  return makeError("{}: expected {}, got {}", field, what, describeJson(got));
}

// An integer in [lo, hi]; a number with no fraction (16.0) counts as one.
Result<int64_t> readInt(std::string_view field, const json& v, int64_t lo, int64_t hi) {
  const std::string range = fmt::format("an integer in [{}, {}]", lo, hi);
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > uint64_t(hi)) return expected(field, range, v);
    return int64_t(u);
  }
  int64_t value = 0;
  if (v.is_number_integer()) {
    value = v.get<int64_t>();
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    if (d != std::floor(d) || !(d >= double(lo) && d <= double(hi))) return expected(field, range, v);
    value = int64_t(d);
  } else {
    return expected(field, range, v);
  }
  if (value < lo || value > hi) return expected(field, range, v);
  return value;
}

Result<int32_t> readInt32(std::string_view field, const json& v, int64_t lo = std::numeric_limits<int32_t>::min()) {
  auto value = readInt(field, v, lo, std::numeric_limits<int32_t>::max());
  if (!value.ok()) return value.error();
  return int32_t(*value);
}

// A number that a float holds (a float's infinity would pass some range checks).
Result<float> readFloat(std::string_view field, const json& v) {
  if (!v.is_number()) return expected(field, "a number", v);
  const float f = float(v.get<double>());
  if (!std::isfinite(f)) return expected(field, "a finite number", v);
  return f;
}

// A non-empty list of token ids.
Result<std::vector<int32_t>> readTokenIds(std::string_view field, const json& v) {
  if (!v.is_array()) return expected(field, "a list of token ids", v);
  std::vector<int32_t> ids;
  for (size_t i = 0; i < v.size(); ++i) {
    auto id = readInt32(fmt::format("{}[{}]", field, i), v[i], 0);
    if (!id.ok()) return id.error();
    ids.push_back(*id);
  }
  return ids;
}

// OpenAI's tool_calls: [{"id", "type": "function", "function": {"name",
// "arguments": a JSON string or an object}}].
Result<std::vector<ChatToolCall>> readToolCalls(const std::string& at, const json& v) {
  if (!v.is_array()) return expected(at, "a list of {id, type, function}", v);
  std::vector<ChatToolCall> calls;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string where = fmt::format("{}[{}]", at, i);
    const json& c = v[i];
    if (!c.is_object() || !c.contains("function") || !c["function"].is_object())
      return expected(where, "an object {id, type, function: {name, arguments}}", c);
    const json& f = c["function"];
    if (!f.contains("name") || !f["name"].is_string())
      return expected(where + ".function.name", "a string", f.value("name", json()));
    ChatToolCall call;
    call.name = f["name"].get<std::string>();
    if (c.contains("id")) {
      if (!c["id"].is_string()) return expected(where + ".id", "a string", c["id"]);
      call.id = c["id"].get<std::string>();
    }
    if (f.contains("arguments")) {
      const json& a = f["arguments"];
      if (!a.is_string() && !a.is_object())
        return expected(where + ".function.arguments", "a JSON string or an object", a);
      call.arguments = a.is_string() ? a.get<std::string>() : a.dump();
    }
    calls.push_back(std::move(call));
  }
  return calls;
}

Result<std::vector<ChatMessage>> readMessages(const json& v) {
  if (!v.is_array() || v.empty()) return expected("messages", "a non-empty list of {role, content}", v);
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string at = fmt::format("messages[{}]", i);
    const json& m = v[i];
    if (!m.is_object()) return expected(at, "an object {role, content}", m);
    for (const auto& [key, value] : m.items())
      if (key != "role" && key != "content" && key != "tool_calls" && key != "tool_call_id" && key != "name" &&
          key != "reasoning_content")
        return makeError("{}: unknown field \"{}\"; expected role, content, tool_calls, tool_call_id, name and "
                         "reasoning_content", at, key);
    if (!m.contains("role")) return makeError("{}: missing role", at);
    if (!m.contains("content")) return makeError("{}: missing content", at);
    const json& role = m["role"];
    if (!role.is_string() || (role != "system" && role != "user" && role != "assistant" && role != "tool"))
      return expected(at + ".role", "\"system\", \"user\", \"assistant\" or \"tool\"", role);
    ChatMessage message;
    message.role = role.get<std::string>();
    // An assistant turn that only calls tools has content null (OpenAI).
    const bool calls_tools = m.contains("tool_calls");
    if (!m["content"].is_string() && !(calls_tools && m["content"].is_null()))
      return expected(at + ".content", "a string", m["content"]);
    if (m["content"].is_string()) message.content = m["content"].get<std::string>();
    if (calls_tools) {
      auto calls = readToolCalls(at + ".tool_calls", m["tool_calls"]);
      if (!calls.ok()) return calls.error();
      message.tool_calls = calls.take();
    }
    for (auto [key, field] : {std::pair{"tool_call_id", &message.tool_call_id}, std::pair{"name", &message.name},
                              std::pair{"reasoning_content", &message.reasoning_content}}) {
      if (!m.contains(key)) continue;
      if (!m[key].is_string()) return expected(at + "." + key, "a string", m[key]);
      *field = m[key].get<std::string>();
    }
    messages.push_back(std::move(message));
  }
  return messages;
}

// One entry per accepted field: its name and how it lands in the request.
struct Field {
  std::string_view name;
  Status (*read)(const json& v, JsonRequest& out);
};

template <typename T, typename Set>
Status assign(Result<T> value, Set set) {
  if (!value.ok()) return value.error();
  set(*value);
  return Status::success();
}

constexpr Field kFields[] = {
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
       if (v.is_array() && !v.empty())
         return assign(readTokenIds("prompt", v), [&](auto ids) { out.request.prompt_tokens = std::move(ids); });
       return expected("prompt", "a non-empty string or list of token ids", v);
     }},
    {"messages",
     [](const json& v, JsonRequest& out) -> Status {
       out.request.chat = true;
       return assign(readMessages(v), [&](auto m) { out.request.messages = std::move(m); });
     }},
    {"max_tokens",
     [](const json& v, JsonRequest& out) {
       return assign(readInt32("max_tokens", v), [&](int32_t x) { out.request.sampling.max_tokens = x; });
     }},
    {"temperature",
     [](const json& v, JsonRequest& out) {
       return assign(readFloat("temperature", v), [&](float x) { out.request.sampling.temperature = x; });
     }},
    {"top_p",
     [](const json& v, JsonRequest& out) {
       return assign(readFloat("top_p", v), [&](float x) { out.request.sampling.top_p = x; });
     }},
    {"top_k",
     [](const json& v, JsonRequest& out) {
       return assign(readInt32("top_k", v), [&](int32_t x) { out.request.sampling.top_k = x; });
     }},
    {"min_p",
     [](const json& v, JsonRequest& out) {
       return assign(readFloat("min_p", v), [&](float x) { out.request.sampling.min_p = x; });
     }},
    {"seed",
     [](const json& v, JsonRequest& out) -> Status {
       if (v.is_number_unsigned()) {
         out.request.sampling.seed = v.get<uint64_t>();
         return Status::success();
       }
       return assign(readInt("seed", v, 0, std::numeric_limits<int64_t>::max()),
                     [&](int64_t x) { out.request.sampling.seed = uint64_t(x); });
     }},
    {"stop",
     [](const json& v, JsonRequest& out) -> Status {
       auto& stops = out.request.sampling.stop_strings;
       if (v.is_string()) {
         if (v.get_ref<const std::string&>().empty()) return expected("stop", "a non-empty string", v);
         stops.push_back(v.get<std::string>());
         return Status::success();
       }
       if (!v.is_array()) return expected("stop", "a string or a list of strings", v);
       for (size_t i = 0; i < v.size(); ++i) {
         if (!v[i].is_string() || v[i].get_ref<const std::string&>().empty())
           return expected(fmt::format("stop[{}]", i), "a non-empty string", v[i]);
         stops.push_back(v[i].get<std::string>());
       }
       return Status::success();
     }},
    {"stop_token_ids",
     [](const json& v, JsonRequest& out) {
       return assign(readTokenIds("stop_token_ids", v),
                     [&](auto ids) { out.request.sampling.stop_token_ids = std::move(ids); });
     }},
    {"n",
     [](const json& v, JsonRequest& out) {
       return assign(readInt32("n", v), [&](int32_t x) { out.request.sampling.n = x; });
     }},
    {"priority",
     [](const json& v, JsonRequest& out) {
       return assign(readInt32("priority", v), [&](int32_t x) { out.request.priority = x; });
     }},
    {"ignore_eos",
     [](const json& v, JsonRequest& out) -> Status {
       if (!v.is_boolean()) return expected("ignore_eos", "true or false", v);
       out.request.sampling.ignore_eos = v.get<bool>();
       return Status::success();
     }},
    {"presence_penalty",
     [](const json& v, JsonRequest& out) {
       return assign(readFloat("presence_penalty", v), [&](float x) { out.request.sampling.presence_penalty = x; });
     }},
    {"frequency_penalty",
     [](const json& v, JsonRequest& out) {
       return assign(readFloat("frequency_penalty", v), [&](float x) { out.request.sampling.frequency_penalty = x; });
     }},
    {"repetition_penalty",
     [](const json& v, JsonRequest& out) {
       return assign(readFloat("repetition_penalty", v),
                     [&](float x) { out.request.sampling.repetition_penalty = x; });
     }},
    {"tools",
     [](const json& v, JsonRequest& out) -> Status {
       if (!v.is_array()) return expected("tools", "a list of function schemas", v);
       for (size_t i = 0; i < v.size(); ++i) {
         if (!v[i].is_object()) return expected(fmt::format("tools[{}]", i), "an object", v[i]);
         out.request.tools.push_back(v[i].dump());
       }
       return Status::success();
     }},
    {"chat_template_kwargs",
     [](const json& v, JsonRequest& out) -> Status {
       if (!v.is_object()) return expected("chat_template_kwargs", "an object", v);
       out.request.chat_template_kwargs = v.dump();
       return Status::success();
     }},
};

const Field* findField(std::string_view name) {
  for (const Field& f : kFields)
    if (f.name == name) return &f;
  return nullptr;
}

}  // namespace

std::span<const std::string_view> requestJsonFields() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> out;
    for (const Field& f : kFields) out.push_back(f.name);
    return out;
  }();
  return names;
}

Result<JsonRequest> requestFromJson(const json& body) {
  if (!body.is_object()) return makeError("expected a JSON object, got {}", describeJson(body));
  // Unknown fields first: a misspelt "promt" is reported as itself, not as a missing prompt.
  std::vector<std::string> unknown;
  for (const auto& [key, value] : body.items())
    if (!findField(key)) unknown.push_back(fmt::format("\"{}\"", key));
  if (!unknown.empty())
    return makeError("unknown field{} {}; expected {}", unknown.size() > 1 ? "s" : "", fmt::join(unknown, ", "),
                     fmt::join(requestJsonFields(), ", "));
  const bool has_prompt = body.contains("prompt"), has_messages = body.contains("messages");
  if (has_prompt && has_messages) return makeError("prompt and messages: expected one of them, not both");
  if (!has_prompt && !has_messages) return makeError("missing prompt or messages: expected one of them");

  JsonRequest out;
  for (const Field& f : kFields) {
    auto it = body.find(f.name);
    if (it == body.end()) continue;
    if (Status s = f.read(*it, out); !s.ok()) return s.error();
  }
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
  if (request.ok() && body.contains("tools")) {
    const auto ordered = nlohmann::ordered_json::parse(text);
    request->request.tools.clear();
    for (const auto& tool : ordered["tools"]) request->request.tools.push_back(tool.dump());
  }
  return request;
}

}  // namespace kiln
