// On-GPU token sampling, one block per row of logits: greedy, or temperature
// with top-k and top-p, drawn with Philox so a request's draws depend only on
// its (seed, counter), never on the batch.
//
//   logits [rows, vocab] (Config::Logit); per row: temperature, top_k, top_p, seed, counter
//   out_tokens [rows] i32, out_uniform [rows] f32 (optional)
//
// Without sorting: weights w_i = exp((x_i - max) / T); the top-k and top-p
// thresholds are found by a 32-step bitwise search over the order-preserving
// integer image of the logits (each step one block-wide count or sum over the
// row), which keeps every logit tied with the threshold. The token is then
// picked in index order: thread t owns the contiguous range t·per.., a block
// scan of the kept weight per range finds the range holding u · total, and
// that thread walks it. Greedy (T <= 0) is argmax with the lowest id on ties.
// Grid [rows], block [Config::kThreads].
#pragma once

#include "common.cuh"
#include "philox.cuh"

namespace kiln {
namespace kernels {

// Order-preserving map of a float to an unsigned int (larger float, larger key).
__device__ __forceinline__ unsigned int order_key(float f) {
  const unsigned int u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Inclusive prefix sum over the block; `scratch` holds kThreads / 32 floats.
template <int kThreads>
__device__ __forceinline__ float block_inclusive_scan(float x, float* scratch) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const float y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  if (lane == 31) scratch[warp] = x;
  __syncthreads();
  float offset = 0.0f;
  for (int w = 0; w < warp; ++w) offset += scratch[w];
  __syncthreads();
  return x + offset;
}

// Config: using Logit; static constexpr int kVocab, kThreads.
template <class Config>
__device__ __forceinline__ void sample(const SampleParams& p) {
  constexpr int V = Config::kVocab, kThreads = Config::kThreads;
  constexpr int kPer = (V + kThreads - 1) / kThreads;
  using Logit = typename Config::Logit;
  __shared__ float inclusive_s[kThreads];
  __shared__ float scratch_s[kThreads / 32];
  __shared__ int chosen_s;
  __shared__ float best_val_s[kThreads / 32];
  __shared__ int best_idx_s[kThreads / 32];

  const int row = blockIdx.x;
  if (row >= p.rows) return;
  const Logit* x = static_cast<const Logit*>(p.logits) + (long long)row * V;
  const float temperature = p.temperature[row];

  if (!(temperature > 0.0f)) {  // greedy
    float best = neg_inf();
    int best_i = V;
    for (int i = threadIdx.x; i < V; i += kThreads) {
      const float v = to_float(x[i]);
      if (v > best || (v == best && i < best_i) || best_i == V) { best = v; best_i = i; }
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, best, o);
      const int oi = __shfl_xor_sync(0xffffffffu, best_i, o);
      if (ov > best || (ov == best && oi < best_i)) { best = ov; best_i = oi; }
    }
    if (threadIdx.x % 32 == 0) { best_val_s[threadIdx.x / 32] = best; best_idx_s[threadIdx.x / 32] = best_i; }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < kThreads / 32; ++w)
        if (best_val_s[w] > best || (best_val_s[w] == best && best_idx_s[w] < best_i)) {
          best = best_val_s[w];
          best_i = best_idx_s[w];
        }
      p.out_tokens[row] = best_i < V ? best_i : 0;
      if (p.out_uniform) p.out_uniform[row] = 0.0f;
    }
    return;
  }

  float local_max = neg_inf();
  for (int i = threadIdx.x; i < V; i += kThreads) local_max = fmaxf(local_max, to_float(x[i]));
  const float x_max = block_max<kThreads>(local_max);
  const float inv_t = 1.0f / temperature;
#define KILN_SAMPLE_WEIGHT(i) expf((to_float(x[i]) - x_max) * inv_t)

  // top-k: the largest key with at least k logits at or above it.
  unsigned int threshold = 0;
  const int top_k = p.top_k[row];
  if (top_k > 0 && top_k < V) {
    unsigned int t = 0;
    for (int bit = 31; bit >= 0; --bit) {
      const unsigned int cand = t | (1u << bit);
      float count = 0.0f;
      for (int i = threadIdx.x; i < V; i += kThreads) count += order_key(to_float(x[i])) >= cand ? 1.0f : 0.0f;
      if (block_sum<kThreads>(count) >= (float)top_k) t = cand;
    }
    threshold = t;
  }
  // top-p: the largest key whose kept weight (also above the top-k cut) still
  // reaches top_p of the top-k set's weight.
  const float top_p = p.top_p[row];
  if (top_p < 1.0f) {
    float mass = 0.0f;
    for (int i = threadIdx.x; i < V; i += kThreads)
      if (order_key(to_float(x[i])) >= threshold) mass += KILN_SAMPLE_WEIGHT(i);
    const float target = top_p * block_sum<kThreads>(mass);
    unsigned int t = 0;
    for (int bit = 31; bit >= 0; --bit) {
      const unsigned int cand = t | (1u << bit);
      const unsigned int cut = cand > threshold ? cand : threshold;
      float kept = 0.0f;
      for (int i = threadIdx.x; i < V; i += kThreads)
        if (order_key(to_float(x[i])) >= cut) kept += KILN_SAMPLE_WEIGHT(i);
      if (block_sum<kThreads>(kept) >= target) t = cand;
    }
    if (t > threshold) threshold = t;
  }

  // Pick in index order.
  const int lo = threadIdx.x * kPer, hi = min(V, lo + kPer);
  float local = 0.0f;
  for (int i = lo; i < hi; ++i)
    if (order_key(to_float(x[i])) >= threshold) local += KILN_SAMPLE_WEIGHT(i);
  const float inclusive = block_inclusive_scan<kThreads>(local, scratch_s);
  inclusive_s[threadIdx.x] = inclusive;
  if (threadIdx.x == 0) chosen_s = -1;
  __syncthreads();
  const float total = inclusive_s[kThreads - 1];
  const float u = philox_uniform(p.seed[row], p.counter[row], 0);
  const float target = u * total;
  const float exclusive = threadIdx.x == 0 ? 0.0f : inclusive_s[threadIdx.x - 1];
  if (local > 0.0f && exclusive <= target && target < inclusive) {
    float running = exclusive;
    int pick = -1;
    for (int i = lo; i < hi; ++i) {
      if (order_key(to_float(x[i])) < threshold) continue;
      pick = i;
      running += KILN_SAMPLE_WEIGHT(i);
      if (running > target) break;
    }
    chosen_s = pick;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int pick = chosen_s;
    if (pick < 0) {  // target fell on the rounding edge: the last kept token
      for (int i = V - 1; i >= 0; --i)
        if (order_key(to_float(x[i])) >= threshold) { pick = i; break; }
    }
    p.out_tokens[row] = pick < 0 ? 0 : pick;
    if (p.out_uniform) p.out_uniform[row] = u;
  }
#undef KILN_SAMPLE_WEIGHT
}

}  // namespace kernels
}  // namespace kiln
