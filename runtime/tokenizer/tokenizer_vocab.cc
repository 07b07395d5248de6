#include "runtime/tokenizer/tokenizer_vocab.h"

namespace kiln {

namespace {

// The GPT-2 split: contractions (case-sensitive), letter runs, number runs,
// other-symbol runs (each with one optional leading space), and whitespace
// that is not followed by a non-space (so "a  b" gives "a", " ", " b").
constexpr const char* kGpt2Regex =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|"
    "\\s+(?!\\S)";

// Llama-3 and Qwen2 write their contractions as (?i:...); spelled out per
// letter here as llama.cpp does, which is the same language.
constexpr const char* kLlama3Regex =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|"
    "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

constexpr const char* kQwen2Regex =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|"
    "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

struct KindName {
  PreTokenizerKind kind;
  std::string_view name;
};
constexpr KindName kKindNames[] = {
    {PreTokenizerKind::kDefault, "default"},
    {PreTokenizerKind::kGpt2, "gpt2"},
    {PreTokenizerKind::kLlama3, "llama-bpe"},
    {PreTokenizerKind::kQwen2, "qwen2"},
    {PreTokenizerKind::kSmolLM, "smollm"},
    {PreTokenizerKind::kCustom, "custom"},
};

}  // namespace

Result<PreTokenizerKind> preTokenizerKindFromName(std::string_view name) {
  for (const auto& entry : kKindNames) {
    if (entry.name == name && entry.kind != PreTokenizerKind::kCustom) {
      return entry.kind;
    }
  }
  return makeError(
      "pre-tokenizer '{}' is not supported (supported: default, gpt2, "
      "llama-bpe, qwen2, smollm)",
      name);
}

std::string_view preTokenizerKindName(PreTokenizerKind kind) {
  for (const auto& entry : kKindNames) {
    if (entry.kind == kind) return entry.name;
  }
  return "?";
}

std::vector<std::string> preTokenizerRegexes(PreTokenizerKind kind) {
  switch (kind) {
    case PreTokenizerKind::kGpt2:
      return {kGpt2Regex};
    case PreTokenizerKind::kSmolLM:
      // Digits are split one by one before the GPT-2 split (checked against
      // llama.cpp: "12345" becomes five tokens).
      return {"\\p{N}", kGpt2Regex};
    case PreTokenizerKind::kLlama3:
      return {kLlama3Regex};
    case PreTokenizerKind::kQwen2:
      return {kQwen2Regex};
    case PreTokenizerKind::kDefault:
      // llama.cpp's fallback for BPE vocabularies without a known pre type.
      return {"[\\p{P}\\$\\+<=>\\^~\\|]+", kGpt2Regex, "\\p{N}+",
              "[0-9][0-9][0-9]"};
    case PreTokenizerKind::kCustom:
      return {};
  }
  return {};
}

}  // namespace kiln
