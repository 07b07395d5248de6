#include "runtime/tokenizer/gguf_vocab.h"

namespace kiln {

namespace {

// Optional keys: absent -> keep the default; present with the wrong type ->
// error (a silently ignored bad value would give wrong ids).
Status readOptionalId(const formats::GgufFile& gguf, std::string_view key,
                      int32_t& id) {
  if (gguf.find(key) == nullptr) return Status::success();
  auto value = gguf.getUInt(key);
  if (!value.ok()) return value.error();
  if (*value > static_cast<uint64_t>(INT32_MAX)) {
    return makeError("{}: metadata '{}': token id {} does not fit int32",
                     gguf.path(), key, *value);
  }
  id = static_cast<int32_t>(*value);
  return Status::success();
}

Status readOptionalBool(const formats::GgufFile& gguf, std::string_view key,
                        bool& flag) {
  if (gguf.find(key) == nullptr) return Status::success();
  auto value = gguf.getBool(key);
  if (!value.ok()) return value.error();
  flag = *value;
  return Status::success();
}

}  // namespace

Result<TokenizerVocab> vocabFromGguf(const formats::GgufFile& gguf) {
  TokenizerVocab vocab;
  auto model = gguf.getString("tokenizer.ggml.model");
  if (!model.ok()) return model.error();
  if (*model == "gpt2") {
    vocab.model = TokenizerModel::kByteLevelBpe;
  } else if (*model == "llama") {
    vocab.model = TokenizerModel::kSentencePiece;
    vocab.bos_id = 1;
    vocab.eos_id = 2;
    vocab.unk_id = 0;
    vocab.add_bos = true;
    vocab.add_space_prefix = true;
  } else {
    return makeError(
        "{}: metadata 'tokenizer.ggml.model': '{}' is not supported "
        "(supported: gpt2, llama)",
        gguf.path(), *model);
  }

  auto tokens = gguf.getStringArray("tokenizer.ggml.tokens");
  if (!tokens.ok()) return tokens.error();
  vocab.tokens = tokens.take();
  const size_t n = vocab.tokens.size();

  if (gguf.find("tokenizer.ggml.scores") != nullptr) {
    auto scores = gguf.getFloatArray("tokenizer.ggml.scores");
    if (!scores.ok()) return scores.error();
    vocab.scores = scores.take();
    if (vocab.scores.size() != n) {
      return makeError("{}: metadata 'tokenizer.ggml.scores': {} scores for "
                       "{} tokens",
                       gguf.path(), vocab.scores.size(), n);
    }
  }
  if (gguf.find("tokenizer.ggml.token_type") != nullptr) {
    auto types = gguf.getIntArray("tokenizer.ggml.token_type");
    if (!types.ok()) return types.error();
    if (types->size() != n) {
      return makeError("{}: metadata 'tokenizer.ggml.token_type': {} types "
                       "for {} tokens",
                       gguf.path(), types->size(), n);
    }
    vocab.token_types.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      int32_t type = (*types)[i];
      if (type < 0 || type > static_cast<int32_t>(TokenType::kByte)) {
        return makeError("{}: metadata 'tokenizer.ggml.token_type': token {} "
                         "has type {}, expected 0..6",
                         gguf.path(), i, type);
      }
      vocab.token_types.push_back(static_cast<TokenType>(type));
    }
  }

  if (vocab.model == TokenizerModel::kByteLevelBpe) {
    auto merges = gguf.getStringArray("tokenizer.ggml.merges");
    if (!merges.ok()) return merges.error();
    vocab.merges.reserve(merges->size());
    for (size_t i = 0; i < merges->size(); ++i) {
      const std::string& merge = (*merges)[i];
      // Split at the first space after the first byte, as llama.cpp does.
      size_t space = merge.size() > 1 ? merge.find(' ', 1) : std::string::npos;
      if (space == std::string::npos) {
        return makeError("{}: metadata 'tokenizer.ggml.merges': merge #{} "
                         "'{}' is not two tokens separated by a space",
                         gguf.path(), i, merge);
      }
      vocab.merges.emplace_back(merge.substr(0, space),
                                merge.substr(space + 1));
    }
    vocab.pre = PreTokenizerKind::kDefault;
    if (gguf.find("tokenizer.ggml.pre") != nullptr) {
      auto pre = gguf.getString("tokenizer.ggml.pre");
      if (!pre.ok()) return pre.error();
      auto kind = preTokenizerKindFromName(*pre);
      if (!kind.ok()) {
        return makeError("{}: metadata 'tokenizer.ggml.pre': {}", gguf.path(),
                         kind.error().message);
      }
      vocab.pre = *kind;
      if (vocab.pre == PreTokenizerKind::kLlama3) {
        vocab.ignore_merges = true;
        vocab.add_bos = true;
      }
    }
    vocab.pre_regexes = preTokenizerRegexes(vocab.pre);
  }

  KILN_RETURN_IF_ERROR(
      readOptionalId(gguf, "tokenizer.ggml.bos_token_id", vocab.bos_id));
  KILN_RETURN_IF_ERROR(
      readOptionalId(gguf, "tokenizer.ggml.eos_token_id", vocab.eos_id));
  KILN_RETURN_IF_ERROR(
      readOptionalId(gguf, "tokenizer.ggml.unknown_token_id", vocab.unk_id));
  KILN_RETURN_IF_ERROR(
      readOptionalId(gguf, "tokenizer.ggml.padding_token_id", vocab.pad_id));
  KILN_RETURN_IF_ERROR(
      readOptionalBool(gguf, "tokenizer.ggml.add_bos_token", vocab.add_bos));
  KILN_RETURN_IF_ERROR(
      readOptionalBool(gguf, "tokenizer.ggml.add_eos_token", vocab.add_eos));
  KILN_RETURN_IF_ERROR(readOptionalBool(gguf, "tokenizer.ggml.add_space_prefix",
                                        vocab.add_space_prefix));
  for (auto [key, id] :
       {std::pair<const char*, int32_t>{"bos_token_id", vocab.bos_id},
        {"eos_token_id", vocab.eos_id},
        {"unknown_token_id", vocab.unk_id},
        {"padding_token_id", vocab.pad_id}}) {
    if (id >= static_cast<int64_t>(n)) {
      return makeError("{}: metadata 'tokenizer.ggml.{}': id {} is outside "
                       "the vocabulary of {} tokens",
                       gguf.path(), key, id, n);
    }
  }
  return vocab;
}

}  // namespace kiln
