// RUN: kiln-opt %s | kiln-opt | FileCheck %s
// RUN: kiln-opt %s --mlir-print-op-generic | kiln-opt | FileCheck %s

// The state-space ops, parsed, printed, and parsed again (custom and generic form).

// CHECK-LABEL: func.func @mamba_mixer
func.func @mamba_mixer(%u: tensor<?x128xf32>, %past_conv: tensor<3x128xf32>, %past_ssm: tensor<128x16xf32>,
                       %dt: tensor<?x128xf32>, %b: tensor<?x16xf32>, %c: tensor<?x16xf32>)
    -> (tensor<?x128xf32>, tensor<3x128xf32>, tensor<128x16xf32>) {
  %w = xfmr.weight "backbone.layers.0.mixer.conv1d.weight" : tensor<128x1x4xf32>
  %bias = xfmr.weight "backbone.layers.0.mixer.conv1d.bias" : tensor<128xf32>
  %alog = xfmr.weight "backbone.layers.0.mixer.A_log" : tensor<128x16xf32>
  %d = xfmr.weight "backbone.layers.0.mixer.D" : tensor<128xf32>
  // CHECK: %[[Y:.*]], %[[S:.*]] = xfmr.causal_conv1d %{{.*}}, %{{.*}}, %{{.*}} bias %{{.*}} {activation = "silu"} : (tensor<?x128xf32>, tensor<3x128xf32>, tensor<128x1x4xf32>, tensor<128xf32>) -> (tensor<?x128xf32>, tensor<3x128xf32>)
  %y, %conv = xfmr.causal_conv1d %u, %past_conv, %w bias %bias {activation = "silu"} : (tensor<?x128xf32>, tensor<3x128xf32>, tensor<128x1x4xf32>, tensor<128xf32>) -> (tensor<?x128xf32>, tensor<3x128xf32>)
  // CHECK: xfmr.causal_conv1d %{{.*}}, %{{.*}}, %{{.*}} {activation = "none"} : (tensor<?x128xf32>, tensor<3x128xf32>, tensor<128x1x4xf32>)
  %y2, %conv2 = xfmr.causal_conv1d %u, %past_conv, %w {activation = "none"} : (tensor<?x128xf32>, tensor<3x128xf32>, tensor<128x1x4xf32>) -> (tensor<?x128xf32>, tensor<3x128xf32>)
  // CHECK: xfmr.selective_scan %[[Y]], %{{.*}} -> (tensor<?x128xf32>, tensor<128x16xf32>)
  %o, %s = xfmr.selective_scan %y, %dt, %alog, %b, %c, %d, %past_ssm : (tensor<?x128xf32>, tensor<?x128xf32>, tensor<128x16xf32>, tensor<?x16xf32>, tensor<?x16xf32>, tensor<128xf32>, tensor<128x16xf32>) -> (tensor<?x128xf32>, tensor<128x16xf32>)
  return %o, %conv, %s : tensor<?x128xf32>, tensor<3x128xf32>, tensor<128x16xf32>
}

// CHECK-LABEL: func.func @mamba2_mixer
func.func @mamba2_mixer(%x: tensor<?x8x16xbf16>, %dt: tensor<?x8xbf16>, %b: tensor<?x2x16xbf16>,
                        %c: tensor<?x2x16xbf16>, %past: tensor<8x16x16xf32>, %y2: tensor<?x128xbf16>,
                        %z: tensor<?x128xbf16>) -> (tensor<?x8x16xbf16>, tensor<8x16x16xf32>, tensor<?x128xbf16>) {
  %dtb = xfmr.weight "dt_bias" : tensor<8xf32>
  %alog = xfmr.weight "A_log" : tensor<8xf32>
  %d = xfmr.weight "D" : tensor<8xf32>
  %nw = xfmr.weight "norm.weight" : tensor<128xbf16>
  // CHECK: xfmr.ssd_scan %{{.*}} {chunk_size = 256 : i64, dt_max = 0x7FF0000000000000 : f64, dt_min = 0.000000e+00 : f64}
  %y, %s = xfmr.ssd_scan %x, %dt, %dtb, %alog, %b, %c, %d, %past {chunk_size = 256 : i64, dt_min = 0.0 : f64, dt_max = 0x7FF0000000000000 : f64} : (tensor<?x8x16xbf16>, tensor<?x8xbf16>, tensor<8xf32>, tensor<8xf32>, tensor<?x2x16xbf16>, tensor<?x2x16xbf16>, tensor<8xf32>, tensor<8x16x16xf32>) -> (tensor<?x8x16xbf16>, tensor<8x16x16xf32>)
  // CHECK: xfmr.gated_rms_norm %{{.*}} {epsilon = 1.000000e-05 : f64, group_size = 64 : i64}
  %n = xfmr.gated_rms_norm %y2, %z, %nw {epsilon = 1.0e-05 : f64, group_size = 64 : i64} : (tensor<?x128xbf16>, tensor<?x128xbf16>, tensor<128xbf16>) -> tensor<?x128xbf16>
  return %y, %s, %n : tensor<?x8x16xbf16>, tensor<8x16x16xf32>, tensor<?x128xbf16>
}

// CHECK-LABEL: func.func @hybrid_mlp
func.func @hybrid_mlp(%u: tensor<?x96xf32>) -> tensor<?x96xf32> {
  // CHECK: xfmr.relu_squared %{{.*}} : tensor<?x96xf32>
  %a = xfmr.relu_squared %u : tensor<?x96xf32>
  return %a : tensor<?x96xf32>
}

// The pooled forms over a ragged batch: each sequence's state in its slot.
// CHECK-LABEL: func.func @pooled_mamba2
// CHECK-SAME: !xfmr.state_pool<[3, 48], bf16>
// CHECK: xfmr.pooled_causal_conv1d %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} bias %{{.*}} {activation = "silu"}
// CHECK: xfmr.pooled_ssd_scan {{.*}} {chunk_size = 8 : i64, dt_max = 0x7FF0000000000000 : f64, dt_min = 0.000000e+00 : f64}
func.func @pooled_mamba2(%u: tensor<?x48xbf16>, %conv: !xfmr.state_pool<[3, 48], bf16>, %ssm: !xfmr.state_pool<[4, 8, 8], f32>,
                         %q: tensor<?xi32>, %slots: tensor<?xi32>, %x: tensor<?x4x8xbf16>, %dt: tensor<?x4xbf16>,
                         %b: tensor<?x1x8xbf16>, %h: tensor<4xf32>) -> tensor<?x4x8xbf16> {
  %w = xfmr.weight "conv1d.weight" : tensor<48x1x4xbf16>
  %bias = xfmr.weight "conv1d.bias" : tensor<48xbf16>
  %y = xfmr.pooled_causal_conv1d %u, %conv, %w, %q, %slots bias %bias {activation = "silu"} : (tensor<?x48xbf16>, !xfmr.state_pool<[3, 48], bf16>, tensor<48x1x4xbf16>, tensor<?xi32>, tensor<?xi32>, tensor<48xbf16>) -> tensor<?x48xbf16>
  %o = xfmr.pooled_ssd_scan %x, %dt, %h, %h, %b, %b, %h, %ssm, %q, %slots {chunk_size = 8 : i64, dt_max = 0x7FF0000000000000 : f64, dt_min = 0.000000e+00 : f64} : (tensor<?x4x8xbf16>, tensor<?x4xbf16>, tensor<4xf32>, tensor<4xf32>, tensor<?x1x8xbf16>, tensor<?x1x8xbf16>, tensor<4xf32>, !xfmr.state_pool<[4, 8, 8], f32>, tensor<?xi32>, tensor<?xi32>) -> tensor<?x4x8xbf16>
  return %o : tensor<?x4x8xbf16>
}
