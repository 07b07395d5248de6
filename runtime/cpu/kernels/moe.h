// Mixture-of-experts routing and the routed SwiGLU experts on the CPU.
//
// moeRoute picks each token's experts; moeExperts runs them grouped by
// expert: the rows routed to expert e are gathered into one [n_e, hidden]
// block and multiplied by e's weights once (three linear() calls), so each
// expert's weights are read once per batch whatever the token count, and no
// expert runs on a token not routed to it.
#pragma once

#include <cstdint>
#include <span>

#include "runtime/numerics/weight_type.h"
#include "runtime/support/error.h"

namespace kiln::cpu {

// logits [rows, experts] f32 -> weights [rows, top_k] f32 and ids
// [rows, top_k]: the softmax of each row, its top_k largest (largest first;
// equal probabilities in expert order), divided by their sum if `normalize`.
void moeRoute(const float* logits, int64_t rows, int64_t experts, int64_t top_k, bool normalize,
              float* weights, int32_t* ids);

// The three stacked expert tensors: [experts, ffn, hidden] gate and up,
// [experts, hidden, ffn] down, each expert's matrix rowBytes(type, ·) · rows
// after the previous one's.
struct ExpertWeights {
  const void* gate = nullptr;
  const void* up = nullptr;
  const void* down = nullptr;
  WeightType type = WeightType::F32;
  int64_t experts = 0, ffn = 0, hidden = 0;
};

// Scratch moeExperts needs for `rows` tokens (floats).
int64_t moeScratchFloats(int64_t rows, int64_t top_k, int64_t hidden, int64_t ffn);

// y [rows, hidden] = Σ_k weights[t, k] · expert ids[t, k] (x[t]), for
// x [rows, hidden]; ids outside [0, experts) are an error. `scratch` holds
// moeScratchFloats(rows, top_k, ...) floats; y must not alias x.
Status moeExperts(const float* x, int64_t rows, const float* weights, const int32_t* ids, int64_t top_k,
                  const ExpertWeights& w, std::span<float> scratch, float* y);

}  // namespace kiln::cpu
