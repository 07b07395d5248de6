#include "runtime/cpu/kernels/embed.h"

#include "runtime/numerics/quant.h"
#include "runtime/support/thread_pool.h"

namespace kiln::cpu {

Status embed(const int32_t* tokens, int64_t num_tokens, const void* table, WeightType table_type,
             int64_t vocab, int64_t hidden, float* out) {
  if (num_tokens < 0 || vocab <= 0 || hidden <= 0)
    return makeError("embed: shape tokens={} vocab={} hidden={} is invalid", num_tokens, vocab,
                     hidden);
  if (hidden % quantBlockElements(table_type) != 0)
    return makeError("embed: {} table with hidden={} is invalid: expected a multiple of {}",
                     weightTypeName(table_type), hidden, quantBlockElements(table_type));
  // Validate every id before writing anything, so a bad request leaves the
  // output untouched.
  for (int64_t i = 0; i < num_tokens; ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab)
      return makeError("embed: token id {} at position {} is out of range: expected 0 <= id < {} "
                       "(vocab size)",
                       tokens[i], i, vocab);
  const int64_t row_bytes = rowBytes(table_type, hidden);
  const auto* bytes = static_cast<const uint8_t*>(table);
  parallelFor(num_tokens, 4, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      (void)dequantizeRow(table_type, bytes + int64_t(tokens[t]) * row_bytes, out + t * hidden,
                          hidden);
  });
  return Status::success();
}

}  // namespace kiln::cpu
