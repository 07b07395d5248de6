// RUN: kiln-opt %s | kiln-opt | FileCheck %s
// RUN: kiln-opt %s --mlir-print-op-generic | kiln-opt | FileCheck %s

// Every xfmr op, parsed, printed, and parsed again (custom and generic form).

// CHECK-LABEL: func.func @unfused_layer
func.func @unfused_layer(%tokens: tensor<?xi32>, %pos: tensor<?xi32>,
                         %past_k: tensor<?x3x64xf32>, %past_v: tensor<?x3x64xf32>)
    -> (tensor<?x49152xf32>, tensor<?x3x64xf32>, tensor<?x3x64xf32>) {
  // CHECK: xfmr.weight "token_embd.weight" : tensor<49152x576x!xfmr.quant<"q8_0", 32>>
  %table = xfmr.weight "token_embd.weight" : tensor<49152x576x!xfmr.quant<"q8_0", 32>>
  %norm_w = xfmr.weight "blk.0.attn_norm.weight" : tensor<576xf32>
  %wq = xfmr.weight "blk.0.attn_q.weight" : tensor<576x576x!xfmr.quant<"q4_1", 32>>
  %wk = xfmr.weight "blk.0.attn_k.weight" : tensor<192x576x!xfmr.quant<"q4_1", 32>>
  %bk = xfmr.weight "blk.0.attn_k.bias" : tensor<192xf32>
  // CHECK: xfmr.embed
  %x = xfmr.embed %tokens, %table : (tensor<?xi32>, tensor<49152x576x!xfmr.quant<"q8_0", 32>>) -> tensor<?x576xf32>
  // CHECK: xfmr.embed {{.*}} {scale = 2.400000e+01 : f64}
  %xs = xfmr.embed %tokens, %table {scale = 24.0 : f64} : (tensor<?xi32>, tensor<49152x576x!xfmr.quant<"q8_0", 32>>) -> tensor<?x576xf32>
  // CHECK: xfmr.weight_offset %{{.*}} {offset = 1.000000e+00 : f64} : tensor<576xf32> -> tensor<576xf32>
  %norm_w1 = xfmr.weight_offset %norm_w {offset = 1.0 : f64} : tensor<576xf32> -> tensor<576xf32>
  // CHECK: xfmr.rms_norm {{.*}} {epsilon = 1.000000e-05 : f64}
  %h = xfmr.rms_norm %x, %norm_w {epsilon = 1.0e-05 : f64} : (tensor<?x576xf32>, tensor<576xf32>) -> tensor<?x576xf32>
  // CHECK: xfmr.linear %{{.*}}, %{{.*}} :
  %q = xfmr.linear %h, %wq : (tensor<?x576xf32>, tensor<576x576x!xfmr.quant<"q4_1", 32>>) -> tensor<?x576xf32>
  // CHECK: xfmr.linear %{{.*}}, %{{.*}}, %{{.*}} :
  %k = xfmr.linear %h, %wk, %bk : (tensor<?x576xf32>, tensor<192x576x!xfmr.quant<"q4_1", 32>>, tensor<192xf32>) -> tensor<?x192xf32>
  // CHECK: xfmr.reshape
  %q3 = xfmr.reshape %q : tensor<?x576xf32> -> tensor<?x9x64xf32>
  %k3 = xfmr.reshape %k : tensor<?x192xf32> -> tensor<?x3x64xf32>
  // CHECK: xfmr.rope {{.*}}#xfmr.rope<theta = 1.000000e+05, style = "interleaved", scaling = "none"
  %qr = xfmr.rope %q3, %pos {rope = #xfmr.rope<theta = 100000.0, style = "interleaved", scaling = "none", factor = 1.0, low_freq_factor = 1.0, high_freq_factor = 1.0, original_max_position = 8192>} : (tensor<?x9x64xf32>, tensor<?xi32>) -> tensor<?x9x64xf32>
  %kr = xfmr.rope %k3, %pos {rope = #xfmr.rope<theta = 500000.0, style = "half", scaling = "llama3", factor = 32.0, low_freq_factor = 1.0, high_freq_factor = 4.0, original_max_position = 8192>} : (tensor<?x3x64xf32>, tensor<?xi32>) -> tensor<?x3x64xf32>
  // CHECK: xfmr.kv_concat
  %kall = xfmr.kv_concat %past_k, %kr : (tensor<?x3x64xf32>, tensor<?x3x64xf32>) -> tensor<?x3x64xf32>
  %vall = xfmr.kv_concat %past_v, %kr : (tensor<?x3x64xf32>, tensor<?x3x64xf32>) -> tensor<?x3x64xf32>
  // CHECK: xfmr.transpose {{.*}} {permutation = array<i64: 1, 0, 2>}
  %qt = xfmr.transpose %qr {permutation = array<i64: 1, 0, 2>} : tensor<?x9x64xf32> -> tensor<9x?x64xf32>
  %kt = xfmr.transpose %kall {permutation = array<i64: 1, 0, 2>} : tensor<?x3x64xf32> -> tensor<3x?x64xf32>
  %vt = xfmr.transpose %vall {permutation = array<i64: 1, 0, 2>} : tensor<?x3x64xf32> -> tensor<3x?x64xf32>
  // CHECK: xfmr.repeat_kv {{.*}} {repeats = 3 : i64}
  %k9 = xfmr.repeat_kv %kt {repeats = 3 : i64} : tensor<3x?x64xf32> -> tensor<9x?x64xf32>
  %v9 = xfmr.repeat_kv %vt {repeats = 3 : i64} : tensor<3x?x64xf32> -> tensor<9x?x64xf32>
  // CHECK: xfmr.batch_matmul {{.*}} {transpose_rhs}
  %s = xfmr.batch_matmul %qt, %k9 {transpose_rhs} : (tensor<9x?x64xf32>, tensor<9x?x64xf32>) -> tensor<9x?x?xf32>
  // CHECK: xfmr.scale {{.*}} {factor = 1.250000e-01 : f64}
  %ss = xfmr.scale %s {factor = 0.125 : f64} : tensor<9x?x?xf32>
  // CHECK: xfmr.causal_mask
  %m = xfmr.causal_mask %ss : tensor<9x?x?xf32>
  // CHECK: xfmr.causal_mask {{.*}} {sliding_window = 4096 : i64}
  %mw = xfmr.causal_mask %ss {sliding_window = 4096 : i64} : tensor<9x?x?xf32>
  // CHECK: xfmr.softmax {{.*}} {axis = 2 : i64}
  %p = xfmr.softmax %m {axis = 2 : i64} : tensor<9x?x?xf32>
  %o = xfmr.batch_matmul %p, %v9 : (tensor<9x?x?xf32>, tensor<9x?x64xf32>) -> tensor<9x?x64xf32>
  %ot = xfmr.transpose %o {permutation = array<i64: 1, 0, 2>} : tensor<9x?x64xf32> -> tensor<?x9x64xf32>
  %o2 = xfmr.reshape %ot : tensor<?x9x64xf32> -> tensor<?x576xf32>
  // CHECK: xfmr.add
  %r = xfmr.add %x, %o2 : tensor<?x576xf32>
  // CHECK: xfmr.silu
  %a = xfmr.silu %r : tensor<?x576xf32>
  // CHECK: xfmr.gelu_tanh
  %ag = xfmr.gelu_tanh %r : tensor<?x576xf32>
  // CHECK: xfmr.mul
  %g = xfmr.mul %a, %r : tensor<?x576xf32>
  // CHECK: xfmr.concat {{.*}} {axis = 1 : i64}
  %c = xfmr.concat %g, %k {axis = 1 : i64} : (tensor<?x576xf32>, tensor<?x192xf32>) -> tensor<?x768xf32>
  // CHECK: xfmr.split {{.*}} {axis = 1 : i64, sizes = array<i64: 384, 384>}
  %c1, %c2 = xfmr.split %c {axis = 1 : i64, sizes = array<i64: 384, 384>} : tensor<?x768xf32> -> tensor<?x384xf32>, tensor<?x384xf32>
  %lm = xfmr.weight "output.weight" : tensor<49152x576xf32>
  // CHECK: xfmr.logits
  %l = xfmr.logits %g, %lm : (tensor<?x576xf32>, tensor<49152x576xf32>) -> tensor<?x49152xf32>
  return %l, %kall, %vall : tensor<?x49152xf32>, tensor<?x3x64xf32>, tensor<?x3x64xf32>
}

// CHECK-LABEL: func.func @fused
func.func @fused(%q: tensor<?x9x64xf32>, %k: tensor<?x3x64xf32>, %v: tensor<?x3x64xf32>,
                 %x: tensor<?x576xf32>, %r: tensor<?x576xf32>, %w: tensor<576xf32>) -> (tensor<?x9x64xf32>, tensor<?x576xf32>) {
  // CHECK: xfmr.attention {{.*}} {causal, scale = 1.250000e-01 : f64}
  %o = xfmr.attention %q, %k, %v {scale = 0.125 : f64, causal} : (tensor<?x9x64xf32>, tensor<?x3x64xf32>, tensor<?x3x64xf32>) -> tensor<?x9x64xf32>
  // CHECK: xfmr.attention {{.*}} {causal, scale = 1.250000e-01 : f64, sliding_window = 4096 : i64}
  %ow = xfmr.attention %q, %k, %v {scale = 0.125 : f64, causal, sliding_window = 4096 : i64} : (tensor<?x9x64xf32>, tensor<?x3x64xf32>, tensor<?x3x64xf32>) -> tensor<?x9x64xf32>
  // CHECK: xfmr.fusion_region "residual_rms_norm"
  // CHECK: xfmr.yield
  %h, %n = xfmr.fusion_region "residual_rms_norm" (%x, %r, %w) : (tensor<?x576xf32>, tensor<?x576xf32>, tensor<576xf32>) -> (tensor<?x576xf32>, tensor<?x576xf32>) {
  ^bb0(%a: tensor<?x576xf32>, %b: tensor<?x576xf32>, %c: tensor<576xf32>):
    %s = xfmr.add %a, %b : tensor<?x576xf32>
    %y = xfmr.rms_norm %s, %c {epsilon = 1.0e-05 : f64} : (tensor<?x576xf32>, tensor<576xf32>) -> tensor<?x576xf32>
    xfmr.yield %s, %y : tensor<?x576xf32>, tensor<?x576xf32>
  }
  return %o, %n : tensor<?x9x64xf32>, tensor<?x576xf32>
}

// CHECK-LABEL: func.func @paged
func.func @paged(%q: tensor<?x9x64xf32>, %k: tensor<?x3x64xf32>, %v: tensor<?x3x64xf32>,
                 %k_pool: !xfmr.kv_pool<16, 3, 64, f32>, %v_pool: !xfmr.kv_pool<16, 3, 64, f32>,
                 %slots: tensor<?xi32>, %tables: tensor<?x?xi32>, %qstart: tensor<?xi32>,
                 %kvlens: tensor<?xi32>, %tree: tensor<?x?xi8>, %h: tensor<?x576xf32>) -> (tensor<?x9x64xf32>, tensor<?x576xf32>) {
  // CHECK: xfmr.paged_kv_append
  xfmr.paged_kv_append %k, %v, %k_pool, %v_pool, %slots : tensor<?x3x64xf32>, tensor<?x3x64xf32>, !xfmr.kv_pool<16, 3, 64, f32>, !xfmr.kv_pool<16, 3, 64, f32>, tensor<?xi32>
  // CHECK: xfmr.paged_attention
  %o = xfmr.paged_attention %q, %k_pool, %v_pool, %tables, %qstart, %kvlens {scale = 0.125 : f64} : (tensor<?x9x64xf32>, !xfmr.kv_pool<16, 3, 64, f32>, !xfmr.kv_pool<16, 3, 64, f32>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32>) -> tensor<?x9x64xf32>
  // CHECK: xfmr.paged_attention {{.*}} {scale = 1.250000e-01 : f64, sliding_window = 7 : i64}
  %ow = xfmr.paged_attention %q, %k_pool, %v_pool, %tables, %qstart, %kvlens {scale = 0.125 : f64, sliding_window = 7 : i64} : (tensor<?x9x64xf32>, !xfmr.kv_pool<16, 3, 64, f32>, !xfmr.kv_pool<16, 3, 64, f32>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32>) -> tensor<?x9x64xf32>
  // CHECK: xfmr.paged_attention {{.*}} tree_mask
  %o2 = xfmr.paged_attention %q, %k_pool, %v_pool, %tables, %qstart, %kvlens tree_mask %tree {scale = 0.125 : f64} : (tensor<?x9x64xf32>, !xfmr.kv_pool<16, 3, 64, f32>, !xfmr.kv_pool<16, 3, 64, f32>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?x?xi8>) -> tensor<?x9x64xf32>
  // CHECK: xfmr.gather_last_tokens
  %last = xfmr.gather_last_tokens %h, %qstart : (tensor<?x576xf32>, tensor<?xi32>) -> tensor<?x576xf32>
  return %o2, %last : tensor<?x9x64xf32>, tensor<?x576xf32>
}

// CHECK-LABEL: func.func @quantized
func.func @quantized(%x: tensor<?x576xf32>, %w: tensor<1536x576xf32>, %b: tensor<1536xf32>,
                     %k: tensor<?x3x64xf32>, %ks: tensor<?x3xf32>) -> (tensor<?x1536xf32>, tensor<?x3x64x!xfmr.quant<"int8", 0>>) {
  // CHECK: xfmr.quantize %{{.*}} {group = 0 : i64} : (tensor<1536x576xf32>) -> (tensor<1536x576x!xfmr.quant<"int8", 0>>, tensor<1536xf32>)
  %q, %s = xfmr.quantize %w {group = 0 : i64} : (tensor<1536x576xf32>) -> (tensor<1536x576x!xfmr.quant<"int8", 0>>, tensor<1536xf32>)
  // CHECK: xfmr.quantize %{{.*}} {group = 64 : i64} : (tensor<1536x576xf32>) -> (tensor<1536x576x!xfmr.quant<"int4", 64>>, tensor<1536x9xf32>)
  %q4, %s4 = xfmr.quantize %w {group = 64 : i64} : (tensor<1536x576xf32>) -> (tensor<1536x576x!xfmr.quant<"int4", 64>>, tensor<1536x9xf32>)
  // CHECK: xfmr.quantize %{{.*}} scales %{{.*}} {group = 0 : i64}
  %kq, %kqs = xfmr.quantize %k scales %ks {group = 0 : i64} : (tensor<?x3x64xf32>, tensor<?x3xf32>) -> (tensor<?x3x64x!xfmr.quant<"int8", 0>>, tensor<?x3xf32>)
  // CHECK: xfmr.dequantize
  %d = xfmr.dequantize %q, %s : (tensor<1536x576x!xfmr.quant<"int8", 0>>, tensor<1536xf32>) -> tensor<1536x576xf32>
  // CHECK: xfmr.quantized_linear {{.*}} scales
  %y = xfmr.quantized_linear %x, %q scales %s : (tensor<?x576xf32>, tensor<1536x576x!xfmr.quant<"int8", 0>>, tensor<1536xf32>) -> tensor<?x1536xf32>
  // CHECK: xfmr.quantized_linear {{.*}} scales {{.*}} bias
  %y4 = xfmr.quantized_linear %x, %q4 scales %s4 bias %b : (tensor<?x576xf32>, tensor<1536x576x!xfmr.quant<"int4", 64>>, tensor<1536x9xf32>, tensor<1536xf32>) -> tensor<?x1536xf32>
  %g = xfmr.weight "blk.0.ffn_up.weight" : tensor<1536x576x!xfmr.quant<"q4_1", 32>>
  // CHECK: xfmr.quantized_linear %{{.*}}, %{{.*}} :
  %z = xfmr.quantized_linear %x, %g : (tensor<?x576xf32>, tensor<1536x576x!xfmr.quant<"q4_1", 32>>) -> tensor<?x1536xf32>
  // CHECK: xfmr.dequantize %{{.*}} : (tensor<1536x576x!xfmr.quant<"q4_1", 32>>)
  %gd = xfmr.dequantize %g : (tensor<1536x576x!xfmr.quant<"q4_1", 32>>) -> tensor<1536x576xf32>
  // CHECK: xfmr.gemm
  %e = xfmr.gemm %x, %d : (tensor<?x576xf32>, tensor<1536x576xf32>) -> tensor<?x1536xf32>
  // CHECK: xfmr.gemm {{.*}} scales
  %e3 = xfmr.gemm %x, %q scales %s : (tensor<?x576xf32>, tensor<1536x576x!xfmr.quant<"int8", 0>>, tensor<1536xf32>) -> tensor<?x1536xf32>
  %e2 = xfmr.gemm %x, %gd : (tensor<?x576xf32>, tensor<1536x576xf32>) -> tensor<?x1536xf32>
  %sum = xfmr.add %y, %z : tensor<?x1536xf32>
  %sum2 = xfmr.add %sum, %e : tensor<?x1536xf32>
  %sum3 = xfmr.add %sum2, %y4 : tensor<?x1536xf32>
  %sum4 = xfmr.add %sum3, %e2 : tensor<?x1536xf32>
  return %sum4, %kq : tensor<?x1536xf32>, tensor<?x3x64x!xfmr.quant<"int8", 0>>
}

// CHECK-LABEL: func.func @spec_and_kernels
func.func @spec_and_kernels(%parents: tensor<?xi32>, %base: tensor<?xi32>, %qstart: tensor<?xi32>, %logits: tensor<?x49152xf32>,
                            %tokens: tensor<?xi32>, %probs: tensor<?x49152xf32>, %x: tensor<?x576xf32>, %w: tensor<576xf32>) -> (tensor<?xi32>, tensor<?x5xi8>, tensor<?x5xi32>, tensor<?xi32>, tensor<?x576xf32>) {
  // CHECK: xfmr.tree_positions %{{.*}}, %{{.*}}, %{{.*}} : (tensor<?xi32>, tensor<?xi32>, tensor<?xi32>) -> tensor<?xi32>
  %pos = xfmr.tree_positions %parents, %base, %qstart : (tensor<?xi32>, tensor<?xi32>, tensor<?xi32>) -> tensor<?xi32>
  // CHECK: xfmr.tree_mask %{{.*}}, %{{.*}} : (tensor<?xi32>, tensor<?xi32>) -> tensor<?x5xi8>
  %m = xfmr.tree_mask %parents, %qstart : (tensor<?xi32>, tensor<?xi32>) -> tensor<?x5xi8>
  // CHECK: xfmr.accept {{.*}} {mode = "greedy"}
  %gpath, %gn = xfmr.accept %logits, %tokens, %parents, %qstart {mode = "greedy"} : (tensor<?x49152xf32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>) -> (tensor<?x5xi32>, tensor<?xi32>)
  // CHECK: xfmr.accept {{.*}} draft_probs {{.*}} {mode = "rejection"}
  %path, %n = xfmr.accept %logits, %tokens, %parents, %qstart draft_probs %probs {mode = "rejection"} : (tensor<?x49152xf32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?x49152xf32>) -> (tensor<?x5xi32>, tensor<?xi32>)
  // CHECK: xfmr.kernel "rms_norm"
  %y = xfmr.kernel "rms_norm" (%x, %w) {params = {epsilon = 1.0e-05 : f64, hidden = 576 : i64}} : (tensor<?x576xf32>, tensor<576xf32>) -> tensor<?x576xf32>
  return %pos, %m, %path, %n, %y : tensor<?xi32>, tensor<?x5xi8>, tensor<?x5xi32>, tensor<?xi32>, tensor<?x576xf32>
}

// An f32 residual stream with bf16 activations: add promotes to the wider
// type (printed with its operand types), rms_norm narrows to bf16.
// CHECK-LABEL: func.func @mixed_residual
func.func @mixed_residual(%x: tensor<?x576xf32>, %o: tensor<?x576xbf16>, %w: tensor<576xbf16>) -> tensor<?x576xbf16> {
  // CHECK: xfmr.add %{{.*}}, %{{.*}} : (tensor<?x576xf32>, tensor<?x576xbf16>) -> tensor<?x576xf32>
  %s = xfmr.add %x, %o : (tensor<?x576xf32>, tensor<?x576xbf16>) -> tensor<?x576xf32>
  // CHECK: xfmr.add %{{.*}}, %{{.*}} : (tensor<?x576xbf16>, tensor<?x576xf32>) -> tensor<?x576xf32>
  %t = xfmr.add %o, %s : (tensor<?x576xbf16>, tensor<?x576xf32>) -> tensor<?x576xf32>
  // CHECK: xfmr.rms_norm {{.*}} : (tensor<?x576xf32>, tensor<576xbf16>) -> tensor<?x576xbf16>
  %h = xfmr.rms_norm %t, %w {epsilon = 1.0e-05 : f64} : (tensor<?x576xf32>, tensor<576xbf16>) -> tensor<?x576xbf16>
  return %h : tensor<?x576xbf16>
}

// Mixture of experts: per-expert weights stacked, routing, the routed experts.
// CHECK-LABEL: func.func @moe
func.func @moe(%x: tensor<?x64xf32>, %wr: tensor<4x64xf32>, %g0: tensor<96x64xbf16>, %g1: tensor<96x64xbf16>, %u: tensor<2x96x64xbf16>, %d: tensor<2x64x96xbf16>) -> tensor<?x64xf32> {
  // CHECK: xfmr.stack %{{.*}}, %{{.*}} : (tensor<96x64xbf16>, tensor<96x64xbf16>) -> tensor<2x96x64xbf16>
  %g = xfmr.stack %g0, %g1 : (tensor<96x64xbf16>, tensor<96x64xbf16>) -> tensor<2x96x64xbf16>
  %l = xfmr.linear %x, %wr : (tensor<?x64xf32>, tensor<4x64xf32>) -> tensor<?x4xf32>
  // CHECK: xfmr.moe_router %{{.*}} {normalize = true, top_k = 2 : i64} : tensor<?x4xf32> -> tensor<?x2xf32>, tensor<?x2xi32>
  %w, %e = xfmr.moe_router %l {top_k = 2 : i64, normalize = true} : tensor<?x4xf32> -> tensor<?x2xf32>, tensor<?x2xi32>
  // CHECK: xfmr.moe_ffn {{.*}} -> tensor<?x64xf32>
  %y = xfmr.moe_ffn %x, %w, %e, %g, %u, %d : (tensor<?x64xf32>, tensor<?x2xf32>, tensor<?x2xi32>, tensor<2x96x64xbf16>, tensor<2x96x64xbf16>, tensor<2x64x96xbf16>) -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}
