// Token embedding gather: one table row per token, dequantized to f32.
#pragma once

#include <cstdint>

#include "runtime/numerics/weight_type.h"
#include "runtime/support/error.h"

namespace kiln::cpu {

// tokens: [num_tokens] i32 ids in [0, vocab)
// table:  [vocab, hidden] stored as table_type, rows rowBytes(table_type, hidden) apart
// out:    [num_tokens, hidden] f32
// An out-of-range id is an error naming the id, its position and the vocab
// size; nothing is written in that case.
Status embed(const int32_t* tokens, int64_t num_tokens, const void* table, WeightType table_type,
             int64_t vocab, int64_t hidden, float* out);

}  // namespace kiln::cpu
