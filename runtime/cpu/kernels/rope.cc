#include "runtime/cpu/kernels/rope.h"

#include <cmath>

#include "runtime/support/thread_pool.h"

namespace kiln::cpu {
namespace {

constexpr int kMaxHalfDim = 512;

Status checkParams(const RopeParams& params, int head_dim) {
  const int rotary = params.rotary_dim == 0 ? head_dim : params.rotary_dim;
  if (head_dim <= 0) return makeError("rope: head_dim {} is invalid: expected > 0", head_dim);
  if (rotary <= 0 || rotary > head_dim || rotary % 2 != 0 || rotary / 2 > kMaxHalfDim)
    return makeError("rope: rotary_dim {} is invalid: expected an even value in (0, {}] and <= {}",
                     rotary, head_dim, 2 * kMaxHalfDim);
  if (!(params.theta > 0.0f)) return makeError("rope: theta {} is invalid: expected > 0", params.theta);
  if (params.scaling != RopeScaling::kNone && !(params.factor > 0.0f))
    return makeError("rope: scaling factor {} is invalid: expected > 0", params.factor);
  if (params.scaling == RopeScaling::kLlama3 &&
      (!(params.high_freq_factor > params.low_freq_factor) || !(params.low_freq_factor > 0.0f) ||
       params.original_max_position <= 0))
    return makeError("rope: llama3 scaling low_freq_factor {} high_freq_factor {} "
                     "original_max_position {} is invalid: expected 0 < low < high and a "
                     "positive original_max_position",
                     params.low_freq_factor, params.high_freq_factor,
                     params.original_max_position);
  return Status::success();
}

// Writes rotary/2 inverse frequencies; params already checked.
void computeInvFreq(const RopeParams& params, int rotary, float* inv_freq) {
  const int half = rotary / 2;
  for (int i = 0; i < half; ++i) {
    // HF: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), all in f32.
    const float exponent = float(2 * i) / float(rotary);
    inv_freq[i] = 1.0f / std::pow(params.theta, exponent);
  }
  if (params.scaling == RopeScaling::kLinear) {
    for (int i = 0; i < half; ++i) inv_freq[i] /= params.factor;
  } else if (params.scaling == RopeScaling::kLlama3) {
    const float old_context = float(params.original_max_position);
    const float low_freq_wavelen = old_context / params.low_freq_factor;
    const float high_freq_wavelen = old_context / params.high_freq_factor;
    for (int i = 0; i < half; ++i) {
      const float wavelen = 2.0f * float(M_PI) / inv_freq[i];
      if (wavelen > low_freq_wavelen) {
        inv_freq[i] /= params.factor;  // low frequency: fully scaled
      } else if (wavelen >= high_freq_wavelen) {
        // medium frequency: interpolate between scaled and unscaled
        const float smooth = (old_context / wavelen - params.low_freq_factor) /
                             (params.high_freq_factor - params.low_freq_factor);
        inv_freq[i] = (1.0f - smooth) * inv_freq[i] / params.factor + smooth * inv_freq[i];
      }  // high frequency: unchanged
    }
  }
}

bool usesGgmlArithmetic(const RopeParams& params) {
  return params.style == RopeStyle::kInterleaved && params.scaling != RopeScaling::kLlama3;
}

}  // namespace

Result<std::vector<float>> ropeInvFreq(const RopeParams& params, int head_dim) {
  if (Status s = checkParams(params, head_dim); !s.ok()) return s.error();
  const int rotary = params.rotary_dim == 0 ? head_dim : params.rotary_dim;
  std::vector<float> inv_freq(size_t(rotary / 2));
  computeInvFreq(params, rotary, inv_freq.data());
  return inv_freq;
}

Status applyRope(float* x, int64_t tokens, int heads, int head_dim, const int32_t* positions,
                 const RopeParams& params) {
  KILN_RETURN_IF_ERROR(checkParams(params, head_dim));
  if (tokens < 0 || heads <= 0)
    return makeError("rope: shape tokens={} heads={} is invalid", tokens, heads);
  for (int64_t t = 0; t < tokens; ++t)
    if (positions[t] < 0)
      return makeError("rope: position {} of token {} is invalid: expected >= 0", positions[t], t);
  const int rotary = params.rotary_dim == 0 ? head_dim : params.rotary_dim;
  const int half = rotary / 2;
  float inv_freq[kMaxHalfDim];  // no allocation on the hot path
  computeInvFreq(params, rotary, inv_freq);
  const bool ggml = usesGgmlArithmetic(params);
  // ggml: theta_i = p * theta_scale^i by repeated f32 multiplication.
  const float theta_scale = std::pow(params.theta, -2.0f / float(rotary));
  const float freq_scale = params.scaling == RopeScaling::kLinear ? 1.0f / params.factor : 1.0f;

  parallelFor(tokens, 1, [&](int64_t t0, int64_t t1) {
    float cos_table[kMaxHalfDim], sin_table[kMaxHalfDim];
    for (int64_t t = t0; t < t1; ++t) {
      if (ggml) {
        // ggml_rope_cache_init: cosf/sinf of freq_scale * theta, theta
        // advanced by one f32 multiply per pair.
        float theta = float(positions[t]);
        for (int i = 0; i < half; ++i) {
          cos_table[i] = std::cos(freq_scale * theta);
          sin_table[i] = std::sin(freq_scale * theta);
          theta *= theta_scale;
        }
      } else {
        // HF forms the angle as f32 position * f32 inv_freq, then cos/sin in f32.
        for (int i = 0; i < half; ++i) {
          const float angle = float(positions[t]) * inv_freq[i];
          cos_table[i] = float(std::cos(double(angle)));
          sin_table[i] = float(std::sin(double(angle)));
        }
      }
      for (int h = 0; h < heads; ++h) {
        float* v = x + (t * heads + h) * int64_t(head_dim);
        for (int i = 0; i < half; ++i) {
          const int ia = params.style == RopeStyle::kHalf ? i : 2 * i;
          const int ib = params.style == RopeStyle::kHalf ? i + half : 2 * i + 1;
          const float a = v[ia], b = v[ib];
          if (ggml) {
            // ggml's rotate_pairs as GCC compiles it with FMA: each output is
            // one fused multiply-add onto the other, separately rounded, product.
            v[ia] = std::fma(a, cos_table[i], -(b * sin_table[i]));
            v[ib] = std::fma(a, sin_table[i], b * cos_table[i]);
          } else {
            v[ia] = a * cos_table[i] - b * sin_table[i];
            v[ib] = b * cos_table[i] + a * sin_table[i];
          }
        }
      }
    }
  });
  return Status::success();
}

}  // namespace kiln::cpu
