// Parameter structs of the state-space kernels (ssm.cuh). Plain C++: the
// host fills them, NVRTC-compiled kernels read them. A ragged batch of
// `batch` sequences: sequence b owns rows query_start[b] .. query_start[b+1]
// and its state lives in slot slots[b] of the layer's state pools.
#pragma once

namespace kiln {
namespace kernels {

// ssm_conv1d: the causal depthwise conv over each sequence's rows, after
// its carried inputs.
struct SsmConvParams {
  const void* x;           // [rows, channels] X, row stride x_stride
  const void* w;           // [channels, width] W
  const void* bias;        // [channels] W, or null
  void* out;               // [rows, channels] Out
  void* state;             // [slots, width - 1, channels] X: the carried inputs
  const int* query_start;  // [batch + 1]
  const int* slots;        // [batch]
  int x_stride;
  int batch;
};

// ssd_scan: Mamba-2's scan over each sequence's rows (chunked; one row is
// the decode step).
struct SsdScanParams {
  const void* x;        // [rows, heads · head_dim] X, row stride x_stride
  const void* b;        // [rows, groups · state] X, row stride bc_stride
  const void* c;        // [rows, groups · state] X, row stride bc_stride
  const void* dt;       // [rows, heads] X (raw), row stride dt_stride
  const void* dt_bias;  // [heads] P
  const void* a_log;    // [heads] P
  const void* d;        // [heads] P
  void* y;              // [rows, heads · head_dim] Out
  float* state;         // [slots, heads, head_dim, state] f32
  const int* query_start;
  const int* slots;
  int x_stride, bc_stride, dt_stride;
  int batch;
  float dt_min, dt_max;
};

// selective_scan: Mamba's per-channel scan over each sequence's rows.
struct SelectiveScanParams {
  const void* x;      // [rows, channels] X, row stride x_stride
  const void* dt;     // [rows, channels] X (dt_proj's output, before softplus), row stride dt_stride
  const void* b;      // [rows, state] X, row stride bc_stride
  const void* c;      // [rows, state] X, row stride bc_stride
  const void* a_log;  // [channels, state] P
  const void* d;      // [channels] P
  void* y;            // [rows, channels] Out
  float* state;       // [slots, channels, state] f32
  const int* query_start;
  const int* slots;
  int x_stride, dt_stride, bc_stride;
  int batch;
};

// ssm_gated_norm: out = w · u / rms(u) per group, u = x · silu(gate).
struct SsmGatedNormParams {
  const void* x;     // [rows, features] X
  const void* gate;  // [rows, features] X, row stride gate_stride
  const void* w;     // [features] W
  void* out;         // [rows, features] Out
  int gate_stride;
  int rows;
  float eps;
};

}  // namespace kernels
}  // namespace kiln
