// A trained draft head in Medusa's manner as a Drafter: K residual blocks
// over the target's last hidden state h (the LM head's input at the token
// before the root), block i giving z_i = h + SiLU(W_i h + b_i), and the
// target's own LM head over z_i giving the token at depth i + 1 (the root
// is the token h's logits chose). No KV and no state between steps: a
// row's drafts are a function of h alone, so rollback costs nothing.
// The head runs on the host (K small [H, H] products a row), the LM head
// through the target's backend (Backend::lmHead), all rows and heads of a
// step in one call.
//
// Checkpoint: a directory with config.json
//   {"kind": "medusa", "hidden_size": H, "heads": K}
// and model.safetensors holding heads.{i}.weight [H, H] and
// heads.{i}.bias [H] (f32 or bf16), i < K; scripts/distill_head.py
// writes one.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "runtime/backend/backend.h"
#include "runtime/spec/drafter.h"

namespace kiln::spec {

struct DraftHeadWeights {
  int64_t hidden = 0;
  int64_t heads = 0;
  std::vector<float> weight;  // [heads, H, H], row-major (out, in)
  std::vector<float> bias;    // [heads, H]
};

// Reads a checkpoint directory; refuses one whose hidden size is not
// `target_hidden` (naming both), or a malformed config or tensor.
Result<DraftHeadWeights> loadDraftHead(const std::string& directory, int64_t target_hidden);

class DraftHeadDrafter final : public Drafter {
 public:
  DraftHeadDrafter(DraftHeadWeights weights, Backend& target) : w_(std::move(weights)), target_(target) {}

  int64_t heads() const { return w_.heads; }
  // Each row's tree: depth d + 1's nodes all take head d's top widths[d]
  // tokens (Medusa's tree), up to the head count; rows without `hidden`
  // draft nothing.
  Status propose(std::span<const DraftRequest> rows) override;

 private:
  DraftHeadWeights w_;
  Backend& target_;
  std::vector<float> z_, logits_;
  std::vector<int64_t> first_;  // each row's first z row (-1: none)
};

}  // namespace kiln::spec
