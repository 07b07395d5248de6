// RUN: kiln-opt %s -split-input-file --xfmr-fuse-attention="merge-projections=false form-regions=false" | FileCheck %s --check-prefix=ATTN
// RUN: kiln-opt %s -split-input-file --xfmr-fuse-attention | kiln-opt -split-input-file | FileCheck %s --check-prefix=ALL

// The unfused GQA attention chain becomes one xfmr.attention over the
// token-major q/k/v; the scores, mask and softmax are gone.
// ATTN-LABEL: func.func @gqa_causal
// ATTN-SAME: (%[[Q:.*]]: tensor<?x4x16xf32>, %[[K:.*]]: tensor<?x2x16xf32>, %[[V:.*]]: tensor<?x2x16xf32>)
// ATTN-NEXT: %[[O:.*]] = xfmr.attention %[[Q]], %[[K]], %[[V]] {causal, scale = 2.500000e-01 : f64}
// ATTN-NEXT: return %[[O]]
// ALL-LABEL: func.func @gqa_causal
// ALL-NEXT: xfmr.attention
// ALL-NEXT: return
func.func @gqa_causal(%q: tensor<?x4x16xf32>, %k: tensor<?x2x16xf32>, %v: tensor<?x2x16xf32>) -> tensor<?x4x16xf32> {
  %qt = xfmr.transpose %q {permutation = array<i64: 1, 0, 2>} : tensor<?x4x16xf32> -> tensor<4x?x16xf32>
  %kt = xfmr.transpose %k {permutation = array<i64: 1, 0, 2>} : tensor<?x2x16xf32> -> tensor<2x?x16xf32>
  %vt = xfmr.transpose %v {permutation = array<i64: 1, 0, 2>} : tensor<?x2x16xf32> -> tensor<2x?x16xf32>
  %k4 = xfmr.repeat_kv %kt {repeats = 2 : i64} : tensor<2x?x16xf32> -> tensor<4x?x16xf32>
  %v4 = xfmr.repeat_kv %vt {repeats = 2 : i64} : tensor<2x?x16xf32> -> tensor<4x?x16xf32>
  %s = xfmr.batch_matmul %qt, %k4 {transpose_rhs} : (tensor<4x?x16xf32>, tensor<4x?x16xf32>) -> tensor<4x?x?xf32>
  %c = xfmr.scale %s {factor = 2.500000e-01 : f64} : tensor<4x?x?xf32>
  %m = xfmr.causal_mask %c : tensor<4x?x?xf32>
  %p = xfmr.softmax %m {axis = 2 : i64} : tensor<4x?x?xf32>
  %o = xfmr.batch_matmul %p, %v4 : (tensor<4x?x?xf32>, tensor<4x?x16xf32>) -> tensor<4x?x16xf32>
  %r = xfmr.transpose %o {permutation = array<i64: 1, 0, 2>} : tensor<4x?x16xf32> -> tensor<?x4x16xf32>
  return %r : tensor<?x4x16xf32>
}

// -----

// Without the scale it is not scaled dot-product attention: left alone.
// ATTN-LABEL: func.func @no_scale
// ATTN-NOT: xfmr.attention
// ATTN: xfmr.softmax
func.func @no_scale(%q: tensor<?x4x16xf32>, %k: tensor<?x2x16xf32>, %v: tensor<?x2x16xf32>) -> tensor<?x4x16xf32> {
  %qt = xfmr.transpose %q {permutation = array<i64: 1, 0, 2>} : tensor<?x4x16xf32> -> tensor<4x?x16xf32>
  %kt = xfmr.transpose %k {permutation = array<i64: 1, 0, 2>} : tensor<?x2x16xf32> -> tensor<2x?x16xf32>
  %vt = xfmr.transpose %v {permutation = array<i64: 1, 0, 2>} : tensor<?x2x16xf32> -> tensor<2x?x16xf32>
  %k4 = xfmr.repeat_kv %kt {repeats = 2 : i64} : tensor<2x?x16xf32> -> tensor<4x?x16xf32>
  %v4 = xfmr.repeat_kv %vt {repeats = 2 : i64} : tensor<2x?x16xf32> -> tensor<4x?x16xf32>
  %s = xfmr.batch_matmul %qt, %k4 {transpose_rhs} : (tensor<4x?x16xf32>, tensor<4x?x16xf32>) -> tensor<4x?x?xf32>
  %m = xfmr.causal_mask %s : tensor<4x?x?xf32>
  %p = xfmr.softmax %m {axis = 2 : i64} : tensor<4x?x?xf32>
  %o = xfmr.batch_matmul %p, %v4 : (tensor<4x?x?xf32>, tensor<4x?x16xf32>) -> tensor<4x?x16xf32>
  %r = xfmr.transpose %o {permutation = array<i64: 1, 0, 2>} : tensor<4x?x16xf32> -> tensor<?x4x16xf32>
  return %r : tensor<?x4x16xf32>
}

// -----

// An additive (non-causal) mask is not the causal pattern: left alone.
// ATTN-LABEL: func.func @additive_mask
// ATTN-NOT: xfmr.attention
// ATTN: xfmr.add
// ATTN: xfmr.softmax
func.func @additive_mask(%q: tensor<?x4x16xf32>, %k: tensor<?x2x16xf32>, %v: tensor<?x2x16xf32>, %mask: tensor<4x?x?xf32>) -> tensor<?x4x16xf32> {
  %qt = xfmr.transpose %q {permutation = array<i64: 1, 0, 2>} : tensor<?x4x16xf32> -> tensor<4x?x16xf32>
  %kt = xfmr.transpose %k {permutation = array<i64: 1, 0, 2>} : tensor<?x2x16xf32> -> tensor<2x?x16xf32>
  %vt = xfmr.transpose %v {permutation = array<i64: 1, 0, 2>} : tensor<?x2x16xf32> -> tensor<2x?x16xf32>
  %k4 = xfmr.repeat_kv %kt {repeats = 2 : i64} : tensor<2x?x16xf32> -> tensor<4x?x16xf32>
  %v4 = xfmr.repeat_kv %vt {repeats = 2 : i64} : tensor<2x?x16xf32> -> tensor<4x?x16xf32>
  %s = xfmr.batch_matmul %qt, %k4 {transpose_rhs} : (tensor<4x?x16xf32>, tensor<4x?x16xf32>) -> tensor<4x?x?xf32>
  %c = xfmr.scale %s {factor = 2.500000e-01 : f64} : tensor<4x?x?xf32>
  %m = xfmr.add %c, %mask : tensor<4x?x?xf32>
  %p = xfmr.softmax %m {axis = 2 : i64} : tensor<4x?x?xf32>
  %o = xfmr.batch_matmul %p, %v4 : (tensor<4x?x?xf32>, tensor<4x?x16xf32>) -> tensor<4x?x16xf32>
  %r = xfmr.transpose %o {permutation = array<i64: 1, 0, 2>} : tensor<4x?x16xf32> -> tensor<?x4x16xf32>
  return %r : tensor<?x4x16xf32>
}

// -----

// Softmax over the query axis is a different computation: left alone.
// ATTN-LABEL: func.func @softmax_axis1
// ATTN-NOT: xfmr.attention
// ATTN: xfmr.softmax {{.*}} {axis = 1 : i64}
func.func @softmax_axis1(%q: tensor<?x4x16xf32>, %k: tensor<?x2x16xf32>, %v: tensor<?x2x16xf32>) -> tensor<?x4x16xf32> {
  %qt = xfmr.transpose %q {permutation = array<i64: 1, 0, 2>} : tensor<?x4x16xf32> -> tensor<4x?x16xf32>
  %kt = xfmr.transpose %k {permutation = array<i64: 1, 0, 2>} : tensor<?x2x16xf32> -> tensor<2x?x16xf32>
  %vt = xfmr.transpose %v {permutation = array<i64: 1, 0, 2>} : tensor<?x2x16xf32> -> tensor<2x?x16xf32>
  %k4 = xfmr.repeat_kv %kt {repeats = 2 : i64} : tensor<2x?x16xf32> -> tensor<4x?x16xf32>
  %v4 = xfmr.repeat_kv %vt {repeats = 2 : i64} : tensor<2x?x16xf32> -> tensor<4x?x16xf32>
  %s = xfmr.batch_matmul %qt, %k4 {transpose_rhs} : (tensor<4x?x16xf32>, tensor<4x?x16xf32>) -> tensor<4x?x?xf32>
  %c = xfmr.scale %s {factor = 2.500000e-01 : f64} : tensor<4x?x?xf32>
  %m = xfmr.causal_mask %c : tensor<4x?x?xf32>
  %p = xfmr.softmax %m {axis = 1 : i64} : tensor<4x?x?xf32>
  %o = xfmr.batch_matmul %p, %v4 : (tensor<4x?x?xf32>, tensor<4x?x16xf32>) -> tensor<4x?x16xf32>
  %r = xfmr.transpose %o {permutation = array<i64: 1, 0, 2>} : tensor<4x?x16xf32> -> tensor<?x4x16xf32>
  return %r : tensor<?x4x16xf32>
}

// -----

// Q/K/V projections of one input merge into one GEMM over row-concatenated
// weights; the result is split back.
// ALL-LABEL: func.func @merge_qkv
// ALL: %[[W:.*]] = xfmr.concat %{{.*}}, %{{.*}}, %{{.*}} {axis = 0 : i64} : (tensor<64x64xf32>, tensor<32x64xf32>, tensor<32x64xf32>) -> tensor<128x64xf32>
// ALL: %[[Y:.*]] = xfmr.linear %arg0, %[[W]] : (tensor<?x64xf32>, tensor<128x64xf32>) -> tensor<?x128xf32>
// ALL: xfmr.split %[[Y]] {axis = 1 : i64, sizes = array<i64: 64, 32, 32>}
// ALL-NOT: xfmr.linear
func.func @merge_qkv(%x: tensor<?x64xf32>) -> (tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>) {
  %wq = xfmr.weight "q" : tensor<64x64xf32>
  %wk = xfmr.weight "k" : tensor<32x64xf32>
  %wv = xfmr.weight "v" : tensor<32x64xf32>
  %q = xfmr.linear %x, %wq : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
  %k = xfmr.linear %x, %wk : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
  %v = xfmr.linear %x, %wv : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
  return %q, %k, %v : tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>
}

// -----

// The merged GEMM goes where the first projection was, so a user of that
// projection placed before the second one still follows it; the second
// weight reference moves up.
// ALL-LABEL: func.func @merge_first_used_before_second
// ALL: %[[WA:.*]] = xfmr.weight "a"
// ALL: %[[WB:.*]] = xfmr.weight "b"
// ALL: %[[W:.*]] = xfmr.concat %[[WA]], %[[WB]]
// ALL: %[[Y:.*]] = xfmr.linear %arg0, %[[W]]
// ALL: %[[P:.*]]:2 = xfmr.split %[[Y]]
// ALL: %[[S:.*]] = xfmr.silu %[[P]]#0
// ALL: return %[[S]], %[[P]]#1
func.func @merge_first_used_before_second(%x: tensor<?x64xf32>) -> (tensor<?x8xf32>, tensor<?x8xf32>) {
  %wa = xfmr.weight "a" : tensor<8x64xf32>
  %a = xfmr.linear %x, %wa : (tensor<?x64xf32>, tensor<8x64xf32>) -> tensor<?x8xf32>
  %s = xfmr.silu %a : tensor<?x8xf32>
  %wb = xfmr.weight "b" : tensor<8x64xf32>
  %b = xfmr.linear %x, %wb : (tensor<?x64xf32>, tensor<8x64xf32>) -> tensor<?x8xf32>
  return %s, %b : tensor<?x8xf32>, tensor<?x8xf32>
}

// -----

// Weights of different element types are not merged.
// ALL-LABEL: func.func @no_merge_mixed_types
// ALL-NOT: xfmr.concat
// ALL-COUNT-2: xfmr.linear
func.func @no_merge_mixed_types(%x: tensor<?x64xf32>) -> (tensor<?x64xf32>, tensor<?x64xf32>) {
  %wa = xfmr.weight "a" : tensor<64x64xf32>
  %wb = xfmr.weight "b" : tensor<64x64x!xfmr.quant<"q8_0", 32>>
  %a = xfmr.linear %x, %wa : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
  %b = xfmr.linear %x, %wb : (tensor<?x64xf32>, tensor<64x64x!xfmr.quant<"q8_0", 32>>) -> tensor<?x64xf32>
  return %a, %b : tensor<?x64xf32>, tensor<?x64xf32>
}

// -----

// Residual add + RMSNorm, and the gate/up GEMM followed by SiLU·mul, become
// fusion regions (the split of the merged gate/up moves inside).
// ALL-LABEL: func.func @mlp_regions
// ALL: xfmr.fusion_region "residual_rms_norm"
// ALL: xfmr.add
// ALL: xfmr.rms_norm
// ALL: xfmr.yield
// ALL: %[[GU:.*]] = xfmr.linear {{.*}} -> tensor<?x256xf32>
// ALL: xfmr.fusion_region "silu_mul"(%[[GU]])
// ALL: xfmr.split
// ALL: xfmr.silu
// ALL: xfmr.mul
func.func @mlp_regions(%x: tensor<?x64xf32>, %r: tensor<?x64xf32>) -> (tensor<?x64xf32>, tensor<?x128xf32>) {
  %nw = xfmr.weight "norm" : tensor<64xf32>
  %wg = xfmr.weight "gate" : tensor<128x64xf32>
  %wu = xfmr.weight "up" : tensor<128x64xf32>
  %s = xfmr.add %x, %r : tensor<?x64xf32>
  %h = xfmr.rms_norm %s, %nw {epsilon = 1.0e-05 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  %g = xfmr.linear %h, %wg : (tensor<?x64xf32>, tensor<128x64xf32>) -> tensor<?x128xf32>
  %u = xfmr.linear %h, %wu : (tensor<?x64xf32>, tensor<128x64xf32>) -> tensor<?x128xf32>
  %a = xfmr.silu %g : tensor<?x128xf32>
  %m = xfmr.mul %a, %u : tensor<?x128xf32>
  return %s, %m : tensor<?x64xf32>, tensor<?x128xf32>
}

// -----

// moe_router(linear(h, Wrouter)) -> one moe_route region (the router GEMM
// and the top-k in one kernel); a router whose logits are used elsewhere
// stays as it is.
// ALL-LABEL: func.func @moe_route
// ALL: %[[R:.*]]:2 = xfmr.fusion_region "moe_route"(%arg0, %{{.*}}) : (tensor<?x64xf32>, tensor<8x64xf32>) -> (tensor<?x2xf32>, tensor<?x2xi32>)
// ALL: xfmr.linear
// ALL: xfmr.moe_router
// ALL: xfmr.yield
// ALL: xfmr.moe_ffn %arg0, %[[R]]#0, %[[R]]#1
// ALL: %[[L:.*]] = xfmr.linear
// ALL-NEXT: xfmr.moe_router %[[L]]
func.func @moe_route(%h: tensor<?x64xf32>, %g: tensor<8x96x64xf32>, %d: tensor<8x64x96xf32>, %h2: tensor<?x64xf32>) -> (tensor<?x64xf32>, tensor<?x8xf32>, tensor<?x2xf32>) {
  %wr = xfmr.weight "router" : tensor<8x64xf32>
  %l = xfmr.linear %h, %wr : (tensor<?x64xf32>, tensor<8x64xf32>) -> tensor<?x8xf32>
  %w, %e = xfmr.moe_router %l {top_k = 2 : i64, normalize = true} : tensor<?x8xf32> -> tensor<?x2xf32>, tensor<?x2xi32>
  %y = xfmr.moe_ffn %h, %w, %e, %g, %g, %d : (tensor<?x64xf32>, tensor<?x2xf32>, tensor<?x2xi32>, tensor<8x96x64xf32>, tensor<8x96x64xf32>, tensor<8x64x96xf32>) -> tensor<?x64xf32>
  %l2 = xfmr.linear %h2, %wr : (tensor<?x64xf32>, tensor<8x64xf32>) -> tensor<?x8xf32>
  %w2, %e2 = xfmr.moe_router %l2 {top_k = 2 : i64, normalize = true} : tensor<?x8xf32> -> tensor<?x2xf32>, tensor<?x2xi32>
  return %y, %l2, %w2 : tensor<?x64xf32>, tensor<?x8xf32>, tensor<?x2xf32>
}
