// Rotary position embedding on q and k fused with the paged KV write.
//
//   qkv [N, (H + 2 Hkv) D] bf16 (merged: q heads, then k heads, then v heads)
//     or q [N, H D], k [N, Hkv D], v [N, Hkv D] bf16
//   positions [N] i32, slot_mapping [N] i32 (slot < 0 or >= num_slots: no KV write)
//   k_pool, v_pool [num_blocks, page_size, Hkv, D] (Config::Kv)
//   q_out [N, H, D] bf16 = rope(q)
//
// Pairs: kHalf rotates (i, i + D/2) (HF rotate_half), kInterleaved (2i, 2i+1)
// (llama.cpp's GGUF layout). Pair i turns by position · inv_freq_i with
// inv_freq_i = 1 / theta^(2i/D) in f32 as HF computes it, then scaled: linear
// divides by factor; llama3 divides long wavelengths by factor, keeps short
// ones and interpolates between (transformers' _compute_llama3_parameters).
// Grid [N, ropeKvAppendHeadGroups(H, Hkv)], block [Config::kThreads]: block
// (t, g) does heads g*kRopeHeadsPerBlock.. of token t, counting q heads, then
// k heads (rotated into the pool), then v heads (copied into the pool). The
// sin/cos of each pair are computed once per block, not once per head.
#pragma once

#include "common.cuh"

namespace kiln {
namespace kernels {

enum RopeScalingKind { kRopeNone = 0, kRopeLinear = 1, kRopeLlama3 = 2 };

template <class Config>
__device__ __forceinline__ float rope_inv_freq(int i) {
  const float exponent = (float)(2 * i) / (float)Config::kHeadDim;
  float inv = 1.0f / powf(Config::kTheta, exponent);
  if (Config::kScaling == kRopeLinear) {
    inv /= Config::kFactor;
  } else if (Config::kScaling == kRopeLlama3) {
    const float old_context = (float)Config::kOriginalMaxPosition;
    const float low_wavelen = old_context / Config::kLowFreqFactor;
    const float high_wavelen = old_context / Config::kHighFreqFactor;
    const float wavelen = 2.0f * 3.14159265358979323846f / inv;
    if (wavelen > low_wavelen) {
      inv /= Config::kFactor;
    } else if (wavelen >= high_wavelen) {
      const float smooth = (old_context / wavelen - Config::kLowFreqFactor) /
                           (Config::kHighFreqFactor - Config::kLowFreqFactor);
      inv = (1.0f - smooth) * inv / Config::kFactor + smooth * inv;
    }
  }
  return inv;
}

// Config: using Kv; static constexpr int kHeads, kKvHeads, kHeadDim, kThreads,
//   kScaling, kOriginalMaxPosition; static constexpr bool kMergedQkv, kInterleaved;
//   static constexpr float kTheta, kFactor, kLowFreqFactor, kHighFreqFactor.
template <class Config>
__device__ __forceinline__ void rope_kv_append(const RopeKvAppendParams& p) {
  constexpr int D = Config::kHeadDim, H = Config::kHeads, Hkv = Config::kKvHeads;
  constexpr int kHalf = D / 2, kGroup = kRopeHeadsPerBlock;
  static_assert(D % 8 == 0, "head_dim is a multiple of 8");
  using Kv = typename Config::Kv;
  __shared__ float sin_of[kHalf], cos_of[kHalf];
  const int t = blockIdx.x, head0 = blockIdx.y * kGroup;
  if (t >= p.num_tokens) return;
  const bf16 *q, *k, *v;
  if (Config::kMergedQkv) {
    q = static_cast<const bf16*>(p.qkv) + (long long)t * (H + 2 * Hkv) * D;
    k = q + H * D;
    v = k + Hkv * D;
  } else {
    q = static_cast<const bf16*>(p.q) + (long long)t * H * D;
    k = static_cast<const bf16*>(p.k) + (long long)t * Hkv * D;
    v = static_cast<const bf16*>(p.v) + (long long)t * Hkv * D;
  }
  const int slot = p.slot_mapping[t];
  const bool write_kv = slot >= 0 && (long long)slot < p.num_slots;
  const long long kv_base = (long long)slot * Hkv * D;
  bf16* q_out = static_cast<bf16*>(p.q_out) + (long long)t * H * D;

  if (head0 < H + Hkv) {  // this group rotates q or k heads
    const float pos = (float)p.positions[t];
    for (int i = threadIdx.x; i < kHalf; i += Config::kThreads) sincosf(pos * rope_inv_freq<Config>(i), &sin_of[i], &cos_of[i]);
    __syncthreads();
  }
  for (int w = threadIdx.x; w < kGroup * kHalf; w += Config::kThreads) {
    const int head = head0 + w / kHalf, i = w % kHalf;
    if (head >= H + Hkv) break;  // the v heads are copied below
    const int lo = Config::kInterleaved ? 2 * i : i;
    const int hi = Config::kInterleaved ? 2 * i + 1 : i + kHalf;
    const float s = sin_of[i], c = cos_of[i];
    const bool is_q = head < H;
    const bf16* src = is_q ? q + head * D : k + (head - H) * D;
    const float a = to_float(src[lo]), b = to_float(src[hi]);
    const float ra = a * c - b * s, rb = b * c + a * s;
    if (is_q) {
      q_out[head * D + lo] = from_float<bf16>(ra);
      q_out[head * D + hi] = from_float<bf16>(rb);
    } else if (write_kv) {
      Kv* dst = static_cast<Kv*>(p.k_pool) + kv_base + (head - H) * D;
      dst[lo] = from_float<Kv>(ra);
      dst[hi] = from_float<Kv>(rb);
    }
  }
  // V heads of this group: copied 8 elements at a time.
  if (write_kv) {
    for (int w = threadIdx.x; w < kGroup * D / 8; w += Config::kThreads) {
      const int head = head0 + w / (D / 8), vec = w % (D / 8);
      if (head < H + Hkv) continue;
      if (head >= H + 2 * Hkv) break;
      float x[8];
      load8(v + (head - H - Hkv) * D + vec * 8, x);
      store8(static_cast<Kv*>(p.v_pool) + kv_base + (head - H - Hkv) * D + vec * 8, x);
    }
  }
}

}  // namespace kernels
}  // namespace kiln
