// TokenizerVocab: everything a tokenizer needs, as plain data. Loaders
// (vocabFromGguf, vocabFromTokenizerJson) fill it; Tokenizer::create checks it
// and builds the lookup tables. Keeping the loaders apart from the algorithm
// lets tests build tiny vocabularies by hand.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/support/error.h"

namespace kiln {

enum class TokenizerModel {
  // GPT-2 style: bytes mapped to a printable alphabet, regex pre-split,
  // merges applied by rank (GGUF tokenizer.ggml.model = "gpt2").
  kByteLevelBpe,
  // SentencePiece BPE (Llama-2, Mistral): '▁' for spaces, pieces merged by
  // score, <0xNN> byte fallback (GGUF tokenizer.ggml.model = "llama").
  kSentencePiece,
};

// How byte-level BPE splits text into words before merging. Names follow
// GGUF's tokenizer.ggml.pre; each maps to the regex sequence llama.cpp uses.
enum class PreTokenizerKind {
  kDefault,
  kGpt2,
  kLlama3,  // "llama-bpe"
  kQwen2,
  kSmolLM,  // individual digits, then the GPT-2 regex
  kCustom,  // regexes given explicitly (tokenizer.json)
};

// Values as in GGUF's tokenizer.ggml.token_type (llama.cpp's enum).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,      // <|im_start|>, <s>: matched in text only on request
  kUserDefined = 4,  // added tokens: always matched in text
  kUnused = 5,
  kByte = 6,  // <0x0A> byte-fallback pieces
};

struct TokenizerVocab {
  TokenizerModel model = TokenizerModel::kByteLevelBpe;
  std::vector<std::string> tokens;
  // Merge priority for kSentencePiece (higher merges first); may be empty
  // for kByteLevelBpe.
  std::vector<float> scores;
  // Empty means every token is kNormal.
  std::vector<TokenType> token_types;
  // (left, right) pairs; the index is the rank (lower merges first).
  std::vector<std::pair<std::string, std::string>> merges;

  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t unk_id = -1;
  int32_t pad_id = -1;
  bool add_bos = false;
  bool add_eos = false;
  // SentencePiece: prefix the text with a space (so "Hello" -> "▁Hello").
  bool add_space_prefix = false;
  // Llama-3: a pre-split word that is itself a token is emitted whole.
  bool ignore_merges = false;

  PreTokenizerKind pre = PreTokenizerKind::kDefault;
  // Regexes applied in sequence, each splitting the pieces of the previous
  // one (matches and the gaps between them both become pieces). Filled from
  // `pre` by preTokenizerRegexes unless pre == kCustom.
  std::vector<std::string> pre_regexes;
};

// "gpt2", "smollm", "llama-bpe", "qwen2", "default" -> kind. Unknown names
// give an error listing the supported ones.
Result<PreTokenizerKind> preTokenizerKindFromName(std::string_view name);
std::string_view preTokenizerKindName(PreTokenizerKind kind);

// The regex sequence for `kind` (PCRE2 syntax, matched in UTF + UCP mode).
std::vector<std::string> preTokenizerRegexes(PreTokenizerKind kind);

}  // namespace kiln
