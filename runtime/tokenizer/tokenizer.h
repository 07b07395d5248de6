// Tokenizer: text <-> token ids for byte-level BPE (GPT-2, Llama-3, Qwen2,
// SmolLM) and SentencePiece BPE (Llama-2, Mistral) vocabularies, matching
// llama.cpp's ids for the same GGUF.
//
//   auto vocab = vocabFromGguf(gguf);             // or vocabFromTokenizerJson
//   auto tok = Tokenizer::create(vocab.take());
//   std::vector<int32_t> ids = tok->encode("Hello", {.parse_special = true});
//   std::string text = tok->decode(ids);
//
// A Tokenizer is immutable after create(); encode/decode may run on many
// threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/support/error.h"
#include "runtime/tokenizer/tokenizer_vocab.h"

namespace kiln {

struct EncodeOptions {
  // Add the BOS/EOS tokens the vocabulary asks for (add_bos / add_eos);
  // false adds none. (SmolLM2 asks for neither; Llama asks for BOS.)
  bool add_special = true;
  // Recognise control tokens such as <|im_start|> written in the text.
  // When false they are tokenized as ordinary text; user-defined (added)
  // tokens are recognised either way, as in llama.cpp.
  bool parse_special = false;
};

struct DecodeOptions {
  // Control tokens (BOS, <|im_end|>) decode to their text unless skipped.
  bool skip_special = false;
};

class Tokenizer {
 public:
  // Checks the vocabulary (ids in range, merges naming known tokens, regexes
  // that compile) and builds the lookup tables.
  static Result<Tokenizer> create(TokenizerVocab vocab);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Never fails: bytes that are not valid UTF-8 are each replaced by U+FFFD
  // before tokenizing (llama.cpp does the same), so ids stay comparable.
  std::vector<int32_t> encode(std::string_view text,
                              const EncodeOptions& options = {}) const;

  // Concatenated bytes of the tokens (may end in a partial UTF-8 sequence if
  // the ids do; see StreamingDetokenizer). Ids outside the vocabulary decode
  // to U+FFFD. SentencePiece drops the space that add_space_prefix added.
  std::string decode(std::span<const int32_t> ids,
                     const DecodeOptions& options = {}) const;

  // The bytes one token contributes to decoded text ("Ġhello" -> " hello",
  // "<0x0A>" -> "\n"). `first` applies SentencePiece's leading-space rule.
  std::string tokenBytes(int32_t id, bool first = false,
                         const DecodeOptions& options = {}) const;

  // The token's string as stored in the vocabulary ("Ġhello"); empty for an
  // out-of-range id.
  const std::string& tokenText(int32_t id) const;
  TokenType tokenType(int32_t id) const;
  bool isControl(int32_t id) const;

  // Exact vocabulary lookup by stored string.
  std::optional<int32_t> findToken(std::string_view text) const;
  // Control / user-defined / unknown tokens by their text ("<|im_end|>").
  std::optional<int32_t> findSpecialToken(std::string_view text) const;

  int32_t bos() const;  // -1 when the vocabulary has none
  int32_t eos() const;
  int32_t unk() const;
  int32_t vocabSize() const;
  const TokenizerVocab& vocab() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Turns a token stream into text piece by piece, emitting only complete
// UTF-8: a character split over several byte tokens (an emoji as four
// <0xNN> pieces, or byte-level BPE splitting a CJK character) is held back
// until its last byte arrives. Bytes that can never complete a character are
// emitted as U+FFFD.
class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(const Tokenizer& tokenizer,
                                DecodeOptions options = {});

  // Text that became complete with this token (often empty).
  std::string push(int32_t id);
  // Whatever is still held back, with any unfinished sequence as U+FFFD.
  std::string finish();
  // Bytes currently held back.
  size_t pendingBytes() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  DecodeOptions options_;
  std::string pending_;
  bool first_ = true;
};

}  // namespace kiln
