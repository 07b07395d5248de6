#include "runtime/chat/chat_template.h"

#include <algorithm>

namespace kiln {

namespace {

bool contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

// Jinja's `trim` filter is Python's str.strip(): leading and trailing
// whitespace, Unicode included; the ASCII set covers what chat content
// carries in practice.
std::string trim(std::string_view text) {
  constexpr std::string_view kSpace = " \t\n\r\f\v";
  size_t begin = text.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return {};
  size_t end = text.find_last_not_of(kSpace);
  return std::string(text.substr(begin, end - begin + 1));
}

// ChatML templates that insert a default system prompt write it as a
// literal: '<|im_start|>system\n...<|im_end|>'. The newline may be a real
// newline or the two characters "\n" inside the Jinja string literal.
std::string findDefaultSystemPrompt(std::string_view source) {
  constexpr std::string_view kOpen = "<|im_start|>system";
  for (size_t pos = source.find(kOpen); pos != std::string_view::npos;
       pos = source.find(kOpen, pos + 1)) {
    size_t start = pos + kOpen.size();
    if (source.compare(start, 1, "\n") == 0) {
      start += 1;
    } else if (source.compare(start, 2, "\\n") == 0) {
      start += 2;
    } else {
      continue;  // '<|im_start|>system' + ... built from variables
    }
    size_t end = source.find("<|im_end|>", start);
    if (end == std::string_view::npos) continue;
    std::string_view literal = source.substr(start, end - start);
    // A literal containing quotes or Jinja syntax is not a constant prompt.
    if (literal.find_first_of("'\"{}") != std::string_view::npos) continue;
    std::string prompt;
    for (size_t i = 0; i < literal.size(); ++i) {
      if (literal[i] == '\\' && i + 1 < literal.size() && literal[i + 1] == 'n') {
        prompt.push_back('\n');
        ++i;
      } else {
        prompt.push_back(literal[i]);
      }
    }
    return prompt;
  }
  return {};
}

}  // namespace

std::string_view chatTemplateFamilyName(ChatTemplateFamily family) {
  switch (family) {
    case ChatTemplateFamily::kChatML:
      return "chatml";
    case ChatTemplateFamily::kLlama3:
      return "llama3";
    case ChatTemplateFamily::kMistral:
      return "mistral";
  }
  return "?";
}

Result<ChatTemplate> ChatTemplate::fromTemplateString(
    const std::string& jinja_source, const std::string& bos_text,
    const std::string& eos_text) {
  ChatTemplate t;
  t.bos_ = bos_text;
  t.eos_ = eos_text;
  auto unsupported = [&](std::string_view why) {
    std::string head = jinja_source.substr(0, 60);
    std::replace(head.begin(), head.end(), '\n', ' ');
    return makeError(
        "chat template '{}{}': {} (supported families: chatml "
        "(<|im_start|>), llama3 (<|start_header_id|> ... <|eot_id|>), "
        "mistral ([INST] ... [/INST]))",
        head, jinja_source.size() > 60 ? "..." : "", why);
  };
  if (contains(jinja_source, "<|im_start|>")) {
    t.family_ = ChatTemplateFamily::kChatML;
    // Only a default prompt the template inserts conditionally counts; a
    // template that always opens with a fixed system block is not ChatML as
    // rendered here.
    if (contains(jinja_source, "'system'")) {
      t.default_system_ = findDefaultSystemPrompt(jinja_source);
    }
    if (contains(jinja_source, "tools")) {
      return unsupported("ChatML with tool definitions is not supported");
    }
    return t;
  }
  if (contains(jinja_source, "<|start_header_id|>") &&
      contains(jinja_source, "<|eot_id|>")) {
    // Llama-3.1+ templates add a dated system block and tool calls.
    if (contains(jinja_source, "Cutting Knowledge Date") ||
        contains(jinja_source, "tools")) {
      return unsupported(
          "the Llama-3.1+ template (dated system block, tools) is not "
          "supported, only Llama-3");
    }
    t.family_ = ChatTemplateFamily::kLlama3;
    return t;
  }
  if (contains(jinja_source, "[INST]") && contains(jinja_source, "[/INST]")) {
    if (contains(jinja_source, "[AVAILABLE_TOOLS]") ||
        contains(jinja_source, "[SYSTEM_PROMPT]")) {
      return unsupported(
          "Mistral templates with tools or [SYSTEM_PROMPT] are not supported");
    }
    t.family_ = ChatTemplateFamily::kMistral;
    return t;
  }
  return unsupported("unrecognised template family");
}

Result<std::string> ChatTemplate::apply(const std::vector<ChatMessage>& messages,
                                        bool add_generation_prompt) const {
  std::string out;
  switch (family_) {
    case ChatTemplateFamily::kChatML: {
      // SmolLM2: the default system turn comes first when the first message
      // is not a system message (and only when there is a first message).
      if (!default_system_.empty() && !messages.empty() &&
          messages.front().role != "system") {
        out += "<|im_start|>system\n" + default_system_ + "<|im_end|>\n";
      }
      for (const ChatMessage& m : messages) {
        out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      }
      if (add_generation_prompt) out += "<|im_start|>assistant\n";
      return out;
    }
    case ChatTemplateFamily::kLlama3: {
      for (size_t i = 0; i < messages.size(); ++i) {
        if (i == 0) out += bos_;
        out += "<|start_header_id|>" + messages[i].role +
               "<|end_header_id|>\n\n" + trim(messages[i].content) +
               "<|eot_id|>";
      }
      if (add_generation_prompt) {
        out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      }
      return out;
    }
    case ChatTemplateFamily::kMistral: {
      out += bos_;
      for (size_t i = 0; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if ((m.role == "user") != (i % 2 == 0)) {
          return makeError(
              "chat template mistral: message {} has role '{}': roles must "
              "alternate user/assistant/user/...",
              i, m.role);
        }
        if (m.role == "user") {
          out += "[INST] " + m.content + " [/INST]";
        } else if (m.role == "assistant") {
          out += m.content + eos_;
        } else {
          return makeError(
              "chat template mistral: message {} has role '{}': only user "
              "and assistant roles are supported",
              i, m.role);
        }
      }
      // The template has no generation prompt: the reply follows [/INST].
      return out;
    }
  }
  return out;
}

}  // namespace kiln
