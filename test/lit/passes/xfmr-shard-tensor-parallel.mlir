// RUN: kiln-compile %models/tiny-llama --emit=xfmr | kiln-opt --xfmr-fuse-attention --xfmr-shard-tensor-parallel="size=2 rank=0" | kiln-opt | FileCheck %s --check-prefix=MERGED0
// RUN: kiln-compile %models/tiny-llama --emit=xfmr | kiln-opt --xfmr-fuse-attention --xfmr-shard-tensor-parallel="size=2 rank=1" | FileCheck %s --check-prefix=MERGED1
// RUN: kiln-compile %models/tiny-llama --emit=xfmr | kiln-opt --xfmr-fuse-attention=merge-projections=false --xfmr-shard-tensor-parallel="size=2 rank=1" | FileCheck %s --check-prefix=SPLIT1
// RUN: kiln-compile %models/tiny-llama --emit=xfmr | kiln-opt --xfmr-fuse-attention --xfmr-shard-tensor-parallel="size=2 rank=1" --xfmr-page-kv-cache | FileCheck %s --check-prefix=PAGED
// RUN: kiln-compile %models/tiny-qwen2 --emit=xfmr | kiln-opt --xfmr-fuse-attention --xfmr-shard-tensor-parallel="size=2 rank=1" | FileCheck %s --check-prefix=BIAS
// RUN: kiln-compile %models/tiny-llama --emit=xfmr | kiln-opt --xfmr-fuse-attention --xfmr-shard-tensor-parallel=size=1 | FileCheck %s --check-prefix=WHOLE
// RUN: kiln-compile %models/tiny-llama --emit=xfmr | not kiln-opt --xfmr-shard-tensor-parallel=size=3 2>&1 | FileCheck %s --check-prefix=TP3
// RUN: kiln-compile %models/tiny-llama --emit=xfmr | not kiln-opt --xfmr-shard-tensor-parallel="size=2 rank=2" 2>&1 | FileCheck %s --check-prefix=RANK
// RUN: kiln-opt %s -split-input-file --xfmr-shard-tensor-parallel=size=3 -verify-diagnostics

// tiny-llama: 4 query heads, 2 KV heads (GQA), head_dim 16, hidden 64,
// intermediate 128. With merged projections each of the concat's q, k and
// v inputs keeps the rank's rows; the attention and the past KV carry 2
// query heads and 1 KV head; o_proj and down_proj keep the matching
// columns and are followed by the all-reduce. Embedding and LM head stay whole.
// MERGED0-LABEL: func.func @forward
// MERGED0-SAME: tensor<?x1x16xf32> {xfmr.name = "past_k.0"}, %{{.*}}: tensor<?x1x16xf32> {xfmr.name = "past_v.0"}
// MERGED0-SAME: -> (tensor<?x128xf32>, tensor<?x1x16xf32>, tensor<?x1x16xf32>, tensor<?x1x16xf32>, tensor<?x1x16xf32>)
// MERGED0: %[[TABLE:.*]] = xfmr.weight "model.embed_tokens.weight" : tensor<128x64xbf16>
// MERGED0: %[[WQ:.*]] = xfmr.weight "model.layers.0.self_attn.q_proj.weight" : tensor<64x64xbf16>
// MERGED0: %[[WK:.*]] = xfmr.weight "model.layers.0.self_attn.k_proj.weight" : tensor<32x64xbf16>
// MERGED0: %[[WV:.*]] = xfmr.weight "model.layers.0.self_attn.v_proj.weight" : tensor<32x64xbf16>
// MERGED0: %[[Q:.*]] = xfmr.slice %[[WQ]] {axis = 0 : i64, offset = 0 : i64, size = 32 : i64} : (tensor<64x64xbf16>) -> tensor<32x64xbf16>
// MERGED0: %[[K:.*]] = xfmr.slice %[[WK]] {axis = 0 : i64, offset = 0 : i64, size = 16 : i64} : (tensor<32x64xbf16>) -> tensor<16x64xbf16>
// MERGED0: %[[V:.*]] = xfmr.slice %[[WV]] {axis = 0 : i64, offset = 0 : i64, size = 16 : i64} : (tensor<32x64xbf16>) -> tensor<16x64xbf16>
// MERGED0: %[[QKV:.*]] = xfmr.concat %[[Q]], %[[K]], %[[V]] {axis = 0 : i64} : (tensor<32x64xbf16>, tensor<16x64xbf16>, tensor<16x64xbf16>) -> tensor<64x64xbf16>
// MERGED0: xfmr.linear %{{.*}}, %[[QKV]] : (tensor<?x64xf32>, tensor<64x64xbf16>) -> tensor<?x64xf32>
// MERGED0: xfmr.fusion_region "rope_kv_write"
// MERGED0: xfmr.split %{{.*}} {axis = 1 : i64, sizes = array<i64: 32, 16, 16>}
// MERGED0: xfmr.attention {{.*}} : (tensor<?x2x16xf32>, tensor<?x1x16xf32>, tensor<?x1x16xf32>) -> tensor<?x2x16xf32>
// MERGED0: xfmr.reshape %{{.*}} : tensor<?x2x16xf32> -> tensor<?x32xf32>
// MERGED0: %[[WO:.*]] = xfmr.weight "model.layers.0.self_attn.o_proj.weight" : tensor<64x64xbf16>
// MERGED0: %[[O:.*]] = xfmr.slice %[[WO]] {axis = 1 : i64, offset = 0 : i64, size = 32 : i64} : (tensor<64x64xbf16>) -> tensor<64x32xbf16>
// MERGED0: %[[OP:.*]] = xfmr.linear %{{.*}}, %[[O]] : (tensor<?x32xf32>, tensor<64x32xbf16>) -> tensor<?x64xf32>
// MERGED0-NEXT: %[[OS:.*]] = xfmr.all_reduce %[[OP]] {group_size = 2 : i64} : tensor<?x64xf32>
// MERGED0: xfmr.fusion_region "residual_rms_norm"(%{{.*}}, %[[OS]], %{{.*}})
// MERGED0: xfmr.slice %{{.*}} {axis = 0 : i64, offset = 0 : i64, size = 64 : i64} : (tensor<128x64xbf16>) -> tensor<64x64xbf16>
// MERGED0: xfmr.slice %{{.*}} {axis = 0 : i64, offset = 0 : i64, size = 64 : i64} : (tensor<128x64xbf16>) -> tensor<64x64xbf16>
// MERGED0: xfmr.linear {{.*}} : (tensor<?x64xf32>, tensor<128x64xbf16>) -> tensor<?x128xf32>
// MERGED0: xfmr.fusion_region "silu_mul"{{.*}} : (tensor<?x128xf32>) -> tensor<?x64xf32>
// MERGED0: xfmr.split %{{.*}} {axis = 1 : i64, sizes = array<i64: 64, 64>}
// MERGED0: %[[WD:.*]] = xfmr.weight "model.layers.0.mlp.down_proj.weight" : tensor<64x128xbf16>
// MERGED0: %[[D:.*]] = xfmr.slice %[[WD]] {axis = 1 : i64, offset = 0 : i64, size = 64 : i64} : (tensor<64x128xbf16>) -> tensor<64x64xbf16>
// MERGED0: %[[DP:.*]] = xfmr.linear %{{.*}}, %[[D]] : (tensor<?x64xf32>, tensor<64x64xbf16>) -> tensor<?x64xf32>
// MERGED0-NEXT: xfmr.all_reduce %[[DP]] {group_size = 2 : i64} : tensor<?x64xf32>
// MERGED0: xfmr.logits %{{.*}}, %{{.*}} : (tensor<?x64xf32>, tensor<128x64xbf16>) -> tensor<?x128xf32>

// Rank 1 takes the second half of each part.
// MERGED1-LABEL: func.func @forward
// MERGED1: xfmr.slice %{{.*}} {axis = 0 : i64, offset = 32 : i64, size = 32 : i64} : (tensor<64x64xbf16>) -> tensor<32x64xbf16>
// MERGED1: xfmr.slice %{{.*}} {axis = 0 : i64, offset = 16 : i64, size = 16 : i64} : (tensor<32x64xbf16>) -> tensor<16x64xbf16>
// MERGED1: xfmr.slice %{{.*}} {axis = 0 : i64, offset = 16 : i64, size = 16 : i64} : (tensor<32x64xbf16>) -> tensor<16x64xbf16>
// MERGED1: xfmr.slice %{{.*}} {axis = 1 : i64, offset = 32 : i64, size = 32 : i64} : (tensor<64x64xbf16>) -> tensor<64x32xbf16>
// MERGED1: xfmr.all_reduce
// MERGED1: xfmr.slice %{{.*}} {axis = 0 : i64, offset = 64 : i64, size = 64 : i64} : (tensor<128x64xbf16>) -> tensor<64x64xbf16>
// MERGED1: xfmr.slice %{{.*}} {axis = 0 : i64, offset = 64 : i64, size = 64 : i64} : (tensor<128x64xbf16>) -> tensor<64x64xbf16>
// MERGED1: xfmr.slice %{{.*}} {axis = 1 : i64, offset = 64 : i64, size = 64 : i64} : (tensor<64x128xbf16>) -> tensor<64x64xbf16>
// MERGED1: xfmr.all_reduce

// Unmerged projections: each linear's weight is sliced on its own.
// SPLIT1-LABEL: func.func @forward
// SPLIT1: xfmr.slice %{{.*}} {axis = 0 : i64, offset = 32 : i64, size = 32 : i64} : (tensor<64x64xbf16>) -> tensor<32x64xbf16>
// SPLIT1-NEXT: xfmr.linear {{.*}} -> tensor<?x32xf32>
// SPLIT1: xfmr.slice %{{.*}} {axis = 0 : i64, offset = 16 : i64, size = 16 : i64} : (tensor<32x64xbf16>) -> tensor<16x64xbf16>
// SPLIT1-NEXT: xfmr.linear {{.*}} -> tensor<?x16xf32>
// SPLIT1: xfmr.slice %{{.*}} {axis = 0 : i64, offset = 16 : i64, size = 16 : i64} : (tensor<32x64xbf16>) -> tensor<16x64xbf16>
// SPLIT1-NEXT: xfmr.linear {{.*}} -> tensor<?x16xf32>
// SPLIT1: xfmr.attention {{.*}} -> tensor<?x2x16xf32>
// SPLIT1: xfmr.all_reduce
// SPLIT1: xfmr.slice %{{.*}} {axis = 0 : i64, offset = 64 : i64, size = 64 : i64} : (tensor<128x64xbf16>) -> tensor<64x64xbf16>
// SPLIT1-NEXT: xfmr.linear {{.*}} -> tensor<?x64xf32>
// SPLIT1: xfmr.slice %{{.*}} {axis = 0 : i64, offset = 64 : i64, size = 64 : i64} : (tensor<128x64xbf16>) -> tensor<64x64xbf16>
// SPLIT1-NEXT: xfmr.linear {{.*}} -> tensor<?x64xf32>
// SPLIT1: xfmr.fusion_region "silu_mul"{{.*}} : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
// SPLIT1: xfmr.all_reduce

// Paged afterwards, each rank's pools hold its one KV head.
// PAGED-LABEL: func.func @forward
// PAGED-SAME: !xfmr.kv_pool<16, 1, 16, f32> {xfmr.name = "k_pool.0"}
// PAGED: xfmr.paged_attention {{.*}} -> tensor<?x2x16xf32>

// Merged q/k/v biases are sliced as their weights are.
// BIAS-LABEL: func.func @forward
// BIAS: %[[BQ:.*]] = xfmr.slice %{{.*}} {axis = 0 : i64, offset = 32 : i64, size = 32 : i64} : (tensor<64xbf16>) -> tensor<32xbf16>
// BIAS-NEXT: %[[BK:.*]] = xfmr.slice %{{.*}} {axis = 0 : i64, offset = 16 : i64, size = 16 : i64} : (tensor<32xbf16>) -> tensor<16xbf16>
// BIAS-NEXT: %[[BV:.*]] = xfmr.slice %{{.*}} {axis = 0 : i64, offset = 16 : i64, size = 16 : i64} : (tensor<32xbf16>) -> tensor<16xbf16>
// BIAS-NEXT: %[[B:.*]] = xfmr.concat %[[BQ]], %[[BK]], %[[BV]] {axis = 0 : i64} : (tensor<32xbf16>, tensor<16xbf16>, tensor<16xbf16>) -> tensor<64xbf16>
// BIAS-NEXT: xfmr.linear %{{.*}}, %{{.*}}, %[[B]] : (tensor<?x64xf32>, tensor<64x64xbf16>, tensor<64xbf16>) -> tensor<?x64xf32>

// WHOLE-NOT: xfmr.slice
// WHOLE-NOT: xfmr.all_reduce

// TP3: error: invalid value 3 for the tensor-parallel size: it must divide the model's attention heads (4), KV heads (2) and MLP intermediate size (128)
// RANK: error: invalid rank 2 for tensor-parallel size 2, expected a size of at least 1 and a rank below it

// Without the model's config, the attention's own heads are checked.
func.func @forward(%q: tensor<?x4x16xf32>, %k: tensor<?x2x16xf32>, %v: tensor<?x2x16xf32>) -> tensor<?x4x16xf32> {
  // expected-error @+1 {{tensor-parallel size 3 does not divide this attention's 4 query heads and 2 KV heads}}
  %o = xfmr.attention %q, %k, %v {scale = 0.25 : f64, causal} : (tensor<?x4x16xf32>, tensor<?x2x16xf32>, tensor<?x2x16xf32>) -> tensor<?x4x16xf32>
  return %o : tensor<?x4x16xf32>
}
