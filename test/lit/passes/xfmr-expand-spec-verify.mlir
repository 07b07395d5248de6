// RUN: kiln-opt %s -split-input-file -verify-diagnostics --xfmr-expand-spec-verify | kiln-opt -split-input-file | FileCheck %s --check-prefix=CHAIN
// RUN: kiln-opt %s -split-input-file -verify-diagnostics --xfmr-expand-spec-verify="tree=widths:2,2,1 mode=rejection" | kiln-opt -split-input-file | FileCheck %s --check-prefix=TREE
// RUN: kiln-opt %s -split-input-file -verify-diagnostics --xfmr-expand-spec-verify="tree=chain:1 mode=rejection" | kiln-opt -split-input-file | FileCheck %s --check-prefix=ONE
// RUN: not kiln-opt %s -split-input-file --xfmr-expand-spec-verify=tree=chain:0 2>&1 | FileCheck %s --check-prefix=BAD-CHAIN0
// RUN: not kiln-opt %s -split-input-file --xfmr-expand-spec-verify=tree=widths: 2>&1 | FileCheck %s --check-prefix=BAD-WIDTHS
// RUN: not kiln-opt %s -split-input-file --xfmr-expand-spec-verify=tree=widths:2,0 2>&1 | FileCheck %s --check-prefix=BAD-WIDTHS0
// RUN: not kiln-opt %s -split-input-file --xfmr-expand-spec-verify=tree=tree:3 2>&1 | FileCheck %s --check-prefix=BAD-TREE
// RUN: not kiln-opt %s -split-input-file --xfmr-expand-spec-verify=mode=typical 2>&1 | FileCheck %s --check-prefix=BAD-MODE

// BAD-CHAIN0: invalid value 'chain:0' for tree, expected chain:K (K >= 1, e.g. chain:4) or widths:W1,W2,... (each >= 1, e.g. widths:2,2,1), at most 1024 nodes
// BAD-WIDTHS: invalid value 'widths:' for tree, expected chain:K
// BAD-WIDTHS0: invalid value 'widths:2,0' for tree, expected chain:K
// BAD-TREE: invalid value 'tree:3' for tree, expected chain:K
// BAD-MODE: invalid value 'typical' for mode, expected one of: greedy, rejection

// A paged one-layer model: hidden 64, 4 heads, 2 kv heads, head dim 16,
// vocab 128, with the final norm in a fusion region.

// @forward itself is kept as it is.
// CHAIN-LABEL: func.func @forward(
// CHAIN: xfmr.gather_last_tokens
// CHAIN: return

// chain:4 = widths 1,1,1,1: 5 nodes with the root, paths of up to 5 nodes.
// CHAIN-LABEL: func.func @verify(
// CHAIN-SAME: %[[TOK:[a-z0-9]+]]: tensor<?xi32> {xfmr.name = "tokens"}, %[[PAR:[a-z0-9]+]]: tensor<?xi32> {xfmr.name = "parents"}, %[[BASE:[a-z0-9]+]]: tensor<?xi32> {xfmr.name = "base_positions"},
// CHAIN-SAME: %[[SLOTS:[a-z0-9]+]]: tensor<?xi32> {xfmr.name = "slot_mapping"}, %[[TABLES:[a-z0-9]+]]: tensor<?x?xi32> {xfmr.name = "block_tables"}, %[[QS:[a-z0-9]+]]: tensor<?xi32> {xfmr.name = "query_start"}, %[[KVL:[a-z0-9]+]]: tensor<?xi32> {xfmr.name = "kv_lens"},
// CHAIN-SAME: %[[KP:[a-z0-9]+]]: !xfmr.kv_pool<16, 2, 16, f32> {xfmr.name = "k_pool.0"}, %[[VP:[a-z0-9]+]]: !xfmr.kv_pool<16, 2, 16, f32> {xfmr.name = "v_pool.0"})
// CHAIN-SAME: -> (tensor<?x128xf32> {xfmr.name = "logits"}, tensor<?x5xi32> {xfmr.name = "accepted"}, tensor<?xi32> {xfmr.name = "accepted_count"})
// CHAIN-SAME: attributes {xfmr.spec_tree = {mode = "greedy", nodes = 5 : i64, widths = array<i64: 1, 1, 1, 1>}}
// CHAIN: %[[POS:.*]] = xfmr.tree_positions %[[PAR]], %[[BASE]], %[[QS]] : (tensor<?xi32>, tensor<?xi32>, tensor<?xi32>) -> tensor<?xi32>
// CHAIN: %[[MASK:.*]] = xfmr.tree_mask %[[PAR]], %[[QS]] : (tensor<?xi32>, tensor<?xi32>) -> tensor<?x5xi8>
// CHAIN: xfmr.embed %[[TOK]]
// CHAIN: xfmr.rope %{{.*}}, %[[POS]]
// CHAIN: xfmr.rope %{{.*}}, %[[POS]]
// CHAIN: xfmr.paged_kv_append %{{.*}}, %{{.*}}, %[[KP]], %[[VP]], %[[SLOTS]]
// CHAIN: xfmr.paged_attention %{{.*}}, %[[KP]], %[[VP]], %[[TABLES]], %[[QS]], %[[KVL]] tree_mask %[[MASK]] {scale = 2.500000e-01 : f64}
// CHAIN-NOT: xfmr.gather_last_tokens
// CHAIN: xfmr.fusion_region "residual_rms_norm"
// CHAIN: %[[LOGITS:.*]] = xfmr.logits {{.*}} -> tensor<?x128xf32>
// CHAIN: %[[PATH:.*]], %[[N:.*]] = xfmr.accept %[[LOGITS]], %[[TOK]], %[[PAR]], %[[QS]] {mode = "greedy"} : (tensor<?x128xf32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>) -> (tensor<?x5xi32>, tensor<?xi32>)
// CHAIN: return %[[LOGITS]], %[[PATH]], %[[N]] : tensor<?x128xf32>, tensor<?x5xi32>, tensor<?xi32>

// widths:2,2,1 = 1 + 2 + 4 + 4 = 11 nodes, depth 3; rejection takes draft_probs last.
// TREE-LABEL: func.func @verify(
// TREE-SAME: %[[TOK:[a-z0-9]+]]: tensor<?xi32> {xfmr.name = "tokens"}, %[[PAR:[a-z0-9]+]]: tensor<?xi32> {xfmr.name = "parents"}
// TREE-SAME: {xfmr.name = "v_pool.0"}, %[[PROBS:[a-z0-9]+]]: tensor<?x128xf32> {xfmr.name = "draft_probs"})
// TREE-SAME: -> (tensor<?x128xf32> {xfmr.name = "logits"}, tensor<?x4xi32> {xfmr.name = "accepted"}, tensor<?xi32> {xfmr.name = "accepted_count"})
// TREE-SAME: attributes {xfmr.spec_tree = {mode = "rejection", nodes = 11 : i64, widths = array<i64: 2, 2, 1>}}
// TREE: xfmr.tree_mask {{.*}} -> tensor<?x11xi8>
// TREE: xfmr.paged_attention {{.*}} tree_mask
// TREE: %[[LOGITS:.*]] = xfmr.logits
// TREE: xfmr.accept %[[LOGITS]], %[[TOK]], %[[PAR]], %{{.*}} draft_probs %[[PROBS]] {mode = "rejection"} : (tensor<?x128xf32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?x128xf32>) -> (tensor<?x4xi32>, tensor<?xi32>)

// ONE: attributes {xfmr.spec_tree = {mode = "rejection", nodes = 2 : i64, widths = array<i64: 1>}}
// ONE: xfmr.tree_mask {{.*}} -> tensor<?x2xi8>
// ONE: xfmr.accept {{.*}} -> (tensor<?x2xi32>, tensor<?xi32>)
func.func @forward(%tokens: tensor<?xi32> {xfmr.name = "tokens"}, %positions: tensor<?xi32> {xfmr.name = "positions"},
                   %slots: tensor<?xi32> {xfmr.name = "slot_mapping"}, %tables: tensor<?x?xi32> {xfmr.name = "block_tables"},
                   %qstart: tensor<?xi32> {xfmr.name = "query_start"}, %kvlens: tensor<?xi32> {xfmr.name = "kv_lens"},
                   %k_pool: !xfmr.kv_pool<16, 2, 16, f32> {xfmr.name = "k_pool.0"},
                   %v_pool: !xfmr.kv_pool<16, 2, 16, f32> {xfmr.name = "v_pool.0"}) -> tensor<?x128xf32> {
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
  %qr = xfmr.rope %q3, %positions {rope = #xfmr.rope<theta = 10000.0, style = "half", scaling = "none", factor = 1.0, low_freq_factor = 1.0, high_freq_factor = 1.0, original_max_position = 2048>} : (tensor<?x4x16xf32>, tensor<?xi32>) -> tensor<?x4x16xf32>
  %kr = xfmr.rope %k3, %positions {rope = #xfmr.rope<theta = 10000.0, style = "half", scaling = "none", factor = 1.0, low_freq_factor = 1.0, high_freq_factor = 1.0, original_max_position = 2048>} : (tensor<?x2x16xf32>, tensor<?xi32>) -> tensor<?x2x16xf32>
  xfmr.paged_kv_append %kr, %v3, %k_pool, %v_pool, %slots : tensor<?x2x16xf32>, tensor<?x2x16xf32>, !xfmr.kv_pool<16, 2, 16, f32>, !xfmr.kv_pool<16, 2, 16, f32>, tensor<?xi32>
  %o = xfmr.paged_attention %qr, %k_pool, %v_pool, %tables, %qstart, %kvlens {scale = 0.25 : f64} : (tensor<?x4x16xf32>, !xfmr.kv_pool<16, 2, 16, f32>, !xfmr.kv_pool<16, 2, 16, f32>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32>) -> tensor<?x4x16xf32>
  %o2 = xfmr.reshape %o : tensor<?x4x16xf32> -> tensor<?x64xf32>
  %wo = xfmr.weight "blk.0.attn_output.weight" : tensor<64x64xf32>
  %a = xfmr.linear %o2, %wo : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
  %last = xfmr.gather_last_tokens %a, %qstart : (tensor<?x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
  %onw = xfmr.weight "output_norm.weight" : tensor<64xf32>
  %r, %hn = xfmr.fusion_region "residual_rms_norm" (%last, %last, %onw) : (tensor<?x64xf32>, tensor<?x64xf32>, tensor<64xf32>) -> (tensor<?x64xf32>, tensor<?x64xf32>) {
  ^bb0(%a0: tensor<?x64xf32>, %a1: tensor<?x64xf32>, %w: tensor<64xf32>):
    %s = xfmr.add %a0, %a1 : tensor<?x64xf32>
    %y = xfmr.rms_norm %s, %w {epsilon = 1.0e-05 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
    xfmr.yield %s, %y : tensor<?x64xf32>, tensor<?x64xf32>
  }
  %l = xfmr.logits %hn, %table : (tensor<?x64xf32>, tensor<128x64xf32>) -> tensor<?x128xf32>
  return %l : tensor<?x128xf32>
}

// -----

// The unfused / unpaged @forward: contiguous past KV, no pools.
// expected-error @+1 {{xfmr-expand-spec-verify needs the paged @forward entry (run xfmr-page-kv-cache first)}}
func.func @forward(%tokens: tensor<?xi32> {xfmr.name = "tokens"}, %positions: tensor<?xi32> {xfmr.name = "positions"},
                   %past_k: tensor<?x2x16xf32> {xfmr.name = "past_k.0"}) -> tensor<?x128xf32> {
  %table = xfmr.weight "token_embd.weight" : tensor<128x64xf32>
  %x = xfmr.embed %tokens, %table : (tensor<?xi32>, tensor<128x64xf32>) -> tensor<?x64xf32>
  %l = xfmr.logits %x, %table : (tensor<?x64xf32>, tensor<128x64xf32>) -> tensor<?x128xf32>
  return %l : tensor<?x128xf32>
}

// -----

// No @forward at all.
// expected-error @+1 {{xfmr-expand-spec-verify needs the paged @forward entry (run xfmr-page-kv-cache first)}}
module {
  func.func @prefill(%x: tensor<?x64xf32>) -> tensor<?x64xf32> {
    return %x : tensor<?x64xf32>
  }
}
