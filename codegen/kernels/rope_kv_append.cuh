// Rotary position embedding on q and k fused with the paged KV write.
//
//   qkv [N, (H + 2 Hkv) D] (merged: q heads, then k heads, then v heads)
//     or q [N, H D], k [N, Hkv D], v [N, Hkv D], all Config::X (bf16, or f32 in f32 plans)
//   positions [N] i32, slot_mapping [N] i32 (slot < 0 or >= num_slots: no KV write)
//   k_pool, v_pool [num_blocks, page_size, Hkv, D] (Config::Kv: bf16, f32, or
//     KvInt8 / KvE4M3 codes with k_scales, v_scales [num_blocks, Hkv, page_size])
//   q_out [N, H, D] (Config::QOut) = rope(q)
//
// Pairs: kHalf rotates (i, i + D/2) (HF rotate_half), kInterleaved (2i, 2i+1)
// (llama.cpp's GGUF layout). With kQkNorm (Qwen3) each q and k head is
// first RMS-normalized over its D elements, x / sqrt(mean(x²) + eps) · w
// with w = q_norm or k_norm [D] f32, in f32 and not rounded before the
// rotation: a warp per head of the block's group finds the head's scale
// before the rotation loop. Pair i turns by position · inv_freq_i with
// inv_freq_i = 1 / theta^(2i/D) in f32 as HF computes it, then scaled: linear
// divides by factor; llama3 divides long wavelengths by factor, keeps short
// ones and interpolates between (transformers' _compute_llama3_parameters).
// Grid [N, ropeKvAppendHeadGroups(H, Hkv)], block [Config::kThreads]: block
// (t, g) does heads g*kRopeHeadsPerBlock.. of token t, counting q heads, then
// k heads (rotated into the pool), then v heads (copied into the pool). The
// sin/cos of each pair are computed once per block, not once per head, and
// a thread turns 8 elements at a time with 16-byte loads and stores. Into
// int8/fp8 pools a row is quantized with its own scale (kv_quant.cuh), so the
// block first gathers its rotated k and its v heads in shared memory as f32,
// then a warp per head finds the head's absmax and writes codes and scale.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#include "common.cuh"
#endif
#include "kv_quant.cuh"

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

// The two columns of a merged-qkv row ((H + 2 Hkv) D: q heads, k heads, v
// heads) that pair j (of (H + 2 Hkv) D / 2) rotates together, and the pair's
// frequency index i (inv_freq_i) within its head.
template <class Config>
__device__ __forceinline__ int rope_pair_columns(int j, int& lo, int& hi) {
  constexpr int D = Config::kHeadDim, kHalf = D / 2;
  if (Config::kInterleaved) {
    lo = 2 * j;
    hi = lo + 1;
  } else {
    lo = j / kHalf * D + j % kHalf;
    hi = lo + kHalf;
  }
  return j % kHalf;
}

// Stores columns (lo, hi) of one token's merged-qkv row, values (a, b): q
// and k pairs rotated by the angle with sine s and cosine c, q into q_out
// ([H D] of the token), k and v into the pools at the token's slot (k_slot,
// v_slot: [Hkv D] at the slot, or null when the token writes no KV; for
// int8/fp8 pools, f32 staging rows in shared memory).
template <class Config, class QOut, class Kv>
__device__ __forceinline__ void store_rope_pair(QOut* q_out, Kv* k_slot, Kv* v_slot, int lo, int hi, float a,
                                                float b, float s, float c) {
  constexpr int D = Config::kHeadDim, H = Config::kHeads, Hkv = Config::kKvHeads;
  const int head = lo / D;
  if (head >= H + Hkv) {  // v: stored as it is
    if (v_slot != nullptr) {
      v_slot[lo - (H + Hkv) * D] = from_float<Kv>(a);
      v_slot[hi - (H + Hkv) * D] = from_float<Kv>(b);
    }
    return;
  }
  const float ra = a * c - b * s, rb = b * c + a * s;
  if (head < H) {
    q_out[lo] = from_float<QOut>(ra);
    q_out[hi] = from_float<QOut>(rb);
  } else if (k_slot != nullptr) {
    k_slot[lo - H * D] = from_float<Kv>(ra);
    k_slot[hi - H * D] = from_float<Kv>(rb);
  }
}

// Whether a Config normalizes q and k per head (kQkNorm, with kQkNormEpsilon):
// false for Configs that do not say.
template <class C, class = void>
struct RopeQkNorm {
  static constexpr bool value = false;
  static constexpr float epsilon = 0.0f;
};
template <class C>
struct RopeQkNorm<C, decltype(void(C::kQkNorm))> {
  static constexpr bool value = C::kQkNorm;
  static constexpr float epsilon = C::kQkNormEpsilon;
};

// Config: using Kv, X, QOut; static constexpr int kHeads, kKvHeads, kHeadDim, kThreads,
//   kScaling, kOriginalMaxPosition; static constexpr bool kMergedQkv, kInterleaved;
//   static constexpr float kTheta, kFactor, kLowFreqFactor, kHighFreqFactor;
//   optionally static constexpr bool kQkNorm and float kQkNormEpsilon.
template <class Config>
__device__ __forceinline__ void rope_kv_append(const RopeKvAppendParams& p) {
  constexpr int D = Config::kHeadDim, H = Config::kHeads, Hkv = Config::kKvHeads;
  constexpr int kHalf = D / 2, kGroup = kRopeHeadsPerBlock;
  static_assert(D % 8 == 0, "head_dim is a multiple of 8");
  using Kv = typename Config::Kv;
  using X = typename Config::X;
  using QOut = typename Config::QOut;
  constexpr bool kScaled = KvScaled<Kv>::value;
  // What the k and v heads are written as before they reach the pool: the
  // pool's own type, or f32 staging for the scaled pools.
  using KvOut = typename KvScaled<Kv>::Staged;
  static_assert(!kScaled || 2 * Hkv * D * 4 <= 32 * 1024, "the f32 staging of a token's k and v heads");
  constexpr bool kQkNorm = RopeQkNorm<Config>::value;
  __shared__ float sin_of[kHalf], cos_of[kHalf];
  __shared__ float norm_of[kQkNorm ? kGroup : 1];  // qk_norm: 1 / rms of each q or k head of the group
  __shared__ __align__(16) float kv_stage[kScaled ? 2 * Hkv * D : 4];  // [k heads, v heads][D]
  const int t = blockIdx.x, head0 = blockIdx.y * kGroup;
  if (t >= p.num_tokens) return;
  const X *q, *k, *v;
  if (Config::kMergedQkv) {
    q = static_cast<const X*>(p.qkv) + (long long)t * (H + 2 * Hkv) * D;
    k = q + H * D;
    v = k + Hkv * D;
  } else {
    q = static_cast<const X*>(p.q) + (long long)t * H * D;
    k = static_cast<const X*>(p.k) + (long long)t * Hkv * D;
    v = static_cast<const X*>(p.v) + (long long)t * Hkv * D;
  }
  const int slot = p.slot_mapping[t];
  const bool write_kv = slot >= 0 && (long long)slot < p.num_slots;
  const long long kv_base = (long long)slot * Hkv * D;
  QOut* q_out = static_cast<QOut*>(p.q_out) + (long long)t * H * D;

  if (head0 < H + Hkv) {  // this group rotates q or k heads
    const float pos = (float)p.positions[t];
    for (int i = threadIdx.x; i < kHalf; i += Config::kThreads) sincosf(pos * rope_inv_freq<Config>(i), &sin_of[i], &cos_of[i]);
    if constexpr (kQkNorm) {  // a warp per q or k head: the head's 1 / sqrt(mean(x²) + eps)
      const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
      for (int g = warp; g < kGroup; g += Config::kThreads / 32) {
        const int head = head0 + g;
        if (head >= H + Hkv) break;
        const X* src = head < H ? q + head * D : k + (head - H) * D;
        float ss = 0.0f;
        for (int e = lane; e < D; e += 32) {
          const float x = to_float(src[e]);
          ss += x * x;
        }
        ss = warp_sum(ss);
        if (lane == 0) norm_of[g] = rsqrtf(ss / (float)D + RopeQkNorm<Config>::epsilon);
      }
    }
    __syncthreads();
  }
  KvOut* k_slot = nullptr;
  KvOut* v_slot = nullptr;
  if (write_kv) {
    if constexpr (kScaled) {
      k_slot = kv_stage;
      v_slot = kv_stage + Hkv * D;
    } else {
      k_slot = static_cast<Kv*>(p.k_pool) + kv_base;
      v_slot = static_cast<Kv*>(p.v_pool) + kv_base;
    }
  }
  // The rotated heads (q, then k), 8 elements a step with 16-byte loads and
  // stores: the half style turns elements c..c+7 with c+D/2..c+D/2+7, the
  // interleaved one the 4 pairs inside elements c..c+7.
  constexpr bool kVectors = Config::kInterleaved || kHalf % 8 == 0;
  constexpr int kStepsPerHead = Config::kInterleaved ? D / 8 : kHalf / 8;
  if constexpr (kVectors) {
    for (int w = threadIdx.x; w < kGroup * kStepsPerHead; w += Config::kThreads) {
      const int head = head0 + w / kStepsPerHead, c = w % kStepsPerHead * 8;
      if (head >= H + Hkv) break;  // the v heads are copied below
      if (head >= H && k_slot == nullptr) break;
      const X* src = head < H ? q + head * D : k + (head - H) * D;
      float x[8], y[8];  // half style: x the low elements, y their partners
      load8(src + c, x);
      if (!Config::kInterleaved) load8(src + kHalf + c, y);
      if constexpr (kQkNorm) {  // x / rms · w, the elements' own weights
        const float* w = head < H ? p.q_norm : p.k_norm;
        const float inv = norm_of[head - head0];
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          x[e] *= inv * w[c + e];
          if (!Config::kInterleaved) y[e] *= inv * w[kHalf + c + e];
        }
      }
#pragma unroll
      for (int e = 0; e < (Config::kInterleaved ? 4 : 8); ++e) {
        const int i = Config::kInterleaved ? c / 2 + e : c + e;  // the pair's frequency index
        float& a = Config::kInterleaved ? x[2 * e] : x[e];
        float& b = Config::kInterleaved ? x[2 * e + 1] : y[e];
        const float ra = a * cos_of[i] - b * sin_of[i], rb = b * cos_of[i] + a * sin_of[i];
        a = ra;
        b = rb;
      }
      if (head < H) {
        store8(q_out + head * D + c, x);
        if (!Config::kInterleaved) store8(q_out + head * D + kHalf + c, y);
      } else {
        store8(k_slot + (head - H) * D + c, x);
        if (!Config::kInterleaved) store8(k_slot + (head - H) * D + kHalf + c, y);
      }
    }
  } else {
    for (int w = threadIdx.x; w < kGroup * kHalf; w += Config::kThreads) {
      const int j = head0 * kHalf + w;  // pair j of the merged row
      if (j >= (H + Hkv) * kHalf) break;  // the v heads are copied below
      int lo, hi;
      const int i = rope_pair_columns<Config>(j, lo, hi);
      const int head = lo / D;
      const X* src = head < H ? q + head * D : k + (head - H) * D;
      float a = to_float(src[lo - head * D]), b = to_float(src[hi - head * D]);
      if constexpr (kQkNorm) {
        const float* w = head < H ? p.q_norm : p.k_norm;
        const float inv = norm_of[head - head0];
        a *= inv * w[lo - head * D];
        b *= inv * w[hi - head * D];
      }
      store_rope_pair<Config>(q_out, k_slot, static_cast<KvOut*>(nullptr), lo, hi, a, b, sin_of[i], cos_of[i]);
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
      store8(v_slot + (head - H - Hkv) * D + vec * 8, x);
    }
  }
  // Scaled pools: a warp per k or v head of this group quantizes its staged
  // row into the pool and writes the row's scale.
  if constexpr (kScaled) {
    if (!write_kv) return;
    __syncthreads();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int first = head0 > H ? head0 : H, last = head0 + kGroup < H + 2 * Hkv ? head0 + kGroup : H + 2 * Hkv;
    for (int head = first + warp; head < last; head += Config::kThreads / 32) {
      const bool is_k = head < H + Hkv;
      const int kvh = is_k ? head - H : head - H - Hkv;
      Kv* codes = static_cast<Kv*>(is_k ? p.k_pool : p.v_pool) + kv_base + kvh * D;
      float* scales = is_k ? p.k_scales : p.v_scales;
      kv_quantize_row_warp<Kv, D>(kv_stage + (is_k ? 0 : Hkv * D) + kvh * D, codes,
                                  scales + kv_scale_index<Config::kPageSize, Hkv>(slot, kvh), lane);
    }
  }
}

}  // namespace kernels
}  // namespace kiln
