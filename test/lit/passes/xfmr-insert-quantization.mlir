// RUN: kiln-opt %s -split-input-file --xfmr-insert-quantization=weights=int8 | kiln-opt -split-input-file | FileCheck %s --check-prefix=INT8
// RUN: kiln-opt %s -split-input-file --xfmr-insert-quantization="weights=int4 group-size=64" -verify-diagnostics | kiln-opt -split-input-file | FileCheck %s --check-prefix=INT4
// RUN: kiln-opt %s -split-input-file --xfmr-insert-quantization=weights=fp8 | kiln-opt -split-input-file | FileCheck %s --check-prefix=FP8
// RUN: kiln-opt %s -split-input-file --xfmr-insert-quantization | kiln-opt -split-input-file | FileCheck %s --check-prefix=NONE
// RUN: kiln-opt %s -split-input-file --xfmr-insert-quantization=kv=int8 | kiln-opt -split-input-file | FileCheck %s --check-prefix=KVI8
// RUN: kiln-opt %s -split-input-file --xfmr-insert-quantization=kv=fp8 | kiln-opt -split-input-file | FileCheck %s --check-prefix=KVF8
// RUN: kiln-opt %s -split-input-file --xfmr-insert-quantization=kv=bf16 | kiln-opt -split-input-file | FileCheck %s --check-prefix=KVBF16
// RUN: kiln-opt %s -split-input-file --xfmr-insert-quantization=kv=f16 | kiln-opt -split-input-file | FileCheck %s --check-prefix=KVF16
// RUN: kiln-opt %s -split-input-file --xfmr-insert-quantization="weights=int8 kv=int8" | kiln-opt -split-input-file --xfmr-insert-quantization="weights=int8 kv=int8" | kiln-opt -split-input-file | FileCheck %s --check-prefix=TWICE
// RUN: not kiln-opt %s -split-input-file --xfmr-insert-quantization=weights=int3 2>&1 | FileCheck %s --check-prefix=BADW
// RUN: not kiln-opt %s -split-input-file --xfmr-insert-quantization=kv=int4 2>&1 | FileCheck %s --check-prefix=BADKV
// RUN: not kiln-opt %s -split-input-file --xfmr-insert-quantization="weights=int4 group-size=48" 2>&1 | FileCheck %s --check-prefix=BADG

// BADW: invalid value 'int3' for weights, expected one of: none, int8, int4, fp8
// BADKV: invalid value 'int4' for kv, expected one of: none, f16, bf16, int8, fp8
// BADG: invalid value '48' for group-size, expected a positive multiple of 32 (32, 64, 128, ...)

// A paged one-layer model with float weights: hidden 64, 4 heads, 2 kv
// heads, head dim 16, vocab 128, merged QKV and gate/up, tied embeddings.

// INT8-LABEL: func.func @forward
// INT8-SAME: !xfmr.kv_pool<16, 2, 16, f32> {xfmr.name = "k_pool.0"}
// INT8: %[[TABLE:.*]] = xfmr.weight "token_embd.weight" : tensor<128x64xf32>
// INT8: xfmr.embed %{{.*}}, %[[TABLE]] : (tensor<?xi32>, tensor<128x64xf32>)
// INT8: %[[QKV:.*]] = xfmr.concat
// INT8: %[[Q:.*]], %[[S:.*]] = xfmr.quantize %[[QKV]] {group = 0 : i64} : (tensor<128x64xf32>) -> (tensor<128x64x!xfmr.quant<"int8", 0>>, tensor<128xf32>)
// INT8: xfmr.quantized_linear %{{.*}}, %[[Q]] scales %[[S]] : (tensor<?x64xf32>, tensor<128x64x!xfmr.quant<"int8", 0>>, tensor<128xf32>) -> tensor<?x128xf32>
// INT8: xfmr.quantize %{{.*}} {group = 0 : i64} : (tensor<64x64xf32>) -> (tensor<64x64x!xfmr.quant<"int8", 0>>, tensor<64xf32>)
// INT8: xfmr.quantized_linear
// INT8: xfmr.quantize %{{.*}} {group = 0 : i64} : (tensor<256x64xf32>)
// INT8: xfmr.quantized_linear
// INT8: xfmr.quantize %{{.*}} {group = 0 : i64} : (tensor<64x128xf32>)
// INT8: xfmr.quantized_linear %{{.*}} bias %{{.*}} : (tensor<?x128xf32>, tensor<64x128x!xfmr.quant<"int8", 0>>, tensor<64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
// INT8-NOT: xfmr.linear
// INT8: xfmr.logits %{{.*}}, %[[TABLE]] : (tensor<?x64xf32>, tensor<128x64xf32>) -> tensor<?x128xf32>

// INT4-LABEL: func.func @forward
// INT4: %[[QKV:.*]] = xfmr.concat
// INT4: %[[Q:.*]], %[[S:.*]] = xfmr.quantize %[[QKV]] {group = 64 : i64} : (tensor<128x64xf32>) -> (tensor<128x64x!xfmr.quant<"int4", 64>>, tensor<128x1xf32>)
// INT4: xfmr.quantized_linear %{{.*}}, %[[Q]] scales %[[S]]
// INT4: xfmr.quantize %{{.*}} {group = 64 : i64} : (tensor<64x128xf32>) -> (tensor<64x128x!xfmr.quant<"int4", 64>>, tensor<64x2xf32>)
// INT4-NOT: xfmr.linear
// INT4: xfmr.logits

// FP8-LABEL: func.func @forward
// FP8: xfmr.quantize %{{.*}} {group = 0 : i64} : (tensor<128x64xf32>) -> (tensor<128x64x!xfmr.quant<"fp8e4m3", 0>>, tensor<128xf32>)
// FP8: xfmr.quantized_linear {{.*}} : (tensor<?x64xf32>, tensor<128x64x!xfmr.quant<"fp8e4m3", 0>>, tensor<128xf32>)
// FP8-NOT: xfmr.linear
// FP8: xfmr.logits

// weights=none leaves float linears alone.
// NONE-LABEL: func.func @forward
// NONE-NOT: xfmr.quantize %
// NONE-NOT: xfmr.quantized_linear
// NONE: xfmr.linear
// NONE: xfmr.logits

// KVI8-LABEL: func.func @forward
// KVI8-SAME: %{{.*}}: !xfmr.kv_pool<16, 2, 16, i8> {xfmr.kv_scales = "token_head", xfmr.name = "k_pool.0"}
// KVI8-SAME: %{{.*}}: !xfmr.kv_pool<16, 2, 16, i8> {xfmr.kv_scales = "token_head", xfmr.name = "v_pool.0"}
// KVI8: xfmr.linear
// KVI8: xfmr.paged_kv_append {{.*}} : tensor<?x2x16xf32>, tensor<?x2x16xf32>, <16, 2, 16, i8>, <16, 2, 16, i8>, tensor<?xi32>
// KVI8: xfmr.paged_attention {{.*}} : (tensor<?x4x16xf32>, !xfmr.kv_pool<16, 2, 16, i8>, !xfmr.kv_pool<16, 2, 16, i8>,

// KVF8-LABEL: func.func @forward
// KVF8-SAME: !xfmr.kv_pool<16, 2, 16, f8E4M3FN> {xfmr.kv_scales = "token_head", xfmr.name = "k_pool.0"}
// KVF8: xfmr.paged_attention {{.*}} !xfmr.kv_pool<16, 2, 16, f8E4M3FN>, !xfmr.kv_pool<16, 2, 16, f8E4M3FN>

// bf16 needs no scales.
// KVBF16-LABEL: func.func @forward
// KVBF16-SAME: !xfmr.kv_pool<16, 2, 16, bf16> {xfmr.name = "k_pool.0"}
// KVBF16: xfmr.paged_attention {{.*}} !xfmr.kv_pool<16, 2, 16, bf16>, !xfmr.kv_pool<16, 2, 16, bf16>
// f16 (llama.cpp's default KV type) likewise: a float type, no scales.
// KVF16-LABEL: func.func @forward
// KVF16-SAME: !xfmr.kv_pool<16, 2, 16, f16> {xfmr.name = "k_pool.0"}
// KVF16-NOT: xfmr.kv_scales
// KVF16: xfmr.paged_attention {{.*}} !xfmr.kv_pool<16, 2, 16, f16>, !xfmr.kv_pool<16, 2, 16, f16>

// Running the pass again changes nothing.
// TWICE-LABEL: func.func @forward
// TWICE-SAME: !xfmr.kv_pool<16, 2, 16, i8> {xfmr.kv_scales = "token_head", xfmr.name = "k_pool.0"}
// TWICE-COUNT-4: xfmr.quantize %
// TWICE-NOT: xfmr.quantize %
// TWICE: xfmr.logits
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
  %wqkv = xfmr.concat %wq, %wk, %wv {axis = 0 : i64} : (tensor<64x64xf32>, tensor<32x64xf32>, tensor<32x64xf32>) -> tensor<128x64xf32>
  %qkv = xfmr.linear %h, %wqkv : (tensor<?x64xf32>, tensor<128x64xf32>) -> tensor<?x128xf32>
  %q, %k, %v = xfmr.split %qkv {axis = 1 : i64, sizes = array<i64: 64, 32, 32>} : tensor<?x128xf32> -> tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>
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
  %r = xfmr.add %x, %a : tensor<?x64xf32>
  %fw = xfmr.weight "blk.0.ffn_norm.weight" : tensor<64xf32>
  %h2 = xfmr.rms_norm %r, %fw {epsilon = 1.0e-05 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  %wg = xfmr.weight "blk.0.ffn_gate.weight" : tensor<128x64xf32>
  %wu = xfmr.weight "blk.0.ffn_up.weight" : tensor<128x64xf32>
  %wgu = xfmr.concat %wg, %wu {axis = 0 : i64} : (tensor<128x64xf32>, tensor<128x64xf32>) -> tensor<256x64xf32>
  %gu = xfmr.linear %h2, %wgu : (tensor<?x64xf32>, tensor<256x64xf32>) -> tensor<?x256xf32>
  %g, %u = xfmr.split %gu {axis = 1 : i64, sizes = array<i64: 128, 128>} : tensor<?x256xf32> -> tensor<?x128xf32>, tensor<?x128xf32>
  %m = xfmr.fusion_region "silu_mul" (%g, %u) : (tensor<?x128xf32>, tensor<?x128xf32>) -> (tensor<?x128xf32>) {
  ^bb0(%a0: tensor<?x128xf32>, %a1: tensor<?x128xf32>):
    %s = xfmr.silu %a0 : tensor<?x128xf32>
    %p = xfmr.mul %s, %a1 : tensor<?x128xf32>
    xfmr.yield %p : tensor<?x128xf32>
  }
  %wd = xfmr.weight "blk.0.ffn_down.weight" : tensor<64x128xf32>
  %bd = xfmr.weight "blk.0.ffn_down.bias" : tensor<64xf32>
  %d = xfmr.linear %m, %wd, %bd : (tensor<?x128xf32>, tensor<64x128xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  %r2 = xfmr.add %r, %d : tensor<?x64xf32>
  %last = xfmr.gather_last_tokens %r2, %qstart : (tensor<?x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
  %onw = xfmr.weight "output_norm.weight" : tensor<64xf32>
  %hn = xfmr.rms_norm %last, %onw {epsilon = 1.0e-05 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  %l = xfmr.logits %hn, %table : (tensor<?x64xf32>, tensor<128x64xf32>) -> tensor<?x128xf32>
  return %l : tensor<?x128xf32>
}

// -----

// GGUF block weights keep their form under every setting: the linears become
// quantized_linear without scales, no quantize is added, the q8_0 embedding
// and lm_head stay as they are.

// INT8-LABEL: func.func @gguf
// INT8-NOT: xfmr.quantize %
// INT8: %[[QKV:.*]] = xfmr.concat {{.*}} -> tensor<128x64x!xfmr.quant<"q4_1", 32>>
// INT8: xfmr.quantized_linear %{{.*}}, %[[QKV]] : (tensor<?x64xf32>, tensor<128x64x!xfmr.quant<"q4_1", 32>>) -> tensor<?x128xf32>
// INT8: xfmr.quantized_linear %{{.*}}, %{{.*}} : (tensor<?x64xf32>, tensor<64x64x!xfmr.quant<"q4_1", 32>>) -> tensor<?x64xf32>
// INT8-NOT: xfmr.quantize %
// INT8: xfmr.logits {{.*}} : (tensor<?x64xf32>, tensor<128x64x!xfmr.quant<"q8_0", 32>>)

// INT4-LABEL: func.func @gguf
// INT4-NOT: xfmr.quantize %
// INT4: xfmr.quantized_linear %{{.*}}, %{{.*}} : (tensor<?x64xf32>, tensor<128x64x!xfmr.quant<"q4_1", 32>>)
// INT4-NOT: xfmr.quantize %

// FP8-LABEL: func.func @gguf
// FP8-NOT: xfmr.quantize %
// FP8: xfmr.quantized_linear %{{.*}}, %{{.*}} : (tensor<?x64xf32>, tensor<128x64x!xfmr.quant<"q4_1", 32>>)

// weights=none: a linear on a quantized weight is still a quantized linear.
// NONE-LABEL: func.func @gguf
// NONE-NOT: xfmr.quantize %
// NONE: xfmr.embed {{.*}} tensor<128x64x!xfmr.quant<"q8_0", 32>>
// NONE: xfmr.quantized_linear %{{.*}}, %{{.*}} : (tensor<?x64xf32>, tensor<128x64x!xfmr.quant<"q4_1", 32>>)
// NONE: xfmr.quantized_linear %{{.*}}, %{{.*}} : (tensor<?x64xf32>, tensor<64x64x!xfmr.quant<"q4_1", 32>>)
// NONE-NOT: xfmr.linear
// NONE: xfmr.logits
func.func @gguf(%tokens: tensor<?xi32>) -> tensor<?x128xf32> {
  %table = xfmr.weight "token_embd.weight" : tensor<128x64x!xfmr.quant<"q8_0", 32>>
  %x = xfmr.embed %tokens, %table : (tensor<?xi32>, tensor<128x64x!xfmr.quant<"q8_0", 32>>) -> tensor<?x64xf32>
  %wq = xfmr.weight "blk.0.attn_q.weight" : tensor<64x64x!xfmr.quant<"q4_1", 32>>
  %wk = xfmr.weight "blk.0.attn_k.weight" : tensor<32x64x!xfmr.quant<"q4_1", 32>>
  %wv = xfmr.weight "blk.0.attn_v.weight" : tensor<32x64x!xfmr.quant<"q4_1", 32>>
  %wqkv = xfmr.concat %wq, %wk, %wv {axis = 0 : i64} : (tensor<64x64x!xfmr.quant<"q4_1", 32>>, tensor<32x64x!xfmr.quant<"q4_1", 32>>, tensor<32x64x!xfmr.quant<"q4_1", 32>>) -> tensor<128x64x!xfmr.quant<"q4_1", 32>>
  %qkv = xfmr.linear %x, %wqkv : (tensor<?x64xf32>, tensor<128x64x!xfmr.quant<"q4_1", 32>>) -> tensor<?x128xf32>
  %q, %k, %v = xfmr.split %qkv {axis = 1 : i64, sizes = array<i64: 64, 32, 32>} : tensor<?x128xf32> -> tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>
  %wo = xfmr.weight "blk.0.attn_output.weight" : tensor<64x64x!xfmr.quant<"q4_1", 32>>
  %a = xfmr.linear %q, %wo : (tensor<?x64xf32>, tensor<64x64x!xfmr.quant<"q4_1", 32>>) -> tensor<?x64xf32>
  %l = xfmr.logits %a, %table : (tensor<?x64xf32>, tensor<128x64x!xfmr.quant<"q8_0", 32>>) -> tensor<?x128xf32>
  return %l : tensor<?x128xf32>
}

// -----

// int4 groups must tile the in-features: 96 is not a multiple of 64, so that
// linear stays float (with a warning); the 128-wide one is quantized.

// INT4-LABEL: func.func @ragged_groups
// INT4: xfmr.linear %{{.*}}, %{{.*}} : (tensor<?x96xf32>, tensor<64x96xf32>) -> tensor<?x64xf32>
// INT4: xfmr.quantize %{{.*}} {group = 64 : i64} : (tensor<32x128xf32>) -> (tensor<32x128x!xfmr.quant<"int4", 64>>, tensor<32x2xf32>)
// INT4: xfmr.quantized_linear

// Per-channel schemes have no groups.
// INT8-LABEL: func.func @ragged_groups
// INT8-COUNT-2: xfmr.quantized_linear
func.func @ragged_groups(%x: tensor<?x96xf32>, %y: tensor<?x128xf32>) -> (tensor<?x64xf32>, tensor<?x32xf32>) {
  %w = xfmr.weight "w96" : tensor<64x96xf32>
  // expected-warning @+1 {{in-features 96 are not a multiple of group size 64; this linear stays in 'f32'}}
  %a = xfmr.linear %x, %w : (tensor<?x96xf32>, tensor<64x96xf32>) -> tensor<?x64xf32>
  %w2 = xfmr.weight "w128" : tensor<32x128xf32>
  %b = xfmr.linear %y, %w2 : (tensor<?x128xf32>, tensor<32x128xf32>) -> tensor<?x32xf32>
  return %a, %b : tensor<?x64xf32>, tensor<?x32xf32>
}

// -----

// A weight used by two linears is quantized once; a weight that is a function
// argument (not known at load time) is left alone.

// INT8-LABEL: func.func @shared
// INT8-COUNT-1: xfmr.quantize %
// INT8-NOT: xfmr.quantize %
// INT8: xfmr.quantized_linear
// INT8: xfmr.quantized_linear
// INT8: xfmr.linear %{{.*}}, %arg2
func.func @shared(%x: tensor<?x64xf32>, %y: tensor<?x64xf32>, %w_runtime: tensor<32x64xf32>) -> (tensor<?x32xf32>, tensor<?x32xf32>, tensor<?x32xf32>) {
  %w = xfmr.weight "w" : tensor<32x64xf32>
  %a = xfmr.linear %x, %w : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
  %b = xfmr.linear %y, %w : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
  %c = xfmr.linear %x, %w_runtime : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
  return %a, %b, %c : tensor<?x32xf32>, tensor<?x32xf32>, tensor<?x32xf32>
}

// -----

// KV pools passed into a fusion region change type inside it too.

// KVI8-LABEL: func.func @pool_in_region
// KVI8: xfmr.fusion_region "rope_kv_write"({{.*}}) : ({{.*}}!xfmr.kv_pool<16, 2, 16, i8>, !xfmr.kv_pool<16, 2, 16, i8>, tensor<?xi32>) -> ()
// KVI8: ^bb0({{.*}}: !xfmr.kv_pool<16, 2, 16, i8>, {{.*}}: !xfmr.kv_pool<16, 2, 16, i8>,
func.func @pool_in_region(%k: tensor<?x2x16xf32>, %v: tensor<?x2x16xf32>,
                          %k_pool: !xfmr.kv_pool<16, 2, 16, f32> {xfmr.name = "k_pool.0"},
                          %v_pool: !xfmr.kv_pool<16, 2, 16, f32> {xfmr.name = "v_pool.0"},
                          %slots: tensor<?xi32>) {
  xfmr.fusion_region "rope_kv_write" (%k, %v, %k_pool, %v_pool, %slots) : (tensor<?x2x16xf32>, tensor<?x2x16xf32>, !xfmr.kv_pool<16, 2, 16, f32>, !xfmr.kv_pool<16, 2, 16, f32>, tensor<?xi32>) -> () {
  ^bb0(%a: tensor<?x2x16xf32>, %b: tensor<?x2x16xf32>, %kp: !xfmr.kv_pool<16, 2, 16, f32>, %vp: !xfmr.kv_pool<16, 2, 16, f32>, %s: tensor<?xi32>):
    xfmr.paged_kv_append %a, %b, %kp, %vp, %s : tensor<?x2x16xf32>, tensor<?x2x16xf32>, !xfmr.kv_pool<16, 2, 16, f32>, !xfmr.kv_pool<16, 2, 16, f32>, tensor<?xi32>
    xfmr.yield
  }
  return
}
