#include "runtime/server/openai_request.h"

#include <cmath>
#include <limits>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/support/json_describe.h"

namespace kiln::server {
namespace {

using nlohmann::json;

ApiError expected(const std::string& param, std::string_view what, const json& got) {
  return invalidRequest(fmt::format("{}: expected {}, got {}", param, what, describeJson(got)), param);
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
  // The field's value, or nullptr when absent or null.
  const json* field(const char* name) {
    if (error_) return nullptr;
    auto it = body_.find(name);
    return it == body_.end() || it->is_null() ? nullptr : &*it;
  }

  std::optional<int64_t> integer(const std::string& param, const json& v, int64_t lo, int64_t hi) {
    const bool no_upper = hi == std::numeric_limits<int64_t>::max();
    const std::string range = no_upper && lo == std::numeric_limits<int64_t>::min() ? std::string("an integer")
                              : no_upper ? fmt::format("an integer >= {}", lo)
                                         : fmt::format("an integer in [{}, {}]", lo, hi);
    int64_t value = 0;
    if (v.is_number_unsigned()) {
      if (v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())) return failed(param, range, v);
      value = int64_t(v.get<uint64_t>());
    } else if (v.is_number_integer()) {
      value = v.get<int64_t>();
    } else if (v.is_number_float() && v.get<double>() == std::floor(v.get<double>()) &&
               std::abs(v.get<double>()) < 9.0e18) {
      value = int64_t(v.get<double>());  // 16.0 counts as 16
    } else {
      return failed(param, range, v);
    }
    if (value < lo || value > hi) return failed(param, range, v);
    return value;
  }

  std::optional<float> number(const std::string& param, const json& v) {
    if (!v.is_number()) return failed<float>(param, "a number", v);
    const double d = v.get<double>();
    if (!std::isfinite(float(d))) return failed<float>(param, "a finite number", v);
    return float(d);
  }

  std::optional<bool> boolean(const std::string& param, const json& v) {
    if (!v.is_boolean()) return failed<bool>(param, "true or false", v);
    return v.get<bool>();
  }

  template <typename T = int64_t>
  std::optional<T> failed(const std::string& param, std::string_view what, const json& v) {
    fail(expected(param, what, v));
    return std::nullopt;
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

  // max_tokens (and chat's newer max_completion_tokens): at most the context,
  // which no request can exceed whatever its prompt.
  void readMaxTokens(const char* name) {
    const json* v = field(name);
    if (!v) return;
    auto n = integer(name, *v, 1, std::numeric_limits<int64_t>::max());
    if (!n) return;
    if (*n > context_.context_length)
      return fail(invalidRequest(fmt::format("{}: {} is more than the model's context length of {} tokens", name, *n,
                                             context_.context_length),
                                 name));
    out_.generation.sampling.max_tokens = int(*n);
  }

  void readSampling() {
    sampling::SamplingParams& s = out_.generation.sampling;
    struct FloatField {
      const char* name;
      float sampling::SamplingParams::*member;
    };
    for (FloatField f : {FloatField{"temperature", &sampling::SamplingParams::temperature},
                         FloatField{"top_p", &sampling::SamplingParams::top_p},
                         FloatField{"min_p", &sampling::SamplingParams::min_p},
                         FloatField{"presence_penalty", &sampling::SamplingParams::presence_penalty},
                         FloatField{"frequency_penalty", &sampling::SamplingParams::frequency_penalty},
                         FloatField{"repetition_penalty", &sampling::SamplingParams::repetition_penalty}})
      if (const json* v = field(f.name))
        if (auto x = number(f.name, *v)) s.*f.member = *x;
    if (const json* v = field("top_k"))  // -1 is vLLM's "off"
      if (auto k = integer("top_k", *v, -1, std::numeric_limits<int32_t>::max())) s.top_k = *k < 0 ? 0 : int(*k);
    if (const json* v = field("n"))
      if (auto n = integer("n", *v, 1, sampling::kMaxCompletions)) s.n = int(*n);
    if (const json* v = field("seed"))
      if (auto seed = integer("seed", *v, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()))
        s.seed = uint64_t(*seed);
    if (const json* v = field("ignore_eos"))
      if (auto b = boolean("ignore_eos", *v)) s.ignore_eos = *b;
    if (const json* v = field("stop")) readStop(*v);
    if (const json* v = field("stop_token_ids")) {
      if (!v->is_array()) return fail(expected("stop_token_ids", "a list of token ids", *v));
      for (size_t i = 0; i < v->size() && !error_; ++i)
        if (auto id = integer(fmt::format("stop_token_ids[{}]", i), (*v)[i], 0, std::numeric_limits<int32_t>::max()))
          s.stop_token_ids.push_back(int32_t(*id));
    }
    if (const json* v = field("user"))
      if (!v->is_string()) fail(expected("user", "a string", *v));
  }

  void readStop(const json& v) {
    auto& stops = out_.generation.sampling.stop_strings;
    if (v.is_string()) {
      if (v.get_ref<const std::string&>().empty()) return fail(expected("stop", "a non-empty string", v));
      stops.push_back(v.get<std::string>());
      return;
    }
    if (!v.is_array()) return fail(expected("stop", "a string or a list of strings", v));
    for (size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_string() || v[i].get_ref<const std::string&>().empty())
        return fail(expected(fmt::format("stop[{}]", i), "a non-empty string", v[i]));
      stops.push_back(v[i].get<std::string>());
    }
  }

  // Fields whose neutral value is accepted and anything else refused as not
  // supported yet.
  void readUnsupported() {
    if (const json* v = field("logprobs")) {
      const bool asks = v->is_boolean() ? v->get<bool>() : true;
      if (!v->is_boolean() && !v->is_number_integer() && !v->is_number_unsigned())
        return fail(expected("logprobs",
                             out_.endpoint == Endpoint::kChatCompletions ? "true or false" : "an integer", *v));
      if (asks) return fail(unsupportedField("logprobs", "returning log probabilities"));
    }
    if (const json* v = field("top_logprobs")) {
      if (!v->is_number_integer() && !v->is_number_unsigned()) return fail(expected("top_logprobs", "an integer", *v));
      return fail(unsupportedField("top_logprobs", "returning log probabilities"));
    }
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
    if (!v->is_array() || v->empty()) return fail(expected("messages", "a non-empty list of {role, content}", *v));
    if (int64_t(v->size()) > context_.max_messages)
      return fail(invalidRequest(
          fmt::format("messages: {} messages is more than this server's limit of {}", v->size(), context_.max_messages),
          "messages"));
    out_.generation.chat = true;
    for (size_t i = 0; i < v->size() && !error_; ++i) readMessage(fmt::format("messages[{}]", i), (*v)[i]);
  }

  void readMessage(const std::string& at, const json& m) {
    if (!m.is_object()) return fail(expected(at, "an object {role, content}", m));
    for (const auto& [key, value] : m.items())
      if (key != "role" && key != "content" && key != "name")
        return fail(invalidRequest(fmt::format("{}: unknown field \"{}\"; expected role, content and name", at, key),
                                   at + "." + key));
    if (!m.contains("role")) return fail(invalidRequest(at + ": missing role", at + ".role"));
    if (!m.contains("content")) return fail(invalidRequest(at + ": missing content", at + ".content"));
    const json& role = m["role"];
    // "developer" is OpenAI's newer name for the system role.
    if (!role.is_string() || (role != "system" && role != "developer" && role != "user" && role != "assistant"))
      return fail(expected(at + ".role", "\"system\", \"developer\", \"user\" or \"assistant\"", role));
    if (m.contains("name") && !m["name"].is_string()) return fail(expected(at + ".name", "a string", m["name"]));
    ChatMessage message{role == "developer" ? "system" : role.get<std::string>(), {}};
    const json& content = m["content"];
    if (content.is_string()) {
      message.content = content.get<std::string>();
    } else if (content.is_array()) {
      // Text parts are joined, as OpenAI's models see them.
      for (size_t p = 0; p < content.size(); ++p) {
        const std::string part_at = fmt::format("{}.content[{}]", at, p);
        const json& part = content[p];
        if (!part.is_object() || !part.contains("type"))
          return fail(expected(part_at, "a content part {\"type\": \"text\", \"text\": ...}", part));
        if (part["type"] != "text")
          return fail(unsupportedField(part_at + ".type", "content of type " + describeJson(part["type"])));
        for (const auto& [key, value] : part.items())
          if (key != "type" && key != "text")
            return fail(invalidRequest(fmt::format("{}: unknown field \"{}\"; expected type and text", part_at, key),
                                       part_at + "." + key));
        if (!part.contains("text") || !part["text"].is_string())
          return fail(expected(part_at + ".text", "a string", part.value("text", json())));
        message.content += part["text"].get<std::string>();
      }
    } else {
      return fail(expected(at + ".content", "a string or a list of text parts", content));
    }
    out_.generation.messages.push_back(std::move(message));
  }

 private:
  const json& body_;
  const RequestContext& context_;
  OpenAiRequest& out_;
  std::optional<ApiError> error_;
};

constexpr std::string_view kCommonFields[] = {
    "model", "stream", "stream_options", "max_tokens", "temperature", "top_p", "top_k", "min_p", "stop", "seed", "n",
    "presence_penalty", "frequency_penalty", "repetition_penalty", "ignore_eos", "stop_token_ids", "user",
    "logprobs", "logit_bias"};
constexpr std::string_view kCompletionFields[] = {"prompt", "echo", "best_of", "suffix"};
constexpr std::string_view kChatFields[] = {"messages", "max_completion_tokens", "top_logprobs"};

bool isKnownField(Endpoint endpoint, std::string_view name) {
  for (std::string_view f : kCommonFields)
    if (f == name) return true;
  if (endpoint == Endpoint::kCompletions) {
    for (std::string_view f : kCompletionFields)
      if (f == name) return true;
  } else {
    for (std::string_view f : kChatFields)
      if (f == name) return true;
  }
  return false;
}

// The parameter a SamplingParams::validate() message is about: its first word.
std::string paramOf(const std::string& message) { return message.substr(0, message.find(' ')); }

}  // namespace

ParsedRequest parseOpenAiRequest(Endpoint endpoint, std::string_view body_text, const RequestContext& context) {
  ParsedRequest parsed;
  OpenAiRequest& out = parsed.request;
  out.endpoint = endpoint;
  json body;
  try {
    body = json::parse(body_text);
  } catch (const json::parse_error& e) {
    parsed.error =
        invalidRequest(fmt::format("the body is not valid JSON (at byte {}): {}", e.byte, parseErrorReason(e)));
    return parsed;
  }
  if (!body.is_object()) {
    parsed.error = invalidRequest("the body must be a JSON object, got " + describeJson(body));
    return parsed;
  }
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
    reader.readMaxTokens("max_tokens");
  } else {
    reader.readMessages();
    reader.readMaxTokens("max_tokens");
    reader.readMaxTokens("max_completion_tokens");
  }
  reader.readStreaming();
  reader.readSampling();
  reader.readUnsupported();
  if (reader.error()) {
    parsed.error = reader.error();
    return parsed;
  }
  if (Status valid = s.validate(); !valid.ok())
    parsed.error = invalidRequest(valid.error().message, paramOf(valid.error().message));
  return parsed;
}

}  // namespace kiln::server
