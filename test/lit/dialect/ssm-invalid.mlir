// RUN: kiln-opt %s -split-input-file -verify-diagnostics

// Each case breaks one rule of the state-space ops' verifiers.
func.func @conv_state_rows(%u: tensor<?x8xf32>, %past: tensor<2x8xf32>, %w: tensor<8x1x4xf32>) {
  // expected-error @+1 {{past rows is 2, expected 3}}
  %y, %s = xfmr.causal_conv1d %u, %past, %w {activation = "silu"} : (tensor<?x8xf32>, tensor<2x8xf32>, tensor<8x1x4xf32>) -> (tensor<?x8xf32>, tensor<2x8xf32>)
  return
}

// -----

func.func @conv_weight_channels(%u: tensor<?x8xf32>, %past: tensor<3x8xf32>, %w: tensor<6x1x4xf32>) {
  // expected-error @+1 {{weight channels is 6, expected 8}}
  %y, %s = xfmr.causal_conv1d %u, %past, %w {activation = "silu"} : (tensor<?x8xf32>, tensor<3x8xf32>, tensor<6x1x4xf32>) -> (tensor<?x8xf32>, tensor<3x8xf32>)
  return
}

// -----

func.func @conv_activation(%u: tensor<?x8xf32>, %past: tensor<3x8xf32>, %w: tensor<8x1x4xf32>) {
  // expected-error @+1 {{activation is 'gelu', expected 'silu' or 'none'}}
  %y, %s = xfmr.causal_conv1d %u, %past, %w {activation = "gelu"} : (tensor<?x8xf32>, tensor<3x8xf32>, tensor<8x1x4xf32>) -> (tensor<?x8xf32>, tensor<3x8xf32>)
  return
}

// -----

func.func @scan_state_size(%x: tensor<?x8xf32>, %dt: tensor<?x8xf32>, %a: tensor<8x4xf32>, %b: tensor<?x5xf32>,
                           %c: tensor<?x4xf32>, %d: tensor<8xf32>, %past: tensor<8x4xf32>) {
  // expected-error @+1 {{b state size is 5, expected 4}}
  %y, %s = xfmr.selective_scan %x, %dt, %a, %b, %c, %d, %past : (tensor<?x8xf32>, tensor<?x8xf32>, tensor<8x4xf32>, tensor<?x5xf32>, tensor<?x4xf32>, tensor<8xf32>, tensor<8x4xf32>) -> (tensor<?x8xf32>, tensor<8x4xf32>)
  return
}

// -----

func.func @scan_state_f32(%x: tensor<?x8xbf16>, %dt: tensor<?x8xbf16>, %a: tensor<8x4xf32>, %b: tensor<?x4xbf16>,
                          %c: tensor<?x4xbf16>, %d: tensor<8xf32>, %past: tensor<8x4xbf16>) {
  // expected-error @+1 {{past has element type 'bf16', expected f32}}
  %y, %s = xfmr.selective_scan %x, %dt, %a, %b, %c, %d, %past : (tensor<?x8xbf16>, tensor<?x8xbf16>, tensor<8x4xf32>, tensor<?x4xbf16>, tensor<?x4xbf16>, tensor<8xf32>, tensor<8x4xbf16>) -> (tensor<?x8xbf16>, tensor<8x4xbf16>)
  return
}

// -----

func.func @ssd_groups(%x: tensor<?x8x16xf32>, %dt: tensor<?x8xf32>, %v: tensor<8xf32>, %b: tensor<?x3x4xf32>,
                      %past: tensor<8x16x4xf32>) {
  // expected-error @+1 {{b groups is 3, expected a divisor of the 8 heads}}
  %y, %s = xfmr.ssd_scan %x, %dt, %v, %v, %b, %b, %v, %past {chunk_size = 8 : i64, dt_min = 0.0 : f64, dt_max = 1.0 : f64} : (tensor<?x8x16xf32>, tensor<?x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<?x3x4xf32>, tensor<?x3x4xf32>, tensor<8xf32>, tensor<8x16x4xf32>) -> (tensor<?x8x16xf32>, tensor<8x16x4xf32>)
  return
}

// -----

func.func @ssd_past_heads(%x: tensor<?x8x16xf32>, %dt: tensor<?x8xf32>, %v: tensor<8xf32>, %b: tensor<?x2x4xf32>,
                          %past: tensor<4x16x4xf32>) {
  // expected-error @+1 {{past heads is 4, expected 8}}
  %y, %s = xfmr.ssd_scan %x, %dt, %v, %v, %b, %b, %v, %past {chunk_size = 8 : i64, dt_min = 0.0 : f64, dt_max = 1.0 : f64} : (tensor<?x8x16xf32>, tensor<?x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<?x2x4xf32>, tensor<?x2x4xf32>, tensor<8xf32>, tensor<4x16x4xf32>) -> (tensor<?x8x16xf32>, tensor<4x16x4xf32>)
  return
}

// -----

func.func @ssd_dt_limits(%x: tensor<?x8x16xf32>, %dt: tensor<?x8xf32>, %v: tensor<8xf32>, %b: tensor<?x2x4xf32>,
                         %past: tensor<8x16x4xf32>) {
  // expected-error @+1 {{dt limits are [5.000000e-01, 1.000000e-01], expected 0 <= dt_min < dt_max}}
  %y, %s = xfmr.ssd_scan %x, %dt, %v, %v, %b, %b, %v, %past {chunk_size = 8 : i64, dt_min = 0.5 : f64, dt_max = 0.1 : f64} : (tensor<?x8x16xf32>, tensor<?x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<?x2x4xf32>, tensor<?x2x4xf32>, tensor<8xf32>, tensor<8x16x4xf32>) -> (tensor<?x8x16xf32>, tensor<8x16x4xf32>)
  return
}

// -----

func.func @gated_norm_group(%y: tensor<?x12xf32>, %z: tensor<?x12xf32>, %w: tensor<12xf32>) {
  // expected-error @+1 {{group_size is 5, expected a positive divisor of 12}}
  %n = xfmr.gated_rms_norm %y, %z, %w {epsilon = 1.0e-05 : f64, group_size = 5 : i64} : (tensor<?x12xf32>, tensor<?x12xf32>, tensor<12xf32>) -> tensor<?x12xf32>
  return
}

// -----

// The pooled forms (xfmr-pool-ssm-state): a pool's slot holds exactly one
// sequence's state, shaped as the op's other operands say.
func.func @pooled_conv_slot(%u: tensor<?x8xf32>, %pool: !xfmr.state_pool<[2, 8], f32>, %w: tensor<8x1x4xf32>, %q: tensor<?xi32>, %s: tensor<?xi32>) {
  // expected-error @+1 {{pool '!xfmr.state_pool<[2, 8], f32>' has the wrong slot shape, expected [3, 8]}}
  %y = xfmr.pooled_causal_conv1d %u, %pool, %w, %q, %s {activation = "silu"} : (tensor<?x8xf32>, !xfmr.state_pool<[2, 8], f32>, tensor<8x1x4xf32>, tensor<?xi32>, tensor<?xi32>) -> tensor<?x8xf32>
  return
}

// -----

func.func @pooled_scan_state_type(%x: tensor<?x8xf32>, %dt: tensor<?x8xf32>, %a: tensor<8x4xf32>, %b: tensor<?x4xf32>, %c: tensor<?x4xf32>, %d: tensor<8xf32>, %pool: !xfmr.state_pool<[8, 4], bf16>, %q: tensor<?xi32>, %s: tensor<?xi32>) {
  // expected-error @+1 {{holds 'bf16', expected f32 (the carried state stays in f32)}}
  %y = xfmr.pooled_selective_scan %x, %dt, %a, %b, %c, %d, %pool, %q, %s : (tensor<?x8xf32>, tensor<?x8xf32>, tensor<8x4xf32>, tensor<?x4xf32>, tensor<?x4xf32>, tensor<8xf32>, !xfmr.state_pool<[8, 4], bf16>, tensor<?xi32>, tensor<?xi32>) -> tensor<?x8xf32>
  return
}

// -----

func.func @pooled_ssd_slot(%x: tensor<?x4x8xf32>, %dt: tensor<?x4xf32>, %h: tensor<4xf32>, %b: tensor<?x1x16xf32>, %pool: !xfmr.state_pool<[4, 8, 8], f32>, %q: tensor<?xi32>, %s: tensor<?xi32>) {
  // expected-error @+1 {{has the wrong slot shape, expected [4, 8, 16]}}
  %y = xfmr.pooled_ssd_scan %x, %dt, %h, %h, %b, %b, %h, %pool, %q, %s {chunk_size = 8 : i64, dt_max = 0x7FF0000000000000 : f64, dt_min = 0.000000e+00 : f64} : (tensor<?x4x8xf32>, tensor<?x4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<?x1x16xf32>, tensor<?x1x16xf32>, tensor<4xf32>, !xfmr.state_pool<[4, 8, 8], f32>, tensor<?xi32>, tensor<?xi32>) -> tensor<?x4x8xf32>
  return
}

// -----

// expected-error @+1 {{state_pool slot extents must be static and positive, got 0}}
func.func @pool_extent(%pool: !xfmr.state_pool<[0, 8], f32>) {
  return
}
