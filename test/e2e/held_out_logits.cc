#include "test/e2e/held_out_logits.h"

#include <gtest/gtest.h>

#include "runtime/backend/plan_kv_pool.h"
#include "runtime/cpu/executor/executor.h"
#include "runtime/cpu/kernels/linear.h"

namespace kiln::e2e {
namespace {

std::vector<int32_t> heldOutTokens(int64_t vocab) {
  std::vector<int32_t> ids;
  uint64_t state = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < kSequences * kLength; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    ids.push_back(int32_t((state >> 33) % uint64_t(vocab)));
  }
  return ids;
}

}  // namespace

std::vector<float> heldOutLogits(const Manifest& manifest, const WeightStore& weights) {
  const int64_t page = manifest.kv_cache.page_size;
  const int64_t blocks_per_seq = (kLength + page - 1) / page;
  const int64_t count = int64_t(kSequences) * kLength;
  std::vector<int32_t> tokens, positions, slots, tables, query_start{0}, kv_lens;
  const std::vector<int32_t> ids = heldOutTokens(manifest.model.vocab_size);
  for (int64_t s = 0; s < count; ++s) {
    const int64_t seq = s / kLength, len = s % kLength + 1;
    for (int64_t p = 0; p < len; ++p) {
      tokens.push_back(ids[size_t(seq * kLength + p)]);
      positions.push_back(int32_t(p));
      slots.push_back(int32_t((s * blocks_per_seq + p / page) * page + p % page));
    }
    for (int64_t b = 0; b < blocks_per_seq; ++b) tables.push_back(int32_t(s * blocks_per_seq + b));
    query_start.push_back(int32_t(tokens.size()));
    kv_lens.push_back(int32_t(len));
  }
  auto executor = cpu::CpuExecutor::create(manifest, weights,
                                           kvPoolConfigFor(manifest, count * blocks_per_seq),
                                           int64_t(tokens.size()));
  EXPECT_TRUE(executor.ok()) << executor.error().message;
  if (!executor.ok()) return {};
  BatchInputs batch{tokens, positions, slots, tables, int(blocks_per_seq), query_start, kv_lens};
  std::vector<float> logits(size_t(count * (*executor)->vocabSize()));
  cpu::setQuantizedWeightPath(cpu::LinearPath::kDequantSgemm);
  Status status = (*executor)->forward(batch, logits);
  cpu::setQuantizedWeightPath(cpu::LinearPath::kQuantDot);
  EXPECT_TRUE(status.ok()) << status.error().message;
  return logits;
}

double relativeError(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < b.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return num / den;
}

}  // namespace kiln::e2e
