// RUN: kiln-opt %s -split-input-file --xfmr-pool-ssm-state -verify-diagnostics | FileCheck %s
// RUN: kiln-opt %s -split-input-file --xfmr-pool-ssm-state --xfmr-pool-ssm-state -verify-diagnostics | FileCheck %s
// RUN: kiln-compile %kiln_src/test/fixtures/tiny-mamba --emit=xfmr | kiln-opt --xfmr-pool-ssm-state | kiln-opt | FileCheck %s --check-prefix=MAMBA
// RUN: kiln-compile %kiln_src/test/fixtures/tiny-hybrid --emit=xfmr | kiln-opt --xfmr-fuse-attention --xfmr-page-kv-cache --xfmr-pool-ssm-state | FileCheck %s --check-prefix=HYBRID

// A Mamba-2 layer (4 heads of 8, 1 group, state 8, conv width 4). Before:
//   %y, %present = xfmr.causal_conv1d %u, %past_conv, %w
//   %o, %state   = xfmr.ssd_scan ..., %past_ssm
//   return %logits, %present, %state
// After: the carried state lives in two pools of one slot per sequence, the
// conv and the scan take the ragged batch (query_start) and each sequence's
// slot (state_slots), and @forward returns the last tokens' logits alone.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: %arg0: tensor<?xi32> {xfmr.name = "tokens"}, %arg1: tensor<?xi32> {xfmr.name = "positions"}
// CHECK-SAME: %[[QS:.*]]: tensor<?xi32> {xfmr.name = "query_start"}, %[[SLOTS:.*]]: tensor<?xi32> {xfmr.name = "state_slots"}
// CHECK-SAME: %[[CONV:.*]]: !xfmr.state_pool<[3, 48], f32> {xfmr.name = "conv_pool.0"}
// CHECK-SAME: %[[SSM:.*]]: !xfmr.state_pool<[4, 8, 8], f32> {xfmr.name = "ssm_pool.0"}) -> tensor<?x16xf32>
// CHECK: xfmr.pooled_causal_conv1d %{{.*}}, %[[CONV]], %{{.*}}, %[[QS]], %[[SLOTS]] {activation = "silu"}
// CHECK-NOT: xfmr.causal_conv1d
// CHECK: xfmr.pooled_ssd_scan {{.*}}, %[[SSM]], %[[QS]], %[[SLOTS]] {chunk_size = 8 : i64, dt_max = 0x7FF0000000000000 : f64, dt_min = 0.000000e+00 : f64}
// CHECK-NOT: xfmr.ssd_scan
// CHECK: xfmr.gated_rms_norm
// CHECK: xfmr.gather_last_tokens %{{.*}}, %[[QS]]
// CHECK-NEXT: xfmr.rms_norm
// CHECK: xfmr.logits
// CHECK-NEXT: return %{{.*}} : tensor<?x16xf32>
module {
  func.func @forward(%tokens: tensor<?xi32> {xfmr.name = "tokens"}, %positions: tensor<?xi32> {xfmr.name = "positions"}, %pc: tensor<3x48xf32> {xfmr.name = "past_conv.0"}, %ps: tensor<4x8x8xf32> {xfmr.name = "past_ssm.0"}) -> (tensor<?x16xf32>, tensor<3x48xf32>, tensor<4x8x8xf32>) {
    %emb = xfmr.weight "emb" : tensor<16x32xf32>
    %x = xfmr.embed %tokens, %emb : (tensor<?xi32>, tensor<16x32xf32>) -> tensor<?x32xf32>
    %nw0 = xfmr.weight "norm0" : tensor<32xf32>
    %h0 = xfmr.rms_norm %x, %nw0 {epsilon = 1.000000e-05 : f64} : (tensor<?x32xf32>, tensor<32xf32>) -> tensor<?x32xf32>
    %win = xfmr.weight "in_proj" : tensor<84x32xf32>
    %p = xfmr.linear %h0, %win : (tensor<?x32xf32>, tensor<84x32xf32>) -> tensor<?x84xf32>
    %s:3 = xfmr.split %p {axis = 1 : i64, sizes = array<i64: 32, 48, 4>} : tensor<?x84xf32> -> tensor<?x32xf32>, tensor<?x48xf32>, tensor<?x4xf32>
    %cw = xfmr.weight "conv.weight" : tensor<48x1x4xf32>
    %y, %present = xfmr.causal_conv1d %s#1, %pc, %cw {activation = "silu"} : (tensor<?x48xf32>, tensor<3x48xf32>, tensor<48x1x4xf32>) -> (tensor<?x48xf32>, tensor<3x48xf32>)
    %t:3 = xfmr.split %y {axis = 1 : i64, sizes = array<i64: 32, 8, 8>} : tensor<?x48xf32> -> tensor<?x32xf32>, tensor<?x8xf32>, tensor<?x8xf32>
    %xs = xfmr.reshape %t#0 : tensor<?x32xf32> -> tensor<?x4x8xf32>
    %b = xfmr.reshape %t#1 : tensor<?x8xf32> -> tensor<?x1x8xf32>
    %c = xfmr.reshape %t#2 : tensor<?x8xf32> -> tensor<?x1x8xf32>
    %dtb = xfmr.weight "dt_bias" : tensor<4xf32>
    %alog = xfmr.weight "A_log" : tensor<4xf32>
    %d = xfmr.weight "D" : tensor<4xf32>
    %o, %state = xfmr.ssd_scan %xs, %s#2, %dtb, %alog, %b, %c, %d, %ps {chunk_size = 8 : i64, dt_max = 0x7FF0000000000000 : f64, dt_min = 0.000000e+00 : f64} : (tensor<?x4x8xf32>, tensor<?x4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<?x1x8xf32>, tensor<?x1x8xf32>, tensor<4xf32>, tensor<4x8x8xf32>) -> (tensor<?x4x8xf32>, tensor<4x8x8xf32>)
    %om = xfmr.reshape %o : tensor<?x4x8xf32> -> tensor<?x32xf32>
    %gw = xfmr.weight "gate_norm" : tensor<32xf32>
    %g = xfmr.gated_rms_norm %om, %s#0, %gw {epsilon = 1.000000e-05 : f64, group_size = 32 : i64} : (tensor<?x32xf32>, tensor<?x32xf32>, tensor<32xf32>) -> tensor<?x32xf32>
    %wo = xfmr.weight "out_proj" : tensor<32x32xf32>
    %h = xfmr.linear %g, %wo : (tensor<?x32xf32>, tensor<32x32xf32>) -> tensor<?x32xf32>
    %r = xfmr.add %x, %h : tensor<?x32xf32>
    %fw = xfmr.weight "norm_f" : tensor<32xf32>
    %n = xfmr.rms_norm %r, %fw {epsilon = 1.000000e-05 : f64} : (tensor<?x32xf32>, tensor<32xf32>) -> tensor<?x32xf32>
    %head = xfmr.weight "lm_head" : tensor<16x32xf32>
    %l = xfmr.logits %n, %head : (tensor<?x32xf32>, tensor<16x32xf32>) -> tensor<?x16xf32>
    return %l, %present, %state : tensor<?x16xf32>, tensor<3x48xf32>, tensor<4x8x8xf32>
  }
}

// -----

// The carried state must be a @forward argument: a computed one has no
// slot to live in.
func.func @forward(%tokens: tensor<?xi32>, %u: tensor<?x48xf32>, %w: tensor<48x1x4xf32>, %p: tensor<3x48xf32>) -> tensor<?x48xf32> {
  %past = xfmr.add %p, %p : tensor<3x48xf32>
  // expected-error @+1 {{xfmr-pool-ssm-state expects the carried state of 'xfmr.causal_conv1d' to be a @forward argument}}
  %y, %s = xfmr.causal_conv1d %u, %past, %w {activation = "silu"} : (tensor<?x48xf32>, tensor<3x48xf32>, tensor<48x1x4xf32>) -> (tensor<?x48xf32>, tensor<3x48xf32>)
  return %y : tensor<?x48xf32>
}

// Mamba (tiny-mamba: I 128, N 8, K 4): two layers, numbered 0 and 1.
// MAMBA-LABEL: func.func @forward
// MAMBA-SAME: {xfmr.name = "query_start"}, %[[SLOTS:.*]]: tensor<?xi32> {xfmr.name = "state_slots"}
// MAMBA-SAME: !xfmr.state_pool<[3, 128], f32> {xfmr.name = "conv_pool.0"}, %{{.*}}: !xfmr.state_pool<[128, 8], f32> {xfmr.name = "ssm_pool.0"}
// MAMBA-SAME: {xfmr.name = "conv_pool.1"}, %{{.*}}: !xfmr.state_pool<[128, 8], f32> {xfmr.name = "ssm_pool.1"}) -> tensor<?x128xf32>
// MAMBA: xfmr.pooled_causal_conv1d
// MAMBA: xfmr.pooled_selective_scan {{.*}}, %[[SLOTS]] :
// MAMBA-NOT: xfmr.selective_scan

// Nemotron-H "M*M-": the attention layer is paged first and its
// query_start is the one the state-space layers take; the KV pools keep
// their numbering, the state pools count the Mamba layers (0, 1).
// HYBRID-LABEL: func.func @forward
// HYBRID-SAME: {xfmr.name = "slot_mapping"}, %{{.*}}: tensor<?x?xi32> {xfmr.name = "block_tables"}, %[[QS:.*]]: tensor<?xi32> {xfmr.name = "query_start"}, %[[SLOTS:.*]]: tensor<?xi32> {xfmr.name = "state_slots"}, %{{.*}}: tensor<?xi32> {xfmr.name = "kv_lens"}
// HYBRID-SAME: {xfmr.name = "conv_pool.0"}
// HYBRID-SAME: {xfmr.name = "k_pool.0"}
// HYBRID-SAME: {xfmr.name = "ssm_pool.1"}) -> tensor<?x128xf32>
// HYBRID: xfmr.pooled_ssd_scan {{.*}}, %[[QS]], %[[SLOTS]]
// HYBRID: xfmr.paged_attention
// HYBRID: xfmr.pooled_ssd_scan {{.*}}, %[[QS]], %[[SLOTS]]
