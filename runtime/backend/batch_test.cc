// The batch checks every backend runs before a forward call: a well-formed
// ragged batch passes, and each malformed field is named with its index and
// the range it must lie in. No executor needed.
#include "runtime/backend/batch.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kiln {
namespace {

// Two sequences in a pool of 4 blocks of 16 slots, vocabulary 100: a
// 3-token prefill chunk in block 0 and one decode token in block 2.
struct TwoSequences {
  std::vector<int32_t> tokens{5, 6, 7, 9}, positions{0, 1, 2, 20}, slots{0, 1, 2, 36};
  std::vector<int32_t> tables{0, -1, 1, 2}, query_start{0, 3, 4}, kv_lens{3, 21};
  BatchInputs inputs() const { return {tokens, positions, slots, tables, 2, query_start, kv_lens}; }
};

constexpr BatchLimits kLimits{.max_tokens = 8, .vocab = 100, .num_blocks = 4, .page_size = 16};

std::string errorOf(const Status& s) { return s.ok() ? "ok" : s.error().message; }

TEST(CheckBatchInputs, AcceptsARaggedBatch) {
  TwoSequences b;
  EXPECT_EQ(errorOf(checkBatchInputs(b.inputs(), kLimits, 2 * 100)), "ok");
}

TEST(CheckBatchInputs, LogitsRowsAreSequencesOrTokensAsThePlanSays) {
  TwoSequences b;
  EXPECT_EQ(errorOf(checkBatchInputs(b.inputs(), kLimits, 2 * 100 - 1)),
            "forward: logits_out holds 199 floats; expected 2 rows x vocab 100");
  BatchLimits per_token = kLimits;
  per_token.logits_per_sequence = false;
  EXPECT_EQ(errorOf(checkBatchInputs(b.inputs(), per_token, 2 * 100)),
            "forward: logits_out holds 200 floats; expected 4 rows x vocab 100");
}

// A state-space plan's batch names each sequence's state slot: one per
// sequence, inside the state pool, no two alike.
TEST(CheckBatchInputs, StateSlotsOnePerSequenceInRangeAndDistinct) {
  TwoSequences b;
  BatchLimits limits = kLimits;
  limits.state_slots = 3;
  std::vector<int32_t> state_slots{2, 0};
  BatchInputs in = b.inputs();
  in.state_slots = state_slots;
  EXPECT_EQ(errorOf(checkBatchInputs(in, limits, 200)), "ok");
  in.state_slots = std::span<const int32_t>(state_slots).first(1);
  EXPECT_EQ(errorOf(checkBatchInputs(in, limits, 200)),
            "forward: state_slots has 1 entries; expected one per sequence (2)");
  state_slots = {2, 3};
  in.state_slots = state_slots;
  EXPECT_EQ(errorOf(checkBatchInputs(in, limits, 200)),
            "forward: state_slots[1] = 3 is outside the state pool's 3 slots");
  state_slots = {1, 1};
  EXPECT_EQ(errorOf(checkBatchInputs(in, limits, 200)), "forward: sequences 0 and 1 share state slot 1");
}

TEST(CheckBatchInputs, NamesTheFieldTheIndexAndTheRange) {
  TwoSequences b;
  b.tokens[3] = 100;
  EXPECT_EQ(errorOf(checkBatchInputs(b.inputs(), kLimits, 200)),
            "forward: token 100 at index 3 is outside the vocabulary [0, 100)");
  b = {};
  b.slots[1] = 64;
  EXPECT_EQ(errorOf(checkBatchInputs(b.inputs(), kLimits, 200)),
            "forward: slot 64 at index 1 is outside the pool's 64 slots");
  b = {};
  b.tables[3] = 4;
  EXPECT_EQ(errorOf(checkBatchInputs(b.inputs(), kLimits, 200)),
            "forward: block_tables[1][1] = 4 is outside the pool's 4 blocks");
  b = {};
  b.kv_lens[1] = 33;
  EXPECT_EQ(errorOf(checkBatchInputs(b.inputs(), kLimits, 200)),
            "forward: sequence 1 has kv_len 33; expected 1 (its tokens) to 32 (max_blocks x "
            "page_size)");
  b = {};
  b.query_start = {0, 0, 4};
  EXPECT_EQ(errorOf(checkBatchInputs(b.inputs(), kLimits, 200)),
            "forward: sequence 0 has no tokens (query_start 0 .. 0)");
}

TEST(CheckBatchInputs, HoldsTheTokenBudget) {
  TwoSequences b;
  BatchLimits small = kLimits;
  small.max_tokens = 3;
  EXPECT_EQ(errorOf(checkBatchInputs(b.inputs(), small, 200)),
            "forward: 4 tokens; expected 1 to the token budget 3");
}

}  // namespace
}  // namespace kiln
