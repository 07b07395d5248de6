#include "runtime/request/generation_fields.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include <fmt/format.h>

#include "runtime/support/json_describe.h"

namespace kiln {

using nlohmann::json;

FieldError expectedValue(const std::string& param, std::string_view what, const json& got) {
  return FieldError{param, fmt::format("{}: expected {}, got {}", param, what, describeJson(got))};
}

FieldError notSupported(const std::string& param, std::string_view what) {
  return FieldError{param, fmt::format("{}: {} is not supported by kiln yet", param, what), /*unsupported=*/true};
}

std::optional<int64_t> readInteger(const std::string& param, const json& v, int64_t lo, int64_t hi,
                                   FieldStatus& error) {
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min(), kMax = std::numeric_limits<int64_t>::max();
  const std::string range = lo == kMin && hi == kMax ? std::string("an integer")
                            : hi == kMax             ? fmt::format("an integer >= {}", lo)
                                                     : fmt::format("an integer in [{}, {}]", lo, hi);
  int64_t value = 0;
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > uint64_t(kMax)) return error = expectedValue(param, range, v), std::nullopt;
    value = int64_t(v.get<uint64_t>());
  } else if (v.is_number_integer()) {
    value = v.get<int64_t>();
  } else if (v.is_number_float() && v.get<double>() == std::floor(v.get<double>()) &&
             std::abs(v.get<double>()) < 9.0e18) {
    value = int64_t(v.get<double>());  // 16.0 counts as 16
  } else {
    return error = expectedValue(param, range, v), std::nullopt;
  }
  if (value < lo || value > hi) return error = expectedValue(param, range, v), std::nullopt;
  return value;
}

namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

FieldStatus readFloat(const char* name, const json& v, float& out) {
  if (!v.is_number()) return expectedValue(name, "a number", v);
  const float f = float(v.get<double>());
  if (!std::isfinite(f)) return expectedValue(name, "a finite number", v);
  out = f;
  return std::nullopt;
}

template <typename T>
FieldStatus readInt(const char* name, const json& v, int64_t lo, int64_t hi, T& out) {
  FieldStatus error;
  if (auto x = readInteger(name, v, lo, hi, error)) out = T(*x);
  return error;
}

FieldStatus readTokenIds(const std::string& name, const json& v, std::vector<int32_t>& out) {
  if (!v.is_array()) return expectedValue(name, "a list of token ids", v);
  std::vector<int32_t> ids;
  FieldStatus error;
  for (size_t i = 0; i < v.size(); ++i) {
    auto id = readInteger(fmt::format("{}[{}]", name, i), v[i], 0, kInt32Max, error);
    if (!id) return error;
    ids.push_back(int32_t(*id));
  }
  out = std::move(ids);
  return std::nullopt;
}

FieldStatus readStop(const json& v, std::vector<std::string>& stops) {
  if (v.is_string()) {
    if (v.get_ref<const std::string&>().empty()) return expectedValue("stop", "a non-empty string", v);
    stops = {v.get<std::string>()};
    return std::nullopt;
  }
  if (!v.is_array()) return expectedValue("stop", "a string or a list of strings", v);
  stops.clear();
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string() || v[i].get_ref<const std::string&>().empty())
      return expectedValue(fmt::format("stop[{}]", i), "a non-empty string", v[i]);
    stops.push_back(v[i].get<std::string>());
  }
  return std::nullopt;
}

// {"method": "ngram", "k": K} or {"method": "ngram", "tree": [W1, ...]}, as
// kiln run's --spec=ngram with --spec-k or --spec-tree; method "draft" is
// the engine's draft model (kiln --spec=draft:PATH), "head" its draft head
// (--spec=head:DIR), "layerskip" with "layers": K the target's first K
// layers (--spec=layerskip:K).
FieldStatus readSpeculation(const json& v, SpeculationParams& out) {
  if (!v.is_object()) return expectedValue("speculation", "an object {method, k} or {method, tree}", v);
  for (const auto& [key, value] : v.items())
    if (key != "method" && key != "k" && key != "tree" && key != "layers")
      return FieldError{"speculation." + key,
                        fmt::format("speculation: unknown field \"{}\"; expected method, k, tree and layers", key)};
  static constexpr const char* kMethods = "\"ngram\", \"draft\", \"head\" or \"layerskip\"";
  if (!v.contains("method"))
    return FieldError{"speculation.method", fmt::format("speculation: missing method; expected {}", kMethods)};
  const json& method = v["method"];
  if (method != "ngram" && method != "draft" && method != "head" && method != "layerskip")
    return expectedValue("speculation.method", kMethods, method);
  SpeculationParams spec;
  spec.method = method == "ngram"   ? SpecMethod::kNgram
                : method == "head"  ? SpecMethod::kDraftHead
                : method == "draft" ? SpecMethod::kDraftModel
                                    : SpecMethod::kLayerSkip;
  if ((spec.method == SpecMethod::kLayerSkip) != v.contains("layers"))
    return FieldError{"speculation.layers", "speculation: layers (K) goes with method \"layerskip\", and only with it"};
  if (spec.method == SpecMethod::kLayerSkip) {
    FieldStatus error;
    auto layers = readInteger("speculation.layers", v["layers"], 1, 4096, error);
    if (!layers) return error;
    spec.layerskip = *layers;
  }
  if (v.contains("k") && v.contains("tree"))
    return FieldError{"speculation", "speculation: k and tree both set: a chain of k tokens or a tree, not both"};
  if (v.contains("tree")) {
    const json& tree = v["tree"];
    const char* what = "a non-empty list of widths >= 1 (e.g. [2, 2, 1]) of at most 1024 nodes";
    if (!tree.is_array() || tree.empty()) return expectedValue("speculation.tree", what, tree);
    std::string text = "widths:";
    for (size_t i = 0; i < tree.size(); ++i) {
      if (!tree[i].is_number_integer() || tree[i].get<int64_t>() < 1 || tree[i].get<int64_t>() > 1024)
        return expectedValue(fmt::format("speculation.tree[{}]", i), "an integer in [1, 1024]", tree[i]);
      text += (i ? "," : "") + std::to_string(tree[i].get<int64_t>());
    }
    auto shape = spec::parseTreeShape(text);
    if (!shape.ok()) return expectedValue("speculation.tree", what, tree);
    spec.tree = shape.take();
  } else {
    int64_t k = 4;
    if (v.contains("k")) {
      FieldStatus error;
      auto read = readInteger("speculation.k", v["k"], 1, 1023, error);
      if (!read) return error;
      k = *read;
    }
    spec.tree = spec::TreeShape::chain(k);
  }
  out = std::move(spec);
  return std::nullopt;
}

using S = sampling::SamplingParams;

template <float S::*member>
FieldStatus floatField(const char* name, const json& v, GenerationRequest& out) {
  return readFloat(name, v, out.sampling.*member);
}

constexpr GenerationField kFields[] = {
    {"max_tokens",
     [](const json& v, GenerationRequest& out) {
       return readInt("max_tokens", v, 1, kInt32Max, out.sampling.max_tokens);
     }},
    {"max_completion_tokens",  // chat's newer name for max_tokens
     [](const json& v, GenerationRequest& out) {
       return readInt("max_completion_tokens", v, 1, kInt32Max, out.sampling.max_tokens);
     }},
    {"temperature",
     [](const json& v, GenerationRequest& out) { return floatField<&S::temperature>("temperature", v, out); }},
    {"top_p", [](const json& v, GenerationRequest& out) { return floatField<&S::top_p>("top_p", v, out); }},
    {"top_k",
     [](const json& v, GenerationRequest& out) -> FieldStatus {
       int32_t k = 0;
       if (FieldStatus e = readInt("top_k", v, -1, kInt32Max, k)) return e;
       out.sampling.top_k = k < 0 ? 0 : k;  // -1 is vLLM's "off"
       return std::nullopt;
     }},
    {"min_p", [](const json& v, GenerationRequest& out) { return floatField<&S::min_p>("min_p", v, out); }},
    {"seed",
     [](const json& v, GenerationRequest& out) -> FieldStatus {
       if (v.is_number_unsigned()) {
         out.sampling.seed = v.get<uint64_t>();
         return std::nullopt;
       }
       int64_t seed = 0;
       if (FieldStatus e = readInt("seed", v, std::numeric_limits<int64_t>::min(),
                                   std::numeric_limits<int64_t>::max(), seed))
         return e;
       out.sampling.seed = uint64_t(seed);
       return std::nullopt;
     }},
    {"stop", [](const json& v, GenerationRequest& out) { return readStop(v, out.sampling.stop_strings); }},
    {"stop_token_ids",
     [](const json& v, GenerationRequest& out) {
       return readTokenIds("stop_token_ids", v, out.sampling.stop_token_ids);
     }},
    {"n",
     [](const json& v, GenerationRequest& out) {
       return readInt("n", v, 1, sampling::kMaxCompletions, out.sampling.n);
     }},
    {"priority",
     [](const json& v, GenerationRequest& out) {
       return readInt("priority", v, std::numeric_limits<int32_t>::min(), kInt32Max, out.priority);
     }},
    {"ignore_eos",
     [](const json& v, GenerationRequest& out) -> FieldStatus {
       if (!v.is_boolean()) return expectedValue("ignore_eos", "true or false", v);
       out.sampling.ignore_eos = v.get<bool>();
       return std::nullopt;
     }},
    {"presence_penalty",
     [](const json& v, GenerationRequest& out) {
       return floatField<&S::presence_penalty>("presence_penalty", v, out);
     }},
    {"frequency_penalty",
     [](const json& v, GenerationRequest& out) {
       return floatField<&S::frequency_penalty>("frequency_penalty", v, out);
     }},
    {"repetition_penalty",
     [](const json& v, GenerationRequest& out) {
       return floatField<&S::repetition_penalty>("repetition_penalty", v, out);
     }},
    {"logprobs",
     [](const json& v, GenerationRequest& out) {
       return readInt("logprobs", v, 0, sampling::kMaxLogprobs, out.sampling.logprobs);
     }},
    {"speculation", [](const json& v, GenerationRequest& out) { return readSpeculation(v, out.speculation); }},
};

// OpenAI's tool_calls: [{"id", "type": "function", "function": {"name",
// "arguments": a JSON string or an object}}].
FieldStatus readToolCalls(const std::string& at, const json& v, std::vector<ChatToolCall>& calls) {
  if (!v.is_array()) return expectedValue(at, "a list of {id, type, function}", v);
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string where = fmt::format("{}[{}]", at, i);
    const json& c = v[i];
    if (!c.is_object() || !c.contains("function") || !c["function"].is_object())
      return expectedValue(where, "an object {id, type, function: {name, arguments}}", c);
    if (c.contains("type") && c["type"] != "function") return expectedValue(where + ".type", "\"function\"", c["type"]);
    const json& f = c["function"];
    if (!f.contains("name") || !f["name"].is_string())
      return expectedValue(where + ".function.name", "a string", f.value("name", json()));
    ChatToolCall call;
    call.name = f["name"].get<std::string>();
    if (c.contains("id")) {
      if (!c["id"].is_string()) return expectedValue(where + ".id", "a string", c["id"]);
      call.id = c["id"].get<std::string>();
    }
    if (f.contains("arguments")) {
      const json& a = f["arguments"];
      if (!a.is_string() && !a.is_object())
        return expectedValue(where + ".function.arguments", "a JSON string or an object", a);
      call.arguments = a.is_string() ? a.get<std::string>() : a.dump();
    }
    calls.push_back(std::move(call));
  }
  return std::nullopt;
}

// A content: a string, or text parts joined as OpenAI's models see them.
FieldStatus readContent(const std::string& at, const json& content, std::string& out) {
  if (content.is_string()) {
    out = content.get<std::string>();
    return std::nullopt;
  }
  if (!content.is_array()) return expectedValue(at, "a string or a list of text parts", content);
  for (size_t p = 0; p < content.size(); ++p) {
    const std::string part_at = fmt::format("{}[{}]", at, p);
    const json& part = content[p];
    if (!part.is_object() || !part.contains("type"))
      return expectedValue(part_at, "a content part {\"type\": \"text\", \"text\": ...}", part);
    if (part["type"] != "text") return notSupported(part_at + ".type", "content of type " + describeJson(part["type"]));
    for (const auto& [key, value] : part.items())
      if (key != "type" && key != "text")
        return FieldError{part_at + "." + key,
                          fmt::format("{}: unknown field \"{}\"; expected type and text", part_at, key)};
    if (!part.contains("text") || !part["text"].is_string())
      return expectedValue(part_at + ".text", "a string", part.value("text", json()));
    out += part["text"].get<std::string>();
  }
  return std::nullopt;
}

FieldStatus readMessage(const std::string& at, const json& m, ChatMessage& message) {
  if (!m.is_object()) return expectedValue(at, "an object {role, content}", m);
  for (const auto& [key, value] : m.items())
    if (key != "role" && key != "content" && key != "name" && key != "tool_calls" && key != "tool_call_id" &&
        key != "reasoning_content")
      return FieldError{at + "." + key,
                        fmt::format("{}: unknown field \"{}\"; expected role, content, name, tool_calls, "
                                    "tool_call_id and reasoning_content",
                                    at, key)};
  if (!m.contains("role")) return FieldError{at + ".role", at + ": missing role"};
  if (!m.contains("content")) return FieldError{at + ".content", at + ": missing content"};
  const json& role = m["role"];
  // "developer" is OpenAI's newer name for the system role.
  if (!role.is_string() ||
      (role != "system" && role != "developer" && role != "user" && role != "assistant" && role != "tool"))
    return expectedValue(at + ".role", "\"system\", \"developer\", \"user\", \"assistant\" or \"tool\"", role);
  message.role = role == "developer" ? "system" : role.get<std::string>();
  const bool calls_tools = m.contains("tool_calls") && !m["tool_calls"].is_null();
  if (calls_tools && message.role != "assistant")
    return FieldError{at + ".tool_calls", at + ": tool_calls: only an assistant message calls tools"};
  // An assistant turn that only calls tools has content null (OpenAI).
  if (!(calls_tools && m["content"].is_null()))
    if (FieldStatus e = readContent(at + ".content", m["content"], message.content)) return e;
  if (calls_tools)
    if (FieldStatus e = readToolCalls(at + ".tool_calls", m["tool_calls"], message.tool_calls)) return e;
  for (auto [key, field] : {std::pair{"tool_call_id", &message.tool_call_id}, std::pair{"name", &message.name},
                            std::pair{"reasoning_content", &message.reasoning_content}}) {
    if (!m.contains(key) || m[key].is_null()) continue;
    if (!m[key].is_string()) return expectedValue(at + "." + key, "a string", m[key]);
    *field = m[key].get<std::string>();
  }
  return std::nullopt;
}

}  // namespace

std::span<const GenerationField> generationFields() { return kFields; }

const GenerationField* findGenerationField(std::string_view name) {
  for (const GenerationField& f : kFields)
    if (f.name == name) return &f;
  return nullptr;
}

FieldStatus readMessages(const json& v, std::vector<ChatMessage>& out) {
  if (!v.is_array() || v.empty()) return expectedValue("messages", "a non-empty list of {role, content}", v);
  std::vector<ChatMessage> messages(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    if (FieldStatus e = readMessage(fmt::format("messages[{}]", i), v[i], messages[i])) return e;
  out = std::move(messages);
  return std::nullopt;
}

FieldStatus readTools(const json& v, std::vector<std::string>& out) {
  if (!v.is_array()) return expectedValue("tools", "a list of function schemas", v);
  std::vector<std::string> tools;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_object()) return expectedValue(fmt::format("tools[{}]", i), "an object", v[i]);
    tools.push_back(v[i].dump());
  }
  out = std::move(tools);
  return std::nullopt;
}

FieldStatus readChatTemplateKwargs(const json& v, std::string& out) {
  if (!v.is_object()) return expectedValue("chat_template_kwargs", "an object", v);
  out = v.dump();
  return std::nullopt;
}

std::vector<std::string> toolsInWrittenOrder(std::string_view body_text) {
  std::vector<std::string> tools;
  const auto ordered = nlohmann::ordered_json::parse(body_text, nullptr, /*allow_exceptions=*/false);
  if (!ordered.is_object() || !ordered.contains("tools") || !ordered["tools"].is_array()) return tools;
  for (const auto& tool : ordered["tools"]) tools.push_back(tool.dump());
  return tools;
}

}  // namespace kiln
