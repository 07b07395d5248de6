// RUN: kiln-opt %s -split-input-file -verify-diagnostics --xfmr-expand-spec-verify=tree=chain:2 --xfmr-expand-spec-draft=layers=1 | kiln-opt -split-input-file | FileCheck %s
// RUN: not kiln-opt %s -split-input-file --xfmr-expand-spec-verify --xfmr-expand-spec-draft=layers=2 2>&1 | FileCheck %s --check-prefix=BAD-K
// RUN: not kiln-opt %s -split-input-file --xfmr-expand-spec-verify --xfmr-expand-spec-draft=layers=0 2>&1 | FileCheck %s --check-prefix=BAD-K0
// RUN: not kiln-opt %s -split-input-file --xfmr-expand-spec-draft=layers=1 2>&1 | FileCheck %s --check-prefix=NO-VERIFY

// BAD-K: invalid value 2 for layers, expected 1 to 1 (the model has 2 layers; a draft runs fewer)
// BAD-K0: invalid value 0 for layers, expected 1 to 1 (the model has 2 layers; a draft runs fewer)
// NO-VERIFY: xfmr-expand-spec-draft needs the @verify entry (run xfmr-expand-spec-verify first; kiln-compile --spec-tree)

// A paged two-layer attention-only model: hidden 64, 4 heads, 2 kv heads,
// head dim 16, vocab 128; layer 1 starts with a residual_rms_norm region.

// @forward and @verify stay; @draft is @verify through layer 0: its KV
// write into the layer-0 pools, then the final norm over the residual
// stream leaving layer 0 (the region's sum), the LM head, no accept.
// CHECK-LABEL: func.func @verify(
// CHECK: xfmr.accept
// CHECK-LABEL: func.func @draft(
// CHECK-SAME: %[[TOK:[a-z0-9]+]]: tensor<?xi32> {xfmr.name = "tokens"}, %[[PAR:[a-z0-9]+]]: tensor<?xi32> {xfmr.name = "parents"}
// CHECK-SAME: %[[KP0:[a-z0-9]+]]: !xfmr.kv_pool<16, 2, 16, f32> {xfmr.name = "k_pool.0"}, %[[VP0:[a-z0-9]+]]: !xfmr.kv_pool<16, 2, 16, f32> {xfmr.name = "v_pool.0"}
// CHECK-SAME: -> (tensor<?x128xf32> {xfmr.name = "logits"})
// CHECK-SAME: xfmr.spec_draft = {layers = 1 : i64}
// CHECK: xfmr.tree_mask
// CHECK: xfmr.paged_kv_append %{{.*}}, %{{.*}}, %[[KP0]], %[[VP0]]
// CHECK: xfmr.paged_attention %{{.*}}, %[[KP0]], %[[VP0]], {{.*}} tree_mask
// CHECK: %[[R:.*]]:2 = xfmr.fusion_region "residual_rms_norm"
// CHECK-NOT: xfmr.paged_kv_append
// CHECK-NOT: xfmr.paged_attention
// CHECK: %[[ONW:.*]] = xfmr.weight "output_norm.weight"
// CHECK-NOT: xfmr.paged_attention
// CHECK: %[[N:.*]] = xfmr.rms_norm %[[R]]#0, %[[ONW]]
// CHECK: %[[L:.*]] = xfmr.logits %[[N]]
// CHECK-NOT: xfmr.accept
// CHECK: return %[[L]] : tensor<?x128xf32>
func.func @forward(%tokens: tensor<?xi32> {xfmr.name = "tokens"}, %positions: tensor<?xi32> {xfmr.name = "positions"},
                   %slots: tensor<?xi32> {xfmr.name = "slot_mapping"}, %tables: tensor<?x?xi32> {xfmr.name = "block_tables"},
                   %qstart: tensor<?xi32> {xfmr.name = "query_start"}, %kvlens: tensor<?xi32> {xfmr.name = "kv_lens"},
                   %k0: !xfmr.kv_pool<16, 2, 16, f32> {xfmr.name = "k_pool.0"},
                   %v0: !xfmr.kv_pool<16, 2, 16, f32> {xfmr.name = "v_pool.0"},
                   %k1: !xfmr.kv_pool<16, 2, 16, f32> {xfmr.name = "k_pool.1"},
                   %v1: !xfmr.kv_pool<16, 2, 16, f32> {xfmr.name = "v_pool.1"}) -> tensor<?x128xf32> {
  %table = xfmr.weight "token_embd.weight" : tensor<128x64xf32>
  %x = xfmr.embed %tokens, %table : (tensor<?xi32>, tensor<128x64xf32>) -> tensor<?x64xf32>
  %nw = xfmr.weight "blk.0.attn_norm.weight" : tensor<64xf32>
  %h = xfmr.rms_norm %x, %nw {epsilon = 1.0e-05 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  %wq = xfmr.weight "blk.0.attn_q.weight" : tensor<64x64xf32>
  %wk = xfmr.weight "blk.0.attn_k.weight" : tensor<32x64xf32>
  %wv = xfmr.weight "blk.0.attn_v.weight" : tensor<32x64xf32>
  %q = xfmr.linear %h, %wq : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
  %k = xfmr.linear %h, %wk : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
  %v = xfmr.linear %h, %wv : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
  %q3 = xfmr.reshape %q : tensor<?x64xf32> -> tensor<?x4x16xf32>
  %k3 = xfmr.reshape %k : tensor<?x32xf32> -> tensor<?x2x16xf32>
  %v3 = xfmr.reshape %v : tensor<?x32xf32> -> tensor<?x2x16xf32>
  xfmr.paged_kv_append %k3, %v3, %k0, %v0, %slots : tensor<?x2x16xf32>, tensor<?x2x16xf32>, !xfmr.kv_pool<16, 2, 16, f32>, !xfmr.kv_pool<16, 2, 16, f32>, tensor<?xi32>
  %o = xfmr.paged_attention %q3, %k0, %v0, %tables, %qstart, %kvlens {scale = 0.25 : f64} : (tensor<?x4x16xf32>, !xfmr.kv_pool<16, 2, 16, f32>, !xfmr.kv_pool<16, 2, 16, f32>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32>) -> tensor<?x4x16xf32>
  %o2 = xfmr.reshape %o : tensor<?x4x16xf32> -> tensor<?x64xf32>
  %wo = xfmr.weight "blk.0.attn_output.weight" : tensor<64x64xf32>
  %a = xfmr.linear %o2, %wo : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
  %nw1 = xfmr.weight "blk.1.attn_norm.weight" : tensor<64xf32>
  %x1, %h1 = xfmr.fusion_region "residual_rms_norm" (%x, %a, %nw1) : (tensor<?x64xf32>, tensor<?x64xf32>, tensor<64xf32>) -> (tensor<?x64xf32>, tensor<?x64xf32>) {
  ^bb0(%a0: tensor<?x64xf32>, %a1: tensor<?x64xf32>, %w: tensor<64xf32>):
    %s = xfmr.add %a0, %a1 : tensor<?x64xf32>
    %y = xfmr.rms_norm %s, %w {epsilon = 1.0e-05 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
    xfmr.yield %s, %y : tensor<?x64xf32>, tensor<?x64xf32>
  }
  %wq1 = xfmr.weight "blk.1.attn_q.weight" : tensor<64x64xf32>
  %wk1 = xfmr.weight "blk.1.attn_k.weight" : tensor<32x64xf32>
  %wv1 = xfmr.weight "blk.1.attn_v.weight" : tensor<32x64xf32>
  %q1 = xfmr.linear %h1, %wq1 : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
  %kk1 = xfmr.linear %h1, %wk1 : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
  %vv1 = xfmr.linear %h1, %wv1 : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
  %q13 = xfmr.reshape %q1 : tensor<?x64xf32> -> tensor<?x4x16xf32>
  %k13 = xfmr.reshape %kk1 : tensor<?x32xf32> -> tensor<?x2x16xf32>
  %v13 = xfmr.reshape %vv1 : tensor<?x32xf32> -> tensor<?x2x16xf32>
  xfmr.paged_kv_append %k13, %v13, %k1, %v1, %slots : tensor<?x2x16xf32>, tensor<?x2x16xf32>, !xfmr.kv_pool<16, 2, 16, f32>, !xfmr.kv_pool<16, 2, 16, f32>, tensor<?xi32>
  %oo1 = xfmr.paged_attention %q13, %k1, %v1, %tables, %qstart, %kvlens {scale = 0.25 : f64} : (tensor<?x4x16xf32>, !xfmr.kv_pool<16, 2, 16, f32>, !xfmr.kv_pool<16, 2, 16, f32>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32>) -> tensor<?x4x16xf32>
  %oo2 = xfmr.reshape %oo1 : tensor<?x4x16xf32> -> tensor<?x64xf32>
  %wo1 = xfmr.weight "blk.1.attn_output.weight" : tensor<64x64xf32>
  %a2 = xfmr.linear %oo2, %wo1 : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
  %sum = xfmr.add %x1, %a2 : tensor<?x64xf32>
  %last = xfmr.gather_last_tokens %sum, %qstart : (tensor<?x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
  %onw = xfmr.weight "output_norm.weight" : tensor<64xf32>
  %hn = xfmr.rms_norm %last, %onw {epsilon = 1.0e-05 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  %l = xfmr.logits %hn, %table : (tensor<?x64xf32>, tensor<128x64xf32>) -> tensor<?x128xf32>
  return %l : tensor<?x128xf32>
}
