// libFuzzer entry for tokenizer.json: a tokenizer.json, a
// tokenizer_config.json and a text (parts separated by "%%" lines,
// test/fuzz/fuzz_input.h). A vocabulary that loads is built into a Tokenizer
// which then encodes the text's arbitrary bytes both ways (with and without
// control tokens), decodes the ids back, decodes the text's bytes read as
// ids (most of them out of range) and streams them through the
// detokenizer. Nothing may crash; encode and decode never fail.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "runtime/tokenizer/tokenizer.h"
#include "runtime/tokenizer/tokenizer_json.h"
#include "test/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parts = kiln::fuzz::splitParts(data, size, 3);
  auto vocab = kiln::vocabFromTokenizerJsonText(parts[0], "fuzz/tokenizer.json", parts[1]);
  if (!vocab.ok()) return 0;
  auto tokenizer = kiln::Tokenizer::create(vocab.take());
  if (!tokenizer.ok()) return 0;
  const std::string_view text = parts[2];

  for (bool special : {false, true}) {
    std::vector<int32_t> ids = tokenizer->encode(text, {.add_special = special, .parse_special = special});
    for (int32_t id : ids)
      if (id < 0 || id >= tokenizer->vocabSize()) __builtin_trap();
    (void)tokenizer->decode(ids, {.skip_special = special});
  }

  std::vector<int32_t> raw(text.size() / sizeof(int32_t));
  if (!raw.empty()) std::memcpy(raw.data(), text.data(), raw.size() * sizeof(int32_t));
  (void)tokenizer->decode(raw);
  kiln::StreamingDetokenizer stream(*tokenizer);
  for (int32_t id : raw) (void)stream.push(id);
  (void)stream.finish();
  for (int32_t id : raw) {
    (void)tokenizer->tokenText(id);
    (void)tokenizer->tokenType(id);
  }
  (void)tokenizer->findSpecialToken(text);
  return 0;
}
