// State-space (Mamba) layers on the CPU, one sequence at a time: the causal
// depthwise conv, Mamba's selective scan, Mamba-2's state-space dual scan
// (chunked for prefill, the recurrence for decode) and its gated RMSNorm.
//
// Every function reads and updates the sequence's carried state in place
// (its slot of the state pool), so a prompt prefilled in one call or in
// many, or decoded token by token, ends in the same state. Rows of the
// token-major inputs are `stride` floats apart (they are column slices of a
// projection's output). The state is f32.
#pragma once

#include <cstdint>

namespace kiln::cpu {

// out[t, c] = act(bias[c] + Σ_k weight[c, k] · u[t + k, c]), u = concat(state,
// input) with state [width-1, channels] the previous inputs (zeros before the
// first token); afterwards state holds u's last width - 1 rows. input [rows,
// channels] (row stride in_stride), weight [channels, width], bias [channels]
// or null, out [rows, channels] (row stride out_stride; may not alias input).
void causalConv1d(const float* input, int64_t rows, int64_t channels, int64_t in_stride, const float* weight,
                  int64_t width, const float* bias, bool silu, float* state, float* out, int64_t out_stride);

struct SelectiveScanArgs {
  const float* x = nullptr;   // [rows, channels], stride x_stride
  const float* dt = nullptr;  // [rows, channels] before softplus, stride dt_stride
  const float* b = nullptr;   // [rows, state], stride bc_stride
  const float* c = nullptr;   // [rows, state], stride bc_stride
  const float* a_log = nullptr;  // [channels, state]; A = -exp(a_log)
  const float* d = nullptr;      // [channels]
  int64_t rows = 0, channels = 0, state_size = 0;
  int64_t x_stride = 0, dt_stride = 0, bc_stride = 0;
};

// Mamba: s = exp(δ A) ⊙ s + (δ x) ⊗ b, y = s · c + d x per token, δ =
// softplus(dt); state [channels, state_size]; y [rows, channels] contiguous.
// Channels are independent, so the token loop runs inside each channel.
void selectiveScan(const SelectiveScanArgs& args, float* state, float* y);

struct SsdScanArgs {
  const float* x = nullptr;   // [rows, heads, head_dim], stride x_stride per row
  const float* dt = nullptr;  // [rows, heads] raw, stride dt_stride
  const float* b = nullptr;   // [rows, groups, state], stride bc_stride
  const float* c = nullptr;   // [rows, groups, state], stride bc_stride
  const float* dt_bias = nullptr;  // [heads]
  const float* a_log = nullptr;    // [heads]; A = -exp(a_log)
  const float* d = nullptr;        // [heads]
  int64_t rows = 0, heads = 0, head_dim = 0, groups = 0, state_size = 0;
  int64_t x_stride = 0, dt_stride = 0, bc_stride = 0;
  int64_t chunk_size = 256;
  float dt_min = 0.0f, dt_max = 0.0f;  // δ = clamp(softplus(dt + dt_bias), dt_min, dt_max)
};

// Mamba-2 over one sequence's rows: state [heads, head_dim, state_size],
// y [rows, heads, head_dim] contiguous. rows == 1 is the decode step (the
// recurrence); longer runs go chunk by chunk: inside a chunk of L tokens the
// dual (attention-like) form y_t = Σ_{s≤t} exp(Λ_t − Λ_s) δ_s (c_t·b_s) x_s +
// exp(Λ_t) s_in · c_t + d x_t with Λ the running sum of δ A, then the state
// moves to the chunk's end: s_out = exp(Λ_L) s_in + Σ_s exp(Λ_L − Λ_s) δ_s x_s ⊗ b_s.
// `scratch` holds ssdScratchFloats(args) floats.
int64_t ssdScratchFloats(const SsdScanArgs& args);
void ssdScan(const SsdScanArgs& args, float* state, float* y, float* scratch);
// The recurrence alone, for any row count (the decode path, and the
// reference the chunked form is checked against).
void ssdRecurrent(const SsdScanArgs& args, float* state, float* y);

// out = weight · u / sqrt(mean_group(u²) + eps), u = x · silu(gate), each
// `group_size` run of a row normalized alone. x, gate, out [rows, features]
// with row strides x_stride, gate_stride and features.
void gatedRmsNorm(const float* x, int64_t x_stride, const float* gate, int64_t gate_stride, const float* weight,
                  int64_t rows, int64_t features, int64_t group_size, float eps, float* out);

}  // namespace kiln::cpu
