// Reads a TokenizerVocab from a Hugging Face tokenizer.json (model.type BPE).
//
// Byte-level vocabularies (GPT-2, Llama-3, Qwen2, SmolLM: a ByteLevel
// pre-tokenizer or decoder) become kByteLevelBpe with their Split / Digits /
// ByteLevel regexes; vocabularies with a '▁' normalizer or Metaspace
// pre-tokenizer and byte_fallback (Llama-2, Mistral) become kSentencePiece
// merged by merge rank. BOS comes from a TemplateProcessing post-processor;
// bos/eos token names also from a tokenizer_config.json next to the file.
#pragma once

#include <string>
#include <string_view>

#include "runtime/support/error.h"
#include "runtime/tokenizer/tokenizer_vocab.h"

namespace kiln {

Result<TokenizerVocab> vocabFromTokenizerJson(const std::string& path);

// Same, from the file's text; `name` stands in for the path in errors.
// `config_json` is the text of tokenizer_config.json, or empty.
Result<TokenizerVocab> vocabFromTokenizerJsonText(std::string_view json_text,
                                                  std::string_view name,
                                                  std::string_view config_json = {});

}  // namespace kiln
