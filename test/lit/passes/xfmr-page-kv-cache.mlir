// RUN: kiln-compile %models/tiny-llama --emit=xfmr | kiln-opt --xfmr-fuse-attention --xfmr-page-kv-cache | kiln-opt | FileCheck %s
// RUN: kiln-compile %models/tiny-llama --emit=xfmr | kiln-opt --xfmr-fuse-attention --xfmr-page-kv-cache=page-size=32 | FileCheck %s --check-prefix=PAGE32
// RUN: kiln-compile %models/tiny-llama --emit=xfmr | not kiln-opt --xfmr-page-kv-cache=page-size=24 2>&1 | FileCheck %s --check-prefix=BADPAGE
// RUN: kiln-opt %s -split-input-file --xfmr-page-kv-cache -verify-diagnostics

// The contiguous past KV becomes one block pool per layer; the entry takes a
// ragged batch and returns logits for each sequence's last token only.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: %arg0: tensor<?xi32> {xfmr.name = "tokens"}, %arg1: tensor<?xi32> {xfmr.name = "positions"}
// CHECK-SAME: %[[SLOTS:.*]]: tensor<?xi32> {xfmr.name = "slot_mapping"}, %[[TABLES:.*]]: tensor<?x?xi32> {xfmr.name = "block_tables"}
// CHECK-SAME: %[[QSTART:.*]]: tensor<?xi32> {xfmr.name = "query_start"}, %[[KVLENS:.*]]: tensor<?xi32> {xfmr.name = "kv_lens"}
// CHECK-SAME: %[[K0:.*]]: !xfmr.kv_pool<16, 2, 16, f32> {xfmr.name = "k_pool.0"}, %[[V0:.*]]: !xfmr.kv_pool<16, 2, 16, f32> {xfmr.name = "v_pool.0"}
// CHECK-SAME: {xfmr.name = "v_pool.1"}) -> tensor<?x128xf32>
// CHECK: xfmr.fusion_region "rope_kv_write"
// CHECK: xfmr.rope
// CHECK: xfmr.paged_kv_append {{.*}}, {{.*}}, %arg{{[0-9]+}}, %arg{{[0-9]+}}, %arg{{[0-9]+}} :
// CHECK: xfmr.paged_attention %{{.*}}, %[[K0]], %[[V0]], %[[TABLES]], %[[QSTART]], %[[KVLENS]] {scale = 2.500000e-01 : f64}
// CHECK-NOT: xfmr.kv_concat
// CHECK-NOT: xfmr.attention
// CHECK: xfmr.gather_last_tokens %{{.*}}, %[[QSTART]]
// CHECK-NEXT: xfmr.rms_norm
// CHECK: xfmr.logits
// CHECK-NEXT: return %{{.*}} : tensor<?x128xf32>

// PAGE32: !xfmr.kv_pool<32, 2, 16, f32>

// BADPAGE: error: invalid value '24' for page-size, expected a power of two from 1 to 256

// Unfused attention is a precondition failure, diagnosed at the softmax.
func.func @forward(%tokens: tensor<?xi32>, %s: tensor<4x?x?xf32>) -> tensor<4x?x?xf32> {
  // expected-error @+1 {{xfmr-page-kv-cache needs fused attention, found an unfused softmax (run xfmr-fuse-attention first)}}
  %p = xfmr.softmax %s {axis = 2 : i64} : tensor<4x?x?xf32>
  return %p : tensor<4x?x?xf32>
}

// -----

// Attention whose keys are not the contiguous past KV cannot be paged.
func.func @forward(%q: tensor<?x4x16xf32>, %k: tensor<?x2x16xf32>, %v: tensor<?x2x16xf32>) -> tensor<?x4x16xf32> {
  // expected-error @+1 {{xfmr-page-kv-cache expects attention keys and values from xfmr.kv_concat of a @forward argument (the contiguous past KV)}}
  %o = xfmr.attention %q, %k, %v {scale = 0.25 : f64, causal} : (tensor<?x4x16xf32>, tensor<?x2x16xf32>, tensor<?x2x16xf32>) -> tensor<?x4x16xf32>
  return %o : tensor<?x4x16xf32>
}

// -----

// expected-error @+1 {{xfmr-page-kv-cache needs a @forward function, found none}}
module {
  func.func @decode() {
    return
  }
}
