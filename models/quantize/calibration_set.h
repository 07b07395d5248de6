// The calibration tokens: a file read once and cut into sequences that the
// model runs in one forward pass.
//   FILE.json   a JSON array of token ids (models without a tokenizer, tests)
//   any other   text, tokenized with the model's tokenizer (GGUF metadata or
//               tokenizer.json), no special tokens added
// Consecutive windows of `ctx` tokens from the start, as many whole windows
// as `max_tokens` allows; a text's windows start with BOS where the
// tokenizer has one (the first token replaced, as `kiln bench ppl` scores). Errors name the
// file: missing or unreadable, empty, not a list of ids in the vocabulary,
// fewer tokens than one window.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/formats/model_source.h"
#include "runtime/support/error.h"

namespace kiln::quantize {

struct CalibrationSet {
  std::vector<std::vector<int32_t>> sequences;  // each `ctx` tokens
  int64_t file_tokens = 0;                      // tokens the whole file holds
};

Result<CalibrationSet> readCalibrationSet(const std::string& path, const formats::ModelSource& model,
                                          int64_t ctx, int64_t max_tokens);

}  // namespace kiln::quantize
