#include "runtime/chat/tool_calls.h"

#include <optional>

#include <nlohmann/json.hpp>

namespace kiln {
namespace {

using nlohmann::json;

std::string_view trim(std::string_view s) {
  const size_t begin = s.find_first_not_of(" \t\r\n");
  if (begin == std::string_view::npos) return {};
  return s.substr(begin, s.find_last_not_of(" \t\r\n") - begin + 1);
}

std::optional<json> parseJson(std::string_view text) {
  json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) return std::nullopt;
  return value;
}

// {"name": "f", "arguments" or "parameters": an object (or its JSON text)}.
std::optional<ChatToolCall> callOf(const json& v) {
  if (!v.is_object() || !v.contains("name") || !v["name"].is_string()) return std::nullopt;
  ChatToolCall call;
  call.name = v["name"].get<std::string>();
  const char* key = v.contains("arguments") ? "arguments" : "parameters";
  if (v.contains(key)) {
    const json& a = v[key];
    if (a.is_string()) {
      auto parsed = parseJson(a.get<std::string>());
      if (!parsed || !parsed->is_object()) return std::nullopt;
      call.arguments = parsed->dump();
    } else if (a.is_object()) {
      call.arguments = a.dump();
    } else {
      return std::nullopt;
    }
  }
  if (v.contains("id") && v["id"].is_string()) call.id = v["id"].get<std::string>();
  return call;
}

ParsedAnswer parseHermes(std::string_view answer) {
  constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>";
  ParsedAnswer out;
  const size_t first = answer.find(kOpen);
  if (first == std::string_view::npos) return {std::string(answer), {}};
  for (size_t at = first; at != std::string_view::npos; at = answer.find(kOpen, at)) {
    const size_t body = at + kOpen.size();
    size_t end = answer.find(kClose, body);
    // The last call may stop at EOS before its closing tag.
    const std::string_view text =
        answer.substr(body, end == std::string_view::npos ? std::string_view::npos : end - body);
    auto value = parseJson(trim(text));
    std::optional<ChatToolCall> call = value ? callOf(*value) : std::nullopt;
    if (!call) return {std::string(answer), {}};
    out.calls.push_back(std::move(*call));
    if (end == std::string_view::npos) break;
    at = end + kClose.size();
  }
  out.content = std::string(trim(answer.substr(0, first)));
  return out;
}

ParsedAnswer parseLlama3Json(std::string_view answer) {
  std::string_view text = trim(answer);
  constexpr std::string_view kPythonTag = "<|python_tag|>";
  if (text.starts_with(kPythonTag)) text = trim(text.substr(kPythonTag.size()));
  if (!text.starts_with("{")) return {std::string(answer), {}};
  ParsedAnswer out;
  // Several calls: JSON objects separated by ";" (a ";" inside a string
  // splits nothing: each piece must parse, else the whole is tried as one).
  std::vector<std::string_view> pieces;
  if (auto whole = parseJson(text)) {
    pieces.push_back(text);
  } else {
    for (size_t start = 0; start <= text.size();) {
      size_t semi = text.find(';', start);
      if (semi == std::string_view::npos) semi = text.size();
      pieces.push_back(trim(text.substr(start, semi - start)));
      start = semi + 1;
    }
  }
  for (std::string_view piece : pieces) {
    if (piece.empty()) continue;
    auto value = parseJson(piece);
    std::optional<ChatToolCall> call = value ? callOf(*value) : std::nullopt;
    if (!call) return {std::string(answer), {}};
    out.calls.push_back(std::move(*call));
  }
  if (out.calls.empty()) return {std::string(answer), {}};
  return out;
}

ParsedAnswer parseMistral(std::string_view answer) {
  constexpr std::string_view kTag = "[TOOL_CALLS]";
  const size_t at = answer.find(kTag);
  if (at == std::string_view::npos) return {std::string(answer), {}};
  auto value = parseJson(trim(answer.substr(at + kTag.size())));
  if (!value) return {std::string(answer), {}};
  ParsedAnswer out;
  for (const json& v : value->is_array() ? *value : json::array({*value})) {
    std::optional<ChatToolCall> call = callOf(v);
    if (!call) return {std::string(answer), {}};
    out.calls.push_back(std::move(*call));
  }
  if (out.calls.empty()) return {std::string(answer), {}};
  out.content = std::string(trim(answer.substr(0, at)));
  return out;
}

}  // namespace

std::string_view toolCallFormatName(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes: return "hermes";
    case ToolCallFormat::kLlama3Json: return "llama3_json";
    case ToolCallFormat::kMistral: return "mistral";
    case ToolCallFormat::kNone: break;
  }
  return "none";
}

ToolCallFormat toolCallFormatOf(std::string_view source) {
  if (source.find("<tool_call>") != std::string_view::npos) return ToolCallFormat::kHermes;
  if (source.find("[TOOL_CALLS]") != std::string_view::npos) return ToolCallFormat::kMistral;
  if (source.find("\"parameters\"") != std::string_view::npos && source.find("ipython") != std::string_view::npos)
    return ToolCallFormat::kLlama3Json;
  return ToolCallFormat::kNone;
}

ParsedAnswer parseToolCalls(std::string_view answer, ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes: return parseHermes(answer);
    case ToolCallFormat::kLlama3Json: return parseLlama3Json(answer);
    case ToolCallFormat::kMistral: return parseMistral(answer);
    case ToolCallFormat::kNone: break;
  }
  return {std::string(answer), {}};
}

}  // namespace kiln
