// Reads a TokenizerVocab from GGUF metadata (the tokenizer.ggml.* keys that
// llama.cpp's converters write).
#pragma once

#include "models/formats/gguf_file.h"
#include "runtime/support/error.h"
#include "runtime/tokenizer/tokenizer_vocab.h"

namespace kiln {

// Required: tokenizer.ggml.model ("gpt2" or "llama"), tokenizer.ggml.tokens,
// and tokenizer.ggml.merges for "gpt2". Optional keys take llama.cpp's
// defaults (SentencePiece: bos 1, eos 2, unk 0, add_bos, add_space_prefix;
// byte-level: no BOS, pre-tokenizer "default"). A missing or mistyped key
// gives an error naming the file and the key.
Result<TokenizerVocab> vocabFromGguf(const formats::GgufFile& gguf);

}  // namespace kiln
