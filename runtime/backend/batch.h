// One forward call's ragged batch, as the engine hands it to a backend, and
// the checks every backend runs on it before anything executes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "runtime/support/error.h"

namespace kiln {

// One forward call's batch: B sequences with N tokens in all, flattened.
// Sequence b owns tokens [query_start[b], query_start[b+1]) (a prefill chunk
// or one decode token); its context after this call is kv_lens[b] tokens,
// the last q_len_b of which are this call's.
struct BatchInputs {
  std::span<const int32_t> tokens;        // [N] token ids
  std::span<const int32_t> positions;     // [N] absolute positions
  std::span<const int32_t> slot_mapping;  // [N] KV pool slot of each token
  std::span<const int32_t> block_tables;  // [B, max_blocks] pool block ids, row-major
  int max_blocks = 0;                     // columns of block_tables
  std::span<const int32_t> query_start;   // [B + 1], query_start[B] == N
  std::span<const int32_t> kv_lens;       // [B]
  // Speculative verify only (tree_verify.h): each row's tree. tokens are
  // the nodes, positions base + depth, kv_lens counting every node.
  std::span<const int32_t> parents = {};         // [N] local parent, -1 for the root
  std::span<const int32_t> base_positions = {};  // [B] the root's position
  // State-space models only (runtime/kv/state_pool.h): each sequence's slot
  // of the state pools. A sequence whose rows start at position 0 starts
  // from the zero state.
  std::span<const int32_t> state_slots = {};  // [B]
};

// What a batch is checked against, by every backend, before anything runs.
struct BatchLimits {
  int64_t max_tokens = 0;  // token budget T_max
  int64_t vocab = 0;
  int64_t num_blocks = 0;  // KV pool blocks
  int64_t page_size = 0;
  bool logits_per_sequence = true;  // logits rows are sequences (else tokens)
  int64_t state_slots = 0;          // > 0: state-space layers' slots, one per sequence (distinct)
};

// Sizes, ranges and consistency of a ragged batch (token ids, positions,
// slots, block ids, query_start, kv_lens, the logits buffer); the error
// names the field, the index and the expected range.
Status checkBatchInputs(const BatchInputs& in, const BatchLimits& limits, size_t logits_out_floats);

}  // namespace kiln
