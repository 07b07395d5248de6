// RUN: kiln-compile %models/tiny-qwen2 --emit=xfmr | kiln-opt --xfmr-fuse-attention --xfmr-page-kv-cache --xfmr-lower-to-kernels | kiln-opt | FileCheck %s
// RUN: kiln-opt %s -split-input-file --xfmr-lower-to-kernels -verify-diagnostics
// RUN: kiln-compile %models/tiny-llama --emit=xfmr --activation-type=bf16 | kiln-opt --xfmr-fuse-attention --xfmr-page-kv-cache --xfmr-lower-to-kernels=activation-type=bf16 | kiln-opt | FileCheck %s --check-prefix=MIXED
// RUN: kiln-compile %kiln_src/test/fixtures/tiny-qwen3-moe --emit=xfmr | kiln-opt --xfmr-fuse-attention --xfmr-page-kv-cache --xfmr-lower-to-kernels | kiln-opt | FileCheck %s --check-prefix=MOE

// bf16 activations with an f32 residual stream: params name the element
// type of each operand or result that is not bf16.
// MIXED-LABEL: func.func @forward
// MIXED: %[[X0:.*]] = xfmr.kernel "embedding"({{.*}}) {params = {hidden = 64 : i64, out_type = "f32", table_type = "bf16"}} : {{.*}} -> tensor<?x64xf32>
// MIXED: xfmr.kernel "rms_norm"(%[[X0]], {{.*}}) {params = {epsilon = 1.000000e-05 : f64, hidden = 64 : i64, x_type = "f32"}} : (tensor<?x64xf32>, tensor<64xbf16>) -> tensor<?x64xbf16>
// MIXED: xfmr.kernel "residual_rms_norm"(%[[X0]], {{.*}}) {params = {epsilon = 1.000000e-05 : f64, hidden = 64 : i64, sum_type = "f32", writes_sum = true, x_type = "f32"}} : (tensor<?x64xf32>, tensor<?x64xbf16>, tensor<64xbf16>) -> (tensor<?x64xf32>, tensor<?x64xbf16>)
// MIXED: %[[XL:.*]] = xfmr.kernel "add"({{.*}}) {params = {a_type = "f32", out_type = "f32", width = 64 : i64}} : (tensor<?x64xf32>, tensor<?x64xbf16>) -> tensor<?x64xf32>
// MIXED: %[[G:.*]] = xfmr.kernel "gather_last_tokens"(%[[XL]], {{.*}}) {params = {hidden = 64 : i64, type = "f32"}}
// MIXED: %[[N:.*]] = xfmr.kernel "rms_norm"(%[[G]], {{.*}}) {params = {epsilon = 1.000000e-05 : f64, hidden = 64 : i64, x_type = "f32"}} : (tensor<?x64xf32>, tensor<64xbf16>) -> tensor<?x64xbf16>
// MIXED: xfmr.gemm %[[N]], {{.*}} {role = "logits"} : (tensor<?x64xbf16>, tensor<128x64xbf16>) -> tensor<?x128xbf16>

// Every op becomes a kernel instance or a GEMM; weight-only ops (the Q/K/V
// row concat) stay for load-time preparation, reshapes stay as views.
// CHECK-LABEL: func.func @forward
// CHECK: xfmr.kernel "embedding"(%arg0, %{{.*}}) {params = {hidden = 64 : i64, table_type = "bf16"}}
// CHECK: xfmr.kernel "rms_norm"
// CHECK: %[[W:.*]] = xfmr.concat {{.*}} {axis = 0 : i64} : (tensor<64x64xbf16>, tensor<32x64xbf16>, tensor<32x64xbf16>) -> tensor<128x64xbf16>
// CHECK: %[[B:.*]] = xfmr.concat {{.*}} -> tensor<128xbf16>
// CHECK: %[[QKV:.*]] = xfmr.gemm %{{.*}}, %[[W]] bias %[[B]]
// CHECK: xfmr.kernel "rope_kv_append"(%[[QKV]], %arg1, %arg2, %arg6, %arg7) {params = {head_dim = 16 : i64, heads = 4 : i64, kv_heads = 2 : i64, kv_type = "f32", merged_qkv = true, page_size = 16 : i64
// CHECK-SAME: rope_scaling = "none", rope_style = "half", rope_theta = 1.000000e+06 : f64
// CHECK: xfmr.kernel "paged_attention"
// CHECK: xfmr.reshape
// CHECK: xfmr.gemm
// CHECK: xfmr.kernel "residual_rms_norm"{{.*}}writes_sum = true
// CHECK: xfmr.kernel "silu_mul"{{.*}}{params = {ffn = 128 : i64, merged_gate_up = true}}
// CHECK: xfmr.kernel "gather_last_tokens"
// CHECK: xfmr.kernel "rms_norm"
// CHECK: xfmr.gemm {{.*}} {role = "logits"}
// CHECK-NOT: xfmr.linear
// CHECK-NOT: xfmr.fusion_region

// Mixture of experts (tiny-qwen3-moe): the stacked experts stay weight
// preparations; the moe_route region becomes one moe_router kernel reading
// the normed rows and the router weight; moe_ffn one kernel over the
// stacked experts, fed by the router's weights and i32 expert ids.
// MOE: %[[G:.*]] = xfmr.stack {{.*}} -> tensor<8x32x64xf32>
// MOE: %[[U:.*]] = xfmr.stack {{.*}} -> tensor<8x32x64xf32>
// MOE: %[[D:.*]] = xfmr.stack {{.*}} -> tensor<8x64x32xf32>
// MOE: %[[R:.*]]:2 = xfmr.kernel "moe_router"(%[[H:.*]], %{{.*}}) {params = {experts = 8 : i64, hidden = 64 : i64, normalize = false, top_k = 3 : i64, weight_type = "f32"}} : (tensor<?x64xf32>, tensor<8x64xf32>) -> (tensor<?x3xf32>, tensor<?x3xi32>)
// MOE: xfmr.kernel "moe_ffn"(%[[H]], %[[R]]#0, %[[R]]#1, %[[G]], %[[U]], %[[D]]) {params = {experts = 8 : i64, ffn = 32 : i64, hidden = 64 : i64, top_k = 3 : i64, weight_type = "f32"}}
// MOE: xfmr.kernel "silu_mul"
// MOE: xfmr.kernel "moe_router"
// MOE-NOT: xfmr.moe_router
// MOE-NOT: xfmr.fusion_region

// The runtime has no contiguous-KV attention: lowering it is an error at the op.
func.func @forward(%q: tensor<?x4x16xf32>, %k: tensor<?x2x16xf32>, %v: tensor<?x2x16xf32>) -> tensor<?x4x16xf32> {
  // expected-error @+1 {{cannot lower 'xfmr.attention' to a kernel: the kernel-level form needs fused, paged attention (run xfmr-fuse-attention and xfmr-page-kv-cache first)}}
  %o = xfmr.attention %q, %k, %v {scale = 0.25 : f64, causal} : (tensor<?x4x16xf32>, tensor<?x2x16xf32>, tensor<?x2x16xf32>) -> tensor<?x4x16xf32>
  return %o : tensor<?x4x16xf32>
}
