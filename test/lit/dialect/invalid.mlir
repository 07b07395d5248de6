// RUN: kiln-opt %s -split-input-file -verify-diagnostics

// Each case breaks one verifier rule; the message names the actual and the expected value.
func.func @weight_empty_name() {
  // expected-error @+1 {{weight name is empty, expected the checkpoint tensor name}}
  %r = xfmr.weight "" : tensor<4xf32>
  return
}


// -----

func.func @weight_dynamic() {
  // expected-error @+1 {{weight 'w' has type 'tensor<?x4xf32>', expected a static shape}}
  %r = xfmr.weight "w" : tensor<?x4xf32>
  return
}


// -----

func.func @quant_unknown() {
  // expected-error @+1 {{unknown quantization kind 'q3_x', expected one of: q4_0, q4_1, q5_0, q5_1, q8_0, q4_k, q5_k, q6_k, int8, int4, fp8e4m3}}
  %r = xfmr.weight "w" : tensor<4x32x!xfmr.quant<"q3_x", 32>>
  return
}


// -----

func.func @quant_block() {
  // expected-error @+1 {{quantization kind 'q4_1' has block size 64, expected 32}}
  %r = xfmr.weight "w" : tensor<4x32x!xfmr.quant<"q4_1", 64>>
  return
}


// -----

func.func @embed_hidden(%t: tensor<?xi32>, %e: tensor<100x64xf32>) {
  // expected-error @+1 {{result hidden size is 32, expected 64}}
  %r = xfmr.embed %t, %e : (tensor<?xi32>, tensor<100x64xf32>) -> tensor<?x32xf32>
  return
}


// -----

func.func @embed_rank(%t: tensor<?x2xi32>, %e: tensor<100x64xf32>) {
  // expected-error @+1 {{tokens has rank 2, expected 1 ('tensor<?x2xi32>')}}
  %r = xfmr.embed %t, %e : (tensor<?x2xi32>, tensor<100x64xf32>) -> tensor<?x64xf32>
  return
}


// -----

func.func @rms_norm_weight(%x: tensor<?x576xf32>, %w: tensor<512xf32>) {
  // expected-error @+1 {{weight length is 512, expected 576}}
  %r = xfmr.rms_norm %x, %w {epsilon = 1.0e-05 : f64} : (tensor<?x576xf32>, tensor<512xf32>) -> tensor<?x576xf32>
  return
}


// -----

func.func @rms_norm_eps(%x: tensor<?x576xf32>, %w: tensor<576xf32>) {
  // expected-error @+1 {{epsilon 0.000000e+00 must be > 0}}
  %r = xfmr.rms_norm %x, %w {epsilon = 0.0 : f64} : (tensor<?x576xf32>, tensor<576xf32>) -> tensor<?x576xf32>
  return
}


// -----

func.func @linear_in(%x: tensor<?x576xf32>, %w: tensor<64x512xf32>) {
  // expected-error @+1 {{weight in-features 512 do not match input last dimension 576}}
  %r = xfmr.linear %x, %w : (tensor<?x576xf32>, tensor<64x512xf32>) -> tensor<?x64xf32>
  return
}


// -----

func.func @linear_out(%x: tensor<?x576xf32>, %w: tensor<64x576xf32>) {
  // expected-error @+1 {{result last dimension is 32, expected 64}}
  %r = xfmr.linear %x, %w : (tensor<?x576xf32>, tensor<64x576xf32>) -> tensor<?x32xf32>
  return
}


// -----

func.func @linear_bias(%x: tensor<?x576xf32>, %w: tensor<64x576xf32>, %b: tensor<32xf32>) {
  // expected-error @+1 {{bias length is 32, expected 64}}
  %r = xfmr.linear %x, %w, %b : (tensor<?x576xf32>, tensor<64x576xf32>, tensor<32xf32>) -> tensor<?x64xf32>
  return
}


// -----

func.func @rope_positions(%x: tensor<4x9x64xf32>, %p: tensor<3xi32>) {
  // expected-error @+1 {{positions length is 3, expected 4}}
  %r = xfmr.rope %x, %p {rope = #xfmr.rope<theta = 10000.0, style = "half", scaling = "none", factor = 1.0, low_freq_factor = 1.0, high_freq_factor = 1.0, original_max_position = 2048>} : (tensor<4x9x64xf32>, tensor<3xi32>) -> tensor<4x9x64xf32>
  return
}


// -----

func.func @rope_odd(%x: tensor<4x9x63xf32>, %p: tensor<4xi32>) {
  // expected-error @+1 {{head dimension 63 is odd, expected an even number}}
  %r = xfmr.rope %x, %p {rope = #xfmr.rope<theta = 10000.0, style = "half", scaling = "none", factor = 1.0, low_freq_factor = 1.0, high_freq_factor = 1.0, original_max_position = 2048>} : (tensor<4x9x63xf32>, tensor<4xi32>) -> tensor<4x9x63xf32>
  return
}


// -----

func.func @reshape_count(%x: tensor<?x576xf32>) {
  // expected-error @+1 {{reshape 'tensor<?x576xf32>' -> 'tensor<?x8x64xf32>' changes the element count (static parts 576 vs 512), expected equal counts}}
  %r = xfmr.reshape %x : tensor<?x576xf32> -> tensor<?x8x64xf32>
  return
}


// -----

func.func @transpose_perm(%x: tensor<4x9x64xf32>) {
  // expected-error @+1 {{permutation entry 1 is out of range or repeated, expected a permutation of 0..2}}
  %r = xfmr.transpose %x {permutation = array<i64: 1, 1, 2>} : tensor<4x9x64xf32> -> tensor<9x9x64xf32>
  return
}


// -----

func.func @transpose_shape(%x: tensor<4x9x64xf32>) {
  // expected-error @+1 {{result dimension 0 is 4, expected 9}}
  %r = xfmr.transpose %x {permutation = array<i64: 1, 0, 2>} : tensor<4x9x64xf32> -> tensor<4x9x64xf32>
  return
}


// -----

func.func @concat_axis(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>) {
  // expected-error @+1 {{axis 2 is out of range, expected 0..1}}
  %r = xfmr.concat %a, %b {axis = 2 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x16xf32>
  return
}


// -----

func.func @concat_total(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>) {
  // expected-error @+1 {{result concatenated dimension is 12, expected 16}}
  %r = xfmr.concat %a, %b {axis = 1 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x12xf32>
  return
}


// -----

func.func @bmm_k(%a: tensor<9x4x64xf32>, %b: tensor<9x10x32xf32>) {
  // expected-error @+1 {{rhs contraction size is 32, expected 64}}
  %r = xfmr.batch_matmul %a, %b {transpose_rhs} : (tensor<9x4x64xf32>, tensor<9x10x32xf32>) -> tensor<9x4x10xf32>
  return
}


// -----

func.func @bmm_batch(%a: tensor<9x4x64xf32>, %b: tensor<3x64x10xf32>) {
  // expected-error @+1 {{rhs batch is 3, expected 9}}
  %r = xfmr.batch_matmul %a, %b : (tensor<9x4x64xf32>, tensor<3x64x10xf32>) -> tensor<9x4x10xf32>
  return
}


// -----

func.func @causal_keys(%s: tensor<9x8x4xf32>) {
  // expected-error @+1 {{scores have 4 keys for 8 queries, expected keys >= queries}}
  %r = xfmr.causal_mask %s : tensor<9x8x4xf32>
  return
}


// -----

func.func @causal_window_zero(%s: tensor<9x?x?xf32>) {
  // expected-error @+1 {{sliding_window 0, expected a positive number of keys (absent: no window)}}
  %r = xfmr.causal_mask %s {sliding_window = 0 : i64} : tensor<9x?x?xf32>
  return
}


// -----

func.func @attention_window_not_causal(%q: tensor<?x9x64xf32>, %k: tensor<?x3x64xf32>, %v: tensor<?x3x64xf32>) {
  // expected-error @+1 {{sliding_window 16 needs causal attention}}
  %r = xfmr.attention %q, %k, %v {scale = 0.125 : f64, sliding_window = 16 : i64} : (tensor<?x9x64xf32>, tensor<?x3x64xf32>, tensor<?x3x64xf32>) -> tensor<?x9x64xf32>
  return
}


// -----

func.func @paged_attention_window_tree(%q: tensor<?x9x64xf32>, %kp: !xfmr.kv_pool<16, 3, 64, f32>, %vp: !xfmr.kv_pool<16, 3, 64, f32>, %t: tensor<?x?xi32>, %qs: tensor<?xi32>, %kl: tensor<?xi32>, %m: tensor<?x?xi8>) {
  // expected-error @+1 {{sliding_window 7 with a tree_mask: windowed speculative verify is not supported}}
  %r = xfmr.paged_attention %q, %kp, %vp, %t, %qs, %kl tree_mask %m {scale = 0.125 : f64, sliding_window = 7 : i64} : (tensor<?x9x64xf32>, !xfmr.kv_pool<16, 3, 64, f32>, !xfmr.kv_pool<16, 3, 64, f32>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?x?xi8>) -> tensor<?x9x64xf32>
  return
}


// -----

func.func @softmax_axis(%s: tensor<9x8x4xf32>) {
  // expected-error @+1 {{axis 3 is out of range, expected 0..2}}
  %r = xfmr.softmax %s {axis = 3 : i64} : tensor<9x8x4xf32>
  return
}


// -----

func.func @repeat_heads(%k: tensor<3x?x64xf32>) {
  // expected-error @+1 {{result heads is 6, expected 9}}
  %r = xfmr.repeat_kv %k {repeats = 3 : i64} : tensor<3x?x64xf32> -> tensor<6x?x64xf32>
  return
}


// -----

func.func @kv_concat_heads(%p: tensor<?x3x64xf32>, %n: tensor<?x4x64xf32>) {
  // expected-error @+1 {{update kv heads is 4, expected 3}}
  %r = xfmr.kv_concat %p, %n : (tensor<?x3x64xf32>, tensor<?x4x64xf32>) -> tensor<?x3x64xf32>
  return
}


// -----

func.func @kv_concat_len(%p: tensor<5x3x64xf32>, %n: tensor<2x3x64xf32>) {
  // expected-error @+1 {{result length is 8, expected 7}}
  %r = xfmr.kv_concat %p, %n : (tensor<5x3x64xf32>, tensor<2x3x64xf32>) -> tensor<8x3x64xf32>
  return
}


// -----

func.func @logits_vocab(%h: tensor<?x576xf32>, %w: tensor<100x576xf32>) {
  // expected-error @+1 {{result last dimension is 99, expected 100}}
  %r = xfmr.logits %h, %w : (tensor<?x576xf32>, tensor<100x576xf32>) -> tensor<?x99xf32>
  return
}


// -----

func.func @attention_gqa(%q: tensor<?x9x64xf32>, %k: tensor<?x4x64xf32>, %v: tensor<?x4x64xf32>) {
  // expected-error @+1 {{query heads 9 is not a multiple of kv heads 4}}
  %r = xfmr.attention %q, %k, %v {scale = 0.125 : f64, causal} : (tensor<?x9x64xf32>, tensor<?x4x64xf32>, tensor<?x4x64xf32>) -> tensor<?x9x64xf32>
  return
}


// -----

func.func @attention_hd(%q: tensor<?x9x64xf32>, %k: tensor<?x3x128xf32>, %v: tensor<?x3x128xf32>) {
  // expected-error @+1 {{query head dimension is 64, expected 128}}
  %r = xfmr.attention %q, %k, %v {scale = 0.125 : f64, causal} : (tensor<?x9x64xf32>, tensor<?x3x128xf32>, tensor<?x3x128xf32>) -> tensor<?x9x64xf32>
  return
}


// -----

func.func @attention_v(%q: tensor<?x9x64xf32>, %k: tensor<?x3x64xf32>, %v: tensor<?x1x64xf32>) {
  // expected-error @+1 {{value dimension 1 is 1, expected 3}}
  %r = xfmr.attention %q, %k, %v {scale = 0.125 : f64} : (tensor<?x9x64xf32>, tensor<?x3x64xf32>, tensor<?x1x64xf32>) -> tensor<?x9x64xf32>
  return
}


// -----

func.func @fusion_kind(%x: tensor<4xf32>) {
  // expected-error @+1 {{fusion kind 'gelu', expected one of: residual_rms_norm, silu_mul, gelu_tanh_mul, rope_kv_write}}
  %r = xfmr.fusion_region "gelu" (%x) : (tensor<4xf32>) -> (tensor<4xf32>) {
  ^bb0(%a: tensor<4xf32>):
    xfmr.yield %a : tensor<4xf32>
  }
  return
}


// -----

func.func @fusion_yield(%x: tensor<4xf32>) {
  // expected-error @+1 {{body yields 0 values, expected 1}}
  %r = xfmr.fusion_region "silu_mul" (%x) : (tensor<4xf32>) -> (tensor<4xf32>) {
  ^bb0(%a: tensor<4xf32>):
    xfmr.yield
  }
  return
}


// -----

func.func @append_heads(%k: tensor<?x4x64xf32>, %v: tensor<?x4x64xf32>, %kp: !xfmr.kv_pool<16, 3, 64, f32>, %vp: !xfmr.kv_pool<16, 3, 64, f32>, %s: tensor<?xi32>) {
  // expected-error @+1 {{key kv heads is 4, expected 3}}
  xfmr.paged_kv_append %k, %v, %kp, %vp, %s : tensor<?x4x64xf32>, tensor<?x4x64xf32>, !xfmr.kv_pool<16, 3, 64, f32>, !xfmr.kv_pool<16, 3, 64, f32>, tensor<?xi32>
  return
}


// -----

func.func @append_slots(%k: tensor<5x3x64xf32>, %v: tensor<5x3x64xf32>, %kp: !xfmr.kv_pool<16, 3, 64, f32>, %vp: !xfmr.kv_pool<16, 3, 64, f32>, %s: tensor<4xi32>) {
  // expected-error @+1 {{slot_mapping length is 4, expected 5}}
  xfmr.paged_kv_append %k, %v, %kp, %vp, %s : tensor<5x3x64xf32>, tensor<5x3x64xf32>, !xfmr.kv_pool<16, 3, 64, f32>, !xfmr.kv_pool<16, 3, 64, f32>, tensor<4xi32>
  return
}


// -----

func.func @paged_attention_qstart(%q: tensor<?x9x64xf32>, %kp: !xfmr.kv_pool<16, 3, 64, f32>, %vp: !xfmr.kv_pool<16, 3, 64, f32>, %t: tensor<2x8xi32>, %qs: tensor<2xi32>, %kl: tensor<2xi32>) {
  // expected-error @+1 {{query_start length is 2, expected 3}}
  %r = xfmr.paged_attention %q, %kp, %vp, %t, %qs, %kl {scale = 0.125 : f64} : (tensor<?x9x64xf32>, !xfmr.kv_pool<16, 3, 64, f32>, !xfmr.kv_pool<16, 3, 64, f32>, tensor<2x8xi32>, tensor<2xi32>, tensor<2xi32>) -> tensor<?x9x64xf32>
  return
}


// -----

func.func @paged_attention_heads(%q: tensor<?x8x64xf32>, %kp: !xfmr.kv_pool<16, 3, 64, f32>, %vp: !xfmr.kv_pool<16, 3, 64, f32>, %t: tensor<?x?xi32>, %qs: tensor<?xi32>, %kl: tensor<?xi32>) {
  // expected-error @+1 {{query heads 8 is not a multiple of kv heads 3}}
  %r = xfmr.paged_attention %q, %kp, %vp, %t, %qs, %kl {scale = 0.125 : f64} : (tensor<?x8x64xf32>, !xfmr.kv_pool<16, 3, 64, f32>, !xfmr.kv_pool<16, 3, 64, f32>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32>) -> tensor<?x8x64xf32>
  return
}


// -----

// expected-error @+1 {{kv_pool dimensions must be positive, got page size 0, 3 kv heads, head dim 64}}
func.func @pool_dims(%kp: !xfmr.kv_pool<0, 3, 64, f32>) {
  return
}


// -----

func.func @gather_rows(%h: tensor<?x576xf32>, %qs: tensor<5xi32>) {
  // expected-error @+1 {{result rows is 3, expected 4}}
  %r = xfmr.gather_last_tokens %h, %qs : (tensor<?x576xf32>, tensor<5xi32>) -> tensor<3x576xf32>
  return
}


// -----

func.func @quantize_type(%w: tensor<8x32xf32>) {
  // expected-error @+1 {{result element type 'f32', expected !xfmr.quant}}
  %r, %s = xfmr.quantize %w {group = 0 : i64} : (tensor<8x32xf32>) -> (tensor<8x32xf32>, tensor<8xf32>)
  return
}


// -----

func.func @quantize_gguf(%w: tensor<8x32xf32>) {
  // expected-error @+1 {{quantization kind 'q8_0' is a GGUF block format, expected one of kiln's schemes: int8, int4, fp8e4m3}}
  %r, %s = xfmr.quantize %w {group = 32 : i64} : (tensor<8x32xf32>) -> (tensor<8x32x!xfmr.quant<"q8_0", 32>>, tensor<8x1xf32>)
  return
}


// -----

func.func @quantize_group(%w: tensor<8x64xf32>) {
  // expected-error @+1 {{group 32 does not match the quantization block 64 of '!xfmr.quant<"int4", 64>'}}
  %r, %s = xfmr.quantize %w {group = 32 : i64} : (tensor<8x64xf32>) -> (tensor<8x64x!xfmr.quant<"int4", 64>>, tensor<8x2xf32>)
  return
}


// -----

func.func @quantize_channel_scales(%w: tensor<8x32xf32>) {
  // expected-error @+1 {{scales has rank 2, expected 1 ('tensor<8x1xf32>')}}
  %r, %s = xfmr.quantize %w {group = 0 : i64} : (tensor<8x32xf32>) -> (tensor<8x32x!xfmr.quant<"int8", 0>>, tensor<8x1xf32>)
  return
}


// -----

func.func @quantize_group_scales(%w: tensor<8x128xf32>) {
  // expected-error @+1 {{scales groups is 4, expected 2}}
  %r, %s = xfmr.quantize %w {group = 64 : i64} : (tensor<8x128xf32>) -> (tensor<8x128x!xfmr.quant<"int4", 64>>, tensor<8x4xf32>)
  return
}


// -----

func.func @quantize_ragged_groups(%w: tensor<8x96xf32>) {
  // expected-error @+1 {{last dimension 96 is not a multiple of the block 64}}
  %r, %s = xfmr.quantize %w {group = 64 : i64} : (tensor<8x96xf32>) -> (tensor<8x96x!xfmr.quant<"int4", 64>>, tensor<8x1xf32>)
  return
}


// -----

func.func @quantize_given_scales(%k: tensor<?x3x64xf32>, %ks: tensor<?x3xf32>) {
  // expected-error @+1 {{scales result has type 'tensor<?x3xf16>', expected the given scales' type 'tensor<?x3xf32>'}}
  %r, %s = xfmr.quantize %k scales %ks {group = 0 : i64} : (tensor<?x3x64xf32>, tensor<?x3xf32>) -> (tensor<?x3x64x!xfmr.quant<"int8", 0>>, tensor<?x3xf16>)
  return
}


// -----

func.func @dequantize_scales(%w: tensor<8x32x!xfmr.quant<"int8", 0>>) {
  // expected-error @+1 {{quantization kind 'int8' keeps its scales apart, expected a scales operand}}
  %r = xfmr.dequantize %w : (tensor<8x32x!xfmr.quant<"int8", 0>>) -> tensor<8x32xf32>
  return
}


// -----

func.func @dequantize_scale_rows(%w: tensor<8x32x!xfmr.quant<"int8", 0>>, %s: tensor<4xf32>) {
  // expected-error @+1 {{scales dimension 0 is 4, expected 8}}
  %r = xfmr.dequantize %w, %s : (tensor<8x32x!xfmr.quant<"int8", 0>>, tensor<4xf32>) -> tensor<8x32xf32>
  return
}


// -----

func.func @qlinear_gguf_scales(%x: tensor<?x32xf32>, %w: tensor<8x32x!xfmr.quant<"q4_0", 32>>, %s: tensor<8xf32>) {
  // expected-error @+1 {{quantization kind 'q4_0' stores scales in its blocks, expected no scales operand}}
  %r = xfmr.quantized_linear %x, %w scales %s : (tensor<?x32xf32>, tensor<8x32x!xfmr.quant<"q4_0", 32>>, tensor<8xf32>) -> tensor<?x8xf32>
  return
}


// -----

func.func @qlinear_float(%x: tensor<?x32xf32>, %w: tensor<8x32xf32>) {
  // expected-error @+1 {{weight element type 'f32', expected !xfmr.quant}}
  %r = xfmr.quantized_linear %x, %w : (tensor<?x32xf32>, tensor<8x32xf32>) -> tensor<?x8xf32>
  return
}


// -----

func.func @qlinear_group_scales(%x: tensor<?x128xf32>, %w: tensor<8x128x!xfmr.quant<"int4", 32>>, %s: tensor<8xf32>) {
  // expected-error @+1 {{scales has rank 1, expected 2 ('tensor<8xf32>')}}
  %r = xfmr.quantized_linear %x, %w scales %s : (tensor<?x128xf32>, tensor<8x128x!xfmr.quant<"int4", 32>>, tensor<8xf32>) -> tensor<?x8xf32>
  return
}


// -----

func.func @tree_positions_base(%p: tensor<?xi32>, %b: tensor<3xi32>, %qs: tensor<3xi32>) {
  // expected-error @+1 {{base length is 3, expected 2}}
  %r = xfmr.tree_positions %p, %b, %qs : (tensor<?xi32>, tensor<3xi32>, tensor<3xi32>) -> tensor<?xi32>
  return
}


// -----

func.func @tree_positions_length(%p: tensor<6xi32>, %b: tensor<?xi32>, %qs: tensor<?xi32>) {
  // expected-error @+1 {{result length is 5, expected 6}}
  %r = xfmr.tree_positions %p, %b, %qs : (tensor<6xi32>, tensor<?xi32>, tensor<?xi32>) -> tensor<5xi32>
  return
}


// -----

func.func @tree_mask_rows(%p: tensor<6xi32>, %qs: tensor<?xi32>) {
  // expected-error @+1 {{result rows is 5, expected 6}}
  %r = xfmr.tree_mask %p, %qs : (tensor<6xi32>, tensor<?xi32>) -> tensor<5x6xi8>
  return
}


// -----

func.func @tree_mask_parents(%p: tensor<?x2xi32>, %qs: tensor<?xi32>) {
  // expected-error @+1 {{parents has rank 2, expected 1 ('tensor<?x2xi32>')}}
  %r = xfmr.tree_mask %p, %qs : (tensor<?x2xi32>, tensor<?xi32>) -> tensor<?x?xi8>
  return
}


// -----

func.func @accept_mode(%l: tensor<?x100xf32>, %t: tensor<?xi32>, %p: tensor<?xi32>, %qs: tensor<?xi32>) {
  // expected-error @+1 {{mode 'typical', expected 'greedy' or 'rejection'}}
  %r, %n = xfmr.accept %l, %t, %p, %qs {mode = "typical"} : (tensor<?x100xf32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>) -> (tensor<?x5xi32>, tensor<?xi32>)
  return
}


// -----

func.func @accept_probs(%l: tensor<?x100xf32>, %t: tensor<?xi32>, %p: tensor<?xi32>, %qs: tensor<?xi32>) {
  // expected-error @+1 {{rejection mode needs draft_probs, expected a [nodes, vocab] operand}}
  %r, %n = xfmr.accept %l, %t, %p, %qs {mode = "rejection"} : (tensor<?x100xf32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>) -> (tensor<?x5xi32>, tensor<?xi32>)
  return
}


// -----

func.func @accept_probs_vocab(%l: tensor<?x100xf32>, %t: tensor<?xi32>, %p: tensor<?xi32>, %qs: tensor<?xi32>, %q: tensor<?x99xf32>) {
  // expected-error @+1 {{draft_probs dimension 1 is 99, expected 100}}
  %r, %n = xfmr.accept %l, %t, %p, %qs draft_probs %q {mode = "rejection"} : (tensor<?x100xf32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?x99xf32>) -> (tensor<?x5xi32>, tensor<?xi32>)
  return
}


// -----

func.func @accept_rows(%l: tensor<?x100xf32>, %t: tensor<?xi32>, %p: tensor<?xi32>, %qs: tensor<3xi32>) {
  // expected-error @+1 {{accepted rows is 3, expected 2}}
  %r, %n = xfmr.accept %l, %t, %p, %qs {mode = "greedy"} : (tensor<?x100xf32>, tensor<?xi32>, tensor<?xi32>, tensor<3xi32>) -> (tensor<3x5xi32>, tensor<2xi32>)
  return
}


// -----

func.func @gemm_k(%x: tensor<?x32xf32>, %w: tensor<8x16xf32>) {
  // expected-error @+1 {{weight in-features 16 do not match input last dimension 32}}
  %r = xfmr.gemm %x, %w : (tensor<?x32xf32>, tensor<8x16xf32>) -> tensor<?x8xf32>
  return
}


// -----

func.func @rope_style() {
  // expected-error @+1 {{rope style 'neox', expected 'half' or 'interleaved'}}
  %r = xfmr.weight "w" {r = #xfmr.rope<theta = 10000.0, style = "neox", scaling = "none", factor = 1.0, low_freq_factor = 1.0, high_freq_factor = 1.0, original_max_position = 2048>} : tensor<4xf32>
  return
}


// -----

func.func @rope_llama3() {
  // expected-error @+1 {{llama3 rope scaling needs high_freq_factor (1.000000e+00) > low_freq_factor (4.000000e+00)}}
  %r = xfmr.weight "w" {r = #xfmr.rope<theta = 10000.0, style = "half", scaling = "llama3", factor = 8.0, low_freq_factor = 4.0, high_freq_factor = 1.0, original_max_position = 2048>} : tensor<4xf32>
  return
}

// -----

func.func @split_sizes(%x: tensor<?x768xf32>) {
  // expected-error @+1 {{sum of split sizes is 700, expected 768}}
  %a, %b = xfmr.split %x {axis = 1 : i64, sizes = array<i64: 384, 316>} : tensor<?x768xf32> -> tensor<?x384xf32>, tensor<?x316xf32>
  return
}

// -----

func.func @split_result(%x: tensor<?x768xf32>) {
  // expected-error @+1 {{result 1 dimension 1 is 300, expected 384}}
  %a, %b = xfmr.split %x {axis = 1 : i64, sizes = array<i64: 384, 384>} : tensor<?x768xf32> -> tensor<?x384xf32>, tensor<?x300xf32>
  return
}

// -----

func.func @add_narrowing(%a: tensor<?x64xf32>, %b: tensor<?x64xbf16>) {
  // expected-error @+1 {{'xfmr.add' op result element type 'bf16', expected 'f32' (the wider operand element type)}}
  %r = "xfmr.add"(%a, %b) : (tensor<?x64xf32>, tensor<?x64xbf16>) -> tensor<?x64xbf16>
  return
}

// -----

func.func @add_same_width(%a: tensor<?x64xf16>, %b: tensor<?x64xbf16>) {
  // expected-error @+1 {{'xfmr.add' op operand element types 'f16' and 'bf16' differ, expected equal types or floats of different widths}}
  %r = "xfmr.add"(%a, %b) : (tensor<?x64xf16>, tensor<?x64xbf16>) -> tensor<?x64xf16>
  return
}

// -----

func.func @add_shapes(%a: tensor<?x64xf32>, %b: tensor<?x32xbf16>) {
  // expected-error @+1 {{'xfmr.add' op operand and result shapes differ: 'tensor<?x64xf32>', 'tensor<?x32xbf16>' -> 'tensor<?x64xf32>', expected one shape}}
  %r = "xfmr.add"(%a, %b) : (tensor<?x64xf32>, tensor<?x32xbf16>) -> tensor<?x64xf32>
  return
}

// -----

func.func @mul_shapes(%a: tensor<4x64xf32>, %b: tensor<4x32xf32>) {
  // expected-error @+1 {{'xfmr.mul' op requires the same type for all operands and results}}
  %r = "xfmr.mul"(%a, %b) : (tensor<4x64xf32>, tensor<4x32xf32>) -> tensor<4x64xf32>
  return
}

// -----

func.func @silu_result(%a: tensor<4x64xf32>) {
  // expected-error @+1 {{'xfmr.silu' op requires the same type for all operands and results}}
  %r = "xfmr.silu"(%a) : (tensor<4x64xf32>) -> tensor<4x64xbf16>
  return
}

// -----

func.func @scale_result(%a: tensor<4x64xf32>) {
  // expected-error @+1 {{'xfmr.scale' op requires the same type for all operands and results}}
  %r = "xfmr.scale"(%a) {factor = 2.0 : f64} : (tensor<4x64xf32>) -> tensor<4x32xf32>
  return
}

// -----

func.func @kernel_kind(%a: tensor<4x64xf32>) {
  // expected-error @+1 {{kernel kind 'gelu' is not implemented by the backends, expected one of: embedding, rms_norm, residual_rms_norm, rope_kv_append, paged_attention, silu_mul, add, mul, silu, split, gather_last_tokens, tree_positions, tree_mask, accept, quantize, dequantize}}
  %r = xfmr.kernel "gelu" (%a) {params = {}} : (tensor<4x64xf32>) -> tensor<4x64xf32>
  return
}

// -----

func.func @weight_offset_shape(%w: tensor<64xbf16>) {
  // expected-error @+1 {{'xfmr.weight_offset' op result}}
  %r = xfmr.weight_offset %w {offset = 1.0 : f64} : tensor<64xbf16> -> tensor<32xf32>
  return
}

// -----

func.func @weight_offset_type(%w: tensor<64xi8>) {
  // expected-error @+1 {{'xfmr.weight_offset' op input element type 'i8', expected a float type}}
  %r = xfmr.weight_offset %w {offset = 1.0 : f64} : tensor<64xi8> -> tensor<64xf32>
  return
}

// -----

func.func @embed_scale(%t: tensor<?xi32>, %e: tensor<100x64xf32>) {
  // expected-error @+1 {{'xfmr.embed' op scale}}
  %r = xfmr.embed %t, %e {scale = -2.0 : f64} : (tensor<?xi32>, tensor<100x64xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @stack_mixed(%a: tensor<96x64xf32>, %b: tensor<64x64xf32>) {
  // expected-error @+1 {{'xfmr.stack' op input 1 is 'tensor<64x64xf32>', expected input 0's type 'tensor<96x64xf32>'}}
  %r = xfmr.stack %a, %b : (tensor<96x64xf32>, tensor<64x64xf32>) -> tensor<2x96x64xf32>
  return
}

// -----

func.func @moe_router_top_k(%l: tensor<?x4xf32>) {
  // expected-error @+1 {{'xfmr.moe_router' op top_k 5 is out of range, expected 1..4}}
  %w, %e = xfmr.moe_router %l {top_k = 5 : i64, normalize = true} : tensor<?x4xf32> -> tensor<?x5xf32>, tensor<?x5xi32>
  return
}

// -----

func.func @moe_router_columns(%l: tensor<?x4xf32>) {
  // expected-error @+1 {{'xfmr.moe_router' op experts columns is 3, expected 2}}
  %w, %e = xfmr.moe_router %l {top_k = 2 : i64, normalize = false} : tensor<?x4xf32> -> tensor<?x2xf32>, tensor<?x3xi32>
  return
}

// -----

func.func @moe_ffn_down(%x: tensor<?x64xf32>, %w: tensor<?x2xf32>, %e: tensor<?x2xi32>, %g: tensor<4x96x64xf32>, %d: tensor<4x64x32xf32>) {
  // expected-error @+1 {{'xfmr.moe_ffn' op down ffn is 32, expected 96}}
  %y = xfmr.moe_ffn %x, %w, %e, %g, %g, %d : (tensor<?x64xf32>, tensor<?x2xf32>, tensor<?x2xi32>, tensor<4x96x64xf32>, tensor<4x96x64xf32>, tensor<4x64x32xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @sparsify_pattern(%w: tensor<64x64xf32>) {
  // expected-error @+1 {{'xfmr.sparsify' op pattern '4:8', expected '2:4'}}
  %s = xfmr.sparsify %w {pattern = "4:8", method = "magnitude"} : (tensor<64x64xf32>) -> tensor<64x64x!xfmr.quant<"sp24", 0>>
  return
}

// -----

func.func @sparsify_ragged(%w: tensor<64x96xf32>) {
  // expected-error @+1 {{'xfmr.sparsify' op in-features 96 are not a multiple of 64}}
  %s = xfmr.sparsify %w {pattern = "2:4", method = "magnitude"} : (tensor<64x96xf32>) -> tensor<64x96x!xfmr.quant<"sp24", 0>>
  return
}

// -----

func.func @sparsify_result(%w: tensor<64x64xf32>) {
  // expected-error @+1 {{'xfmr.sparsify' op result element type '!xfmr.quant<"int8sp24", 0>', expected !xfmr.quant<"sp24", 0>}}
  %s = xfmr.sparsify %w {pattern = "2:4", method = "sparsegpt"} : (tensor<64x64xf32>) -> tensor<64x64x!xfmr.quant<"int8sp24", 0>>
  return
}

// -----

func.func @quantize_sparse_from_dense(%w: tensor<64x64xf32>) {
  // expected-error @+1 {{expected a float input for int8, int4, fp8e4m3 and an sp24 input (from xfmr.sparsify) for int8sp24, int4sp24}}
  %q, %s = xfmr.quantize %w {group = 0 : i64} : (tensor<64x64xf32>) -> (tensor<64x64x!xfmr.quant<"int8sp24", 0>>, tensor<64xf32>)
  return
}

// -----

// expected-error @+1 {{quantization kind 'int4sp24' has block size 32, expected a positive multiple of 64}}
func.func @int4sp24_block(%w: tensor<64x64x!xfmr.quant<"int4sp24", 32>>) {
  return
}
