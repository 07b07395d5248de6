#include "runtime/server/openai_request.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/request/generation_fields.h"
#include "runtime/support/json_describe.h"

namespace kiln::server {
namespace {

using nlohmann::json;

ApiError apiErrorOf(const FieldError& e) {
  return e.unsupported ? ApiError{400, e.message, "invalid_request_error", e.param, "unsupported_field"}
                       : invalidRequest(e.message, e.param);
}

ApiError expected(const std::string& param, std::string_view what, const json& got) {
  return apiErrorOf(expectedValue(param, what, got));
}

// Reads one field after another into `out`; the first failure sticks and
// every later read is skipped.
class BodyReader {
 public:
  BodyReader(const json& body, const RequestContext& context, OpenAiRequest& out)
      : body_(body), context_(context), out_(out) {}

  const std::optional<ApiError>& error() const { return error_; }
  void fail(ApiError e) {
    if (!error_) error_ = std::move(e);
  }
  void fail(const FieldStatus& e) {
    if (e) fail(apiErrorOf(*e));
  }
  // The field's value, or nullptr when absent or null.
  const json* field(std::string_view name) {
    if (error_) return nullptr;
    auto it = body_.find(name);
    return it == body_.end() || it->is_null() ? nullptr : &*it;
  }

  std::optional<int64_t> integer(const std::string& param, const json& v, int64_t lo, int64_t hi) {
    FieldStatus e;
    auto value = readInteger(param, v, lo, hi, e);
    fail(e);
    return value;
  }

  std::optional<bool> boolean(const std::string& param, const json& v) {
    if (!v.is_boolean()) return fail(expected(param, "true or false", v)), std::nullopt;
    return v.get<bool>();
  }

  void readModel() {
    const json* v = field("model");
    if (error_) return;
    if (!v) return fail(invalidRequest("model: missing; expected \"" + context_.model_id + "\"", "model"));
    if (!v->is_string()) return fail(expected("model", "a string", *v));
    if (v->get_ref<const std::string&>() != context_.model_id)
      return fail(ApiError{404,
                           fmt::format("The model `{}` does not exist; this server serves \"{}\"",
                                       v->get<std::string>(), context_.model_id),
                           "invalid_request_error", "model", "model_not_found"});
  }

  void readStreaming() {
    if (const json* v = field("stream"))
      if (auto b = boolean("stream", *v)) out_.stream = *b;
    if (const json* v = field("return_token_ids"))
      if (auto b = boolean("return_token_ids", *v)) out_.return_token_ids = *b;
    if (const json* v = field("stream_options")) {
      if (!v->is_object()) return fail(expected("stream_options", "an object {include_usage}", *v));
      if (!out_.stream) return fail(invalidRequest("stream_options: only allowed with stream true", "stream_options"));
      for (const auto& [key, value] : v->items()) {
        if (key != "include_usage")
          return fail(invalidRequest(fmt::format("stream_options: unknown field \"{}\"; expected include_usage", key),
                                     "stream_options." + key));
        if (value.is_null()) continue;
        if (auto b = boolean("stream_options.include_usage", value)) out_.include_usage = *b;
      }
    }
  }

  // The shared table (runtime/request/generation_fields.h); chat reads
  // its own logprobs (a boolean, with top_logprobs).
  void readGenerationFields() {
    for (const GenerationField& f : generationFields()) {
      if (f.name == "logprobs" && out_.endpoint == Endpoint::kChatCompletions) continue;
      if (const json* v = field(f.name)) fail(f.read(*v, out_.generation));
    }
    if (const json* v = field("user"))
      if (!v->is_string()) fail(expected("user", "a string", *v));
    if (error_) return;
    // No request can exceed the context, whatever its prompt.
    const char* name = field("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    if (field(name) && out_.generation.sampling.max_tokens > context_.context_length)
      fail(invalidRequest(fmt::format("{}: {} is more than the model's context length of {} tokens", name,
                                      out_.generation.sampling.max_tokens, context_.context_length),
                          name));
  }

  // Chat's logprobs: true with top_logprobs alternatives (0 to 20).
  void readChatLogprobs() {
    bool wanted = false;
    if (const json* v = field("logprobs"))
      if (auto b = boolean("logprobs", *v)) wanted = *b;
    if (const json* v = field("top_logprobs")) {
      auto n = integer("top_logprobs", *v, 0, sampling::kMaxLogprobs);
      if (n && !wanted)
        return fail(invalidRequest("top_logprobs: only allowed with logprobs true", "top_logprobs"));
      if (n) out_.generation.sampling.logprobs = int(*n);
    }
    if (wanted && out_.generation.sampling.logprobs < 0) out_.generation.sampling.logprobs = 0;
  }

  // tools, tool_choice ("none" or "auto") and chat_template_kwargs.
  void readTools() {
    if (const json* v = field("tools")) fail(kiln::readTools(*v, out_.generation.tools));
    if (const json* v = field("tool_choice")) {
      if (v->is_string() && (*v == "none" || *v == "auto")) {
        out_.tool_choice = *v == "none" ? ToolChoice::kNone : ToolChoice::kAuto;
      } else if (v->is_string() && *v == "required") {
        return fail(unsupportedField("tool_choice", "tool_choice \"required\""));
      } else if (v->is_object()) {
        return fail(unsupportedField("tool_choice", "tool_choice naming a function (" + v->dump() + ")"));
      } else {
        return fail(expected("tool_choice", "\"none\" or \"auto\"", *v));
      }
    }
    if (const json* v = field("chat_template_kwargs"))
      fail(readChatTemplateKwargs(*v, out_.generation.chat_template_kwargs));
  }

  // Fields whose neutral value is accepted and anything else refused as not
  // supported yet.
  void readUnsupported() {
    if (const json* v = field("logit_bias")) {
      if (!v->is_object()) return fail(expected("logit_bias", "an object {token id: bias}", *v));
      if (!v->empty()) return fail(unsupportedField("logit_bias", "biasing logits"));
    }
    if (const json* v = field("echo"))
      if (auto b = boolean("echo", *v); b && *b) return fail(unsupportedField("echo", "echoing the prompt"));
    if (const json* v = field("best_of"))
      if (auto b = integer("best_of", *v, 1, sampling::kMaxCompletions); b && *b != out_.generation.sampling.n)
        return fail(unsupportedField("best_of", "best_of other than n"));
    if (const json* v = field("suffix")) {
      if (!v->is_string()) return fail(expected("suffix", "a string", *v));
      if (!v->get_ref<const std::string&>().empty()) return fail(unsupportedField("suffix", "a suffix"));
    }
  }

  void readPrompt() {
    const json* v = field("prompt");
    if (error_) return;
    if (!v) return fail(invalidRequest("prompt: missing; expected a string or a list of token ids", "prompt"));
    // A list holding one prompt is the same as that prompt; several are a batch.
    if (v->is_array() && v->size() == 1 && ((*v)[0].is_string() || (*v)[0].is_array())) v = &(*v)[0];
    if (v->is_string()) {
      if (v->get_ref<const std::string&>().empty()) return fail(expected("prompt", "a non-empty string", *v));
      out_.generation.prompt = v->get<std::string>();
      return;
    }
    if (!v->is_array() || v->empty()) return fail(expected("prompt", "a non-empty string or list of token ids", *v));
    if ((*v)[0].is_string() || (*v)[0].is_array())
      return fail(unsupportedField("prompt", "a list of several prompts in one request"));
    for (size_t i = 0; i < v->size() && !error_; ++i)
      if (auto id = integer(fmt::format("prompt[{}]", i), (*v)[i], 0, std::numeric_limits<int32_t>::max()))
        out_.generation.prompt_tokens.push_back(int32_t(*id));
  }

  void readMessages() {
    const json* v = field("messages");
    if (error_) return;
    if (!v) return fail(invalidRequest("messages: missing; expected a list of {role, content}", "messages"));
    if (v->is_array() && int64_t(v->size()) > context_.max_messages)
      return fail(invalidRequest(
          fmt::format("messages: {} messages is more than this server's limit of {}", v->size(), context_.max_messages),
          "messages"));
    out_.generation.chat = true;
    fail(kiln::readMessages(*v, out_.generation.messages));
  }

 private:
  const json& body_;
  const RequestContext& context_;
  OpenAiRequest& out_;
  std::optional<ApiError> error_;
};

// Beside the shared table's fields.
constexpr std::string_view kCommonFields[] = {"model", "stream", "stream_options", "user", "logit_bias",
                                              "return_token_ids"};
constexpr std::string_view kCompletionFields[] = {"prompt", "echo", "best_of", "suffix"};
constexpr std::string_view kChatFields[] = {"messages", "top_logprobs", "tools", "tool_choice",
                                            "chat_template_kwargs"};

bool isKnownField(Endpoint endpoint, std::string_view name) {
  if (name == "max_completion_tokens") return endpoint == Endpoint::kChatCompletions;
  if (findGenerationField(name)) return true;
  for (std::string_view f : kCommonFields)
    if (f == name) return true;
  for (std::string_view f : endpoint == Endpoint::kCompletions ? std::span<const std::string_view>(kCompletionFields)
                                                                 : std::span<const std::string_view>(kChatFields))
    if (f == name) return true;
  return false;
}

// The parameter a SamplingParams::validate() message is about: its first word.
std::string paramOf(const std::string& message) { return message.substr(0, message.find(' ')); }


// The body as a JSON object, or the error.
std::optional<ApiError> parseBody(std::string_view text, json& body) {
  try {
    body = json::parse(text);
  } catch (const json::parse_error& e) {
    return invalidRequest(fmt::format("the body is not valid JSON (at byte {}): {}", e.byte, parseErrorReason(e)));
  } catch (const json::out_of_range&) {
    // A number literal beyond a double (1e999) is nlohmann's out_of_range, not a parse_error.
    return invalidRequest("the body is not valid JSON: a number is too large for a 64-bit float");
  }
  if (!body.is_object()) return invalidRequest("the body must be a JSON object, got " + describeJson(body));
  return std::nullopt;
}

// An unknown field of a body that takes `fields`, named.
std::optional<ApiError> unknownField(const json& body, std::span<const std::string_view> fields, const char* path) {
  for (const auto& [key, value] : body.items())
    if (std::find(fields.begin(), fields.end(), key) == fields.end())
      return invalidRequest(fmt::format("unknown field \"{}\" for {}; expected {}", key, path, fmt::join(fields, ", ")),
                            key);
  return std::nullopt;
}

}  // namespace

ParsedRequest parseTokenizeRequest(std::string_view body_text, const RequestContext& context) {
  ParsedRequest parsed;
  json body;
  if ((parsed.error = parseBody(body_text, body))) return parsed;
  constexpr std::string_view kFields[] = {"model", "prompt", "messages", "tools", "chat_template_kwargs"};
  if ((parsed.error = unknownField(body, kFields, "/tokenize"))) return parsed;
  OpenAiRequest& out = parsed.request;
  BodyReader reader(body, context, out);
  if (body.contains("model")) reader.readModel();
  if (body.contains("messages")) {
    out.endpoint = Endpoint::kChatCompletions;
    reader.readMessages();
    reader.readTools();
  } else {
    reader.readPrompt();
  }
  parsed.error = reader.error();
  if (!parsed.error && !body.value("tools", json()).is_null()) out.generation.tools = toolsInWrittenOrder(body_text);
  return parsed;
}

DetokenizeRequest parseDetokenizeRequest(std::string_view body_text, const RequestContext& context) {
  DetokenizeRequest out;
  json body;
  if ((out.error = parseBody(body_text, body))) return out;
  constexpr std::string_view kFields[] = {"model", "tokens"};
  if ((out.error = unknownField(body, kFields, "/detokenize"))) return out;
  OpenAiRequest unused;
  BodyReader reader(body, context, unused);
  if (body.contains("model")) reader.readModel();
  if (!body.contains("tokens") || !body["tokens"].is_array())
    reader.fail(expected("tokens", "a list of token ids", body.value("tokens", json())));
  else
    for (size_t i = 0; i < body["tokens"].size() && !reader.error(); ++i)
      if (auto id = reader.integer(fmt::format("tokens[{}]", i), body["tokens"][i], 0, INT32_MAX))
        out.tokens.push_back(int32_t(*id));
  out.error = reader.error();
  return out;
}

ParsedRequest parseOpenAiRequest(Endpoint endpoint, std::string_view body_text, const RequestContext& context) {
  ParsedRequest parsed;
  OpenAiRequest& out = parsed.request;
  out.endpoint = endpoint;
  json body;
  if ((parsed.error = parseBody(body_text, body))) return parsed;
  for (const auto& [key, value] : body.items()) {
    if (!isKnownField(endpoint, key)) {
      parsed.error = invalidRequest(fmt::format("unknown field \"{}\" for {}", key,
                                                endpoint == Endpoint::kCompletions ? "/v1/completions"
                                                                                   : "/v1/chat/completions"),
                                    key);
      return parsed;
    }
  }

  // OpenAI's defaults: temperature 1; 16 tokens for a completion, up to the
  // context for a chat answer.
  sampling::SamplingParams& s = out.generation.sampling;
  s.temperature = 1.0f;
  s.max_tokens = endpoint == Endpoint::kCompletions ? 16 : int(std::min<int64_t>(context.context_length, INT32_MAX));

  BodyReader reader(body, context, out);
  reader.readModel();
  if (endpoint == Endpoint::kCompletions) {
    reader.readPrompt();
  } else {
    reader.readMessages();
    reader.readTools();
    reader.readChatLogprobs();
  }
  reader.readGenerationFields();
  reader.readStreaming();
  reader.readUnsupported();
  if (reader.error()) {
    parsed.error = reader.error();
    return parsed;
  }
  if (Status valid = s.validate(); !valid.ok()) {
    parsed.error = invalidRequest(valid.error().message, paramOf(valid.error().message));
    return parsed;
  }
  if (endpoint == Endpoint::kChatCompletions && !body.value("tools", json()).is_null())
    out.generation.tools = toolsInWrittenOrder(body_text);
  return parsed;
}

}  // namespace kiln::server
