// RUN: kiln-compile %models/tiny-llama --emit=xfmr | kiln-opt --xfmr-fuse-attention --xfmr-page-kv-cache --xfmr-split-pipeline-stages="size=2 stage=0" | kiln-opt | FileCheck %s --check-prefix=STAGE0
// RUN: kiln-compile %models/tiny-llama --emit=xfmr | kiln-opt --xfmr-fuse-attention --xfmr-page-kv-cache --xfmr-split-pipeline-stages="size=2 stage=1" | kiln-opt | FileCheck %s --check-prefix=STAGE1
// RUN: kiln-compile %models/tiny-llama --emit=xfmr | kiln-opt --xfmr-fuse-attention --xfmr-shard-tensor-parallel="size=2 rank=1" --xfmr-page-kv-cache --xfmr-split-pipeline-stages="size=2 stage=1" --xfmr-lower-to-kernels | FileCheck %s --check-prefix=KERNELS
// RUN: kiln-compile %models/tiny-llama --emit=xfmr | not kiln-opt --xfmr-fuse-attention --xfmr-page-kv-cache --xfmr-split-pipeline-stages="size=3 stage=0" 2>&1 | FileCheck %s --check-prefix=TOOMANY
// RUN: kiln-compile %models/tiny-llama --emit=xfmr | not kiln-opt --xfmr-split-pipeline-stages="size=2 stage=2" 2>&1 | FileCheck %s --check-prefix=STAGE
// RUN: not kiln-opt %s --xfmr-split-pipeline-stages="size=2 stage=0" 2>&1 | FileCheck %s --check-prefix=NOFWD

// tiny-llama has 2 layers: stage 0 keeps the embedding and layer 0, and
// sends the residual stream entering layer 1 (the sum of the MLP's
// residual region); it returns nothing.
// STAGE0-LABEL: func.func @forward
// STAGE0-SAME: {xfmr.name = "v_pool.1"})
// STAGE0-NOT: ->
// STAGE0-SAME: attributes {xfmr.pipeline_stage = {end_layer = 1 : i64, first_layer = 0 : i64, stage = 0 : i64, stages = 2 : i64}}
// STAGE0: xfmr.embed
// STAGE0: xfmr.fusion_region "rope_kv_write"(%{{.*}}, %arg1, %arg6, %arg7, %arg2)
// STAGE0: xfmr.paged_attention {{.*}}, %arg6, %arg7,
// STAGE0-NOT: %arg8
// STAGE0: xfmr.weight "model.layers.1.input_layernorm.weight"
// STAGE0-NEXT: %[[SUM:.*]]:2 = xfmr.fusion_region "residual_rms_norm"
// STAGE0: xfmr.send %[[SUM]]#0 {peer = 1 : i64} : tensor<?x64xf32>
// STAGE0-NEXT: return
// STAGE0-NOT: xfmr.logits

// Stage 1 receives the stream, recomputes layer 1's input norm from it,
// runs layer 1 and ends with the final norm and the LM head.
// STAGE1-LABEL: func.func @forward
// STAGE1-SAME: -> tensor<?x128xf32>
// STAGE1-SAME: attributes {xfmr.pipeline_stage = {end_layer = 2 : i64, first_layer = 1 : i64, stage = 1 : i64, stages = 2 : i64}}
// STAGE1-NEXT: %[[X:.*]] = xfmr.recv {peer = 0 : i64} : tensor<?x64xf32>
// STAGE1-NEXT: %[[W:.*]] = xfmr.weight "model.layers.1.input_layernorm.weight"
// STAGE1-NEXT: %[[N:.*]] = xfmr.rms_norm %[[X]], %[[W]] {epsilon = 1.000000e-05 : f64}
// STAGE1-NOT: xfmr.embed
// STAGE1-NOT: layers.0.
// STAGE1: xfmr.linear %[[N]],
// STAGE1: xfmr.fusion_region "rope_kv_write"(%{{.*}}, %arg1, %arg8, %arg9, %arg2)
// STAGE1: xfmr.fusion_region "residual_rms_norm"(%[[X]],
// STAGE1: xfmr.gather_last_tokens
// STAGE1: xfmr.logits
// STAGE1-NEXT: return

// With TP=2 as well, lowered: the hand-overs and sums are steps.
// KERNELS-LABEL: func.func @forward
// KERNELS: xfmr.kernel "recv"() {params = {hidden = 64 : i64, peer = 0 : i64}} : () -> tensor<?x64xf32>
// KERNELS: xfmr.kernel "all_reduce"(%{{.*}}) {params = {group_size = 2 : i64, hidden = 64 : i64}} : (tensor<?x64xf32>) -> tensor<?x64xf32>
// KERNELS: xfmr.kernel "all_reduce"

// TOOMANY: error: invalid value 3 for the pipeline size: the model has 2 paged attention layers, a stage needs at least one
// STAGE: error: invalid stage 2 for pipeline size 2, expected a size of at least 1 and a stage below it
// NOFWD: error: xfmr-split-pipeline-stages needs a @forward function, found none
func.func @decode() {
  return
}
