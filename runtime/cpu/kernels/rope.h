// Rotary position embedding, applied in place to q or k.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/support/error.h"

namespace kiln::cpu {

enum class RopeStyle {
  // HF rotate_half: element i pairs with i + rotary_dim/2 (HF Llama checkpoints).
  kHalf,
  // Adjacent pairs (2i, 2i+1): llama.cpp's layout for GGUF llama models, whose
  // q/k weights were permuted at conversion. Unscaled and linearly scaled
  // interleaved rope also rounds as ggml does (see applyRope).
  kInterleaved,
};

enum class RopeScaling { kNone, kLinear, kLlama3 };

struct RopeParams {
  float theta = 10000.0f;
  RopeStyle style = RopeStyle::kHalf;
  // Rotated prefix of each head; 0 means the whole head (partial rotary leaves
  // the tail untouched).
  int rotary_dim = 0;
  RopeScaling scaling = RopeScaling::kNone;
  float factor = 1.0f;                   // linear and llama3
  float low_freq_factor = 1.0f;          // llama3
  float high_freq_factor = 4.0f;         // llama3
  int original_max_position = 8192;      // llama3
};

// Inverse frequencies [rotary_dim / 2], f32 as HF computes them
// (1 / theta^(2i/d)), then scaled: linear divides all by factor; llama3 follows
// transformers' _compute_llama3_parameters (long wavelengths / factor, short
// ones kept, the band between smoothly interpolated).
Result<std::vector<float>> ropeInvFreq(const RopeParams& params, int head_dim);

// x:         [tokens, heads, head_dim] f32, rotated in place
// positions: [tokens] i32 absolute positions (>= 0)
// Each pair (a, b) at frequency f becomes
//   (a cos(p f) - b sin(p f),  b cos(p f) + a sin(p f)).
// kHalf (and llama3-scaled) angles are transformers': f32 p * inv_freq.
// kInterleaved angles are ggml's, bit for bit: theta_scale =
// powf(theta, -2/rotary_dim), angle_i = p * theta_scale^i by repeated f32
// multiplication, cosf/sinf, and the rotation as fused multiply-adds.
// ggml's angles drift from p * inv_freq by a few ulps of the angle.

Status applyRope(float* x, int64_t tokens, int heads, int head_dim, const int32_t* positions,
                 const RopeParams& params);

}  // namespace kiln::cpu
