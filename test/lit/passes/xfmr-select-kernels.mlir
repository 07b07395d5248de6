// Kernel-level IR with no variants yet (--target=cpu), then the pass alone.
// RUN: kiln-compile %models/tiny-llama --emit=kernels --activation-type=bf16 --target=cpu > %t.tiny.mlir
// RUN: kiln-opt %t.tiny.mlir --xfmr-select-kernels="target=sm_90a activation-type=bf16" | FileCheck %s --check-prefixes=TINY,TINY-HOPPER
// RUN: kiln-opt %t.tiny.mlir --xfmr-select-kernels="target=sm_80 activation-type=bf16" | FileCheck %s --check-prefixes=TINY,TINY-AMPERE
// RUN: kiln-compile %models/llama3.2-1b --emit=kernels --activation-type=bf16 --target=cpu > %t.1b.mlir
// RUN: kiln-opt %t.1b.mlir --xfmr-select-kernels="target=sm_90a activation-type=bf16" | FileCheck %s --check-prefix=HOPPER
// RUN: kiln-opt %t.1b.mlir --xfmr-select-kernels="target=sm_80 activation-type=bf16" | FileCheck %s --check-prefixes=AMPERE,AMPERE-NONE
// RUN: kiln-compile %models/tiny-llama --emit=kernels --target=cpu | kiln-opt --xfmr-select-kernels="target=sm_90a activation-type=f32" | FileCheck %s --check-prefixes=F32,F32-NONE
// RUN: kiln-compile %models/tiny-llama --emit=kernels | kiln-opt --xfmr-select-kernels=target=cpu | FileCheck %s --check-prefix=CPU
// RUN: not kiln-opt %t.tiny.mlir --xfmr-select-kernels=target=sm_75 2>&1 | FileCheck %s --check-prefix=BADTARGET
// RUN: not kiln-opt %t.tiny.mlir --xfmr-select-kernels="target=sm_90a activation-type=f16" 2>&1 | FileCheck %s --check-prefix=F16
// RUN: kiln-opt %s --xfmr-select-kernels -verify-diagnostics
// RUN: kiln-compile %models/tiny-llama --spec-tree=chain:2 --emit=kernels --activation-type=bf16 --target=cpu | kiln-opt --xfmr-select-kernels="target=sm_90a activation-type=bf16" | FileCheck %s --check-prefix=SPEC
// RUN: kiln-compile %models/tiny-llama --sparsity=2:4 --emit=kernels --activation-type=bf16 --target=cpu | kiln-opt --xfmr-select-kernels="target=sm_90a activation-type=bf16" | FileCheck %s --check-prefix=SPARSE
// RUN: kiln-compile %models/tiny-llama --sparsity=2:4 --quant-weights=int4 --quant-group-size=64 --emit=kernels --target=cpu | kiln-opt --xfmr-select-kernels="target=sm_90a activation-type=f32" | FileCheck %s --check-prefix=SPARSE-F32

// tiny-llama in bf16 (hidden 64, ffn 128, 4 heads of 16, bf16 pools). Every
// GEMM takes the skinny kernels up to 8 rows and cuBLASLt above; none
// streams its single row (k = 64 is not a multiple of the stream's
// 2048-element chunk), and head_dim 16 has no flash attention.
// TINY: module attributes {{.*}}xfmr.target = "sm_{{90a|80}}"
// TINY-LABEL: func.func @forward
// TINY: xfmr.kernel "embedding"{{.*}}xfmr.variants = [{instance = "embedding_{{.*}}", kind = "embedding", {{.*}}role = "step", rows = array<i64: 1, -1>}]}

// The merged qkv projection does rope and the KV append in its epilogue
// (rope_kv_append's params beside its own); the rope step is then absorbed
// for up to 8 rows, and its q gets storage of its own.
// TINY: xfmr.gemm {{.*}}xfmr.variants = [{instance = "gemm_{{.*}}", kind = "gemm", params = {{{.*}}gemv_max_rows = 1 : i64, {{.*}}merged_qkv = true, {{.*}}rope_kv_append = true, {{.*}}}, role = "fused_single_row", rows = array<i64: 1, 1>}
// TINY-SAME: role = "fused", rows = array<i64: 2, 8>}, {role = "cublaslt", rows = array<i64: 9, -1>}]}
// TINY: xfmr.kernel "rope_kv_append"{{.*}}role = "step", rows = array<i64: 1, -1>}, {own_storage = true, role = "absorbed", rows = array<i64: 1, 8>}]}

// Attention: the CUDA-core kernel, its split mode for decode (the
// bandwidth-bound decode_attention does not serve head_dim 16) and the
// combine; no prefill variant.
// TINY: xfmr.kernel "paged_attention"{{.*}}role = "step", rows = array<i64: 1, -1>}, {{{.*}}kind = "paged_attention_split", {{.*}}role = "decode", rows = array<i64: 1, -1>}, {{{.*}}kind = "attention_combine", {{.*}}role = "combine", rows = array<i64: 1, -1>}]} :

// o_proj: plain skinny kernels, and cuBLASLt adding the f32 residual of the
// norm after it up to 512 rows; the norm then only normalizes that sum.
// TINY: xfmr.gemm {{.*}}role = "single_row", rows = array<i64: 1, 1>}, {{{.*}}role = "skinny", rows = array<i64: 2, 8>}, {needs = ["residual_epilogue"], role = "cublaslt_residual", rows = array<i64: 9, 512>}, {role = "cublaslt", rows = array<i64: 9, -1>}]}
// TINY: xfmr.kernel "residual_rms_norm"{{.*}}kind = "rms_norm", needs = ["residual_epilogue"], {{.*}}role = "norm_of_sum", rows = array<i64: 9, 512>}

// The merged gate/up projection with SwiGLU in its epilogue up to 8 rows; on
// Hopper also gemm_swiglu from 1024 rows (hidden 64 and ffn 128 divide its
// 64-wide K and 128-wide N tiles), which then absorbs silu_mul there too.
// TINY: xfmr.gemm {{.*}}params = {{{.*}}silu_mul = true, {{.*}}role = "fused_single_row", rows = array<i64: 1, 1>}
// TINY-SAME: silu_mul = true, {{.*}}role = "fused", rows = array<i64: 2, 8>}
// TINY-HOPPER-SAME: {instance = "gemm_swiglu_ffn128_hidden64", kind = "gemm_swiglu", needs = ["fused_swiglu"], params = {ffn = 128 : i64, hidden = 64 : i64}, role = "fused_prefill", rows = array<i64: 1024, -1>}
// TINY-AMPERE-NOT: gemm_swiglu
// TINY-SAME: {role = "cublaslt", rows = array<i64: 9, -1>}]}
// TINY: xfmr.kernel "silu_mul"{{.*}}role = "step", rows = array<i64: 1, -1>}, {role = "absorbed", rows = array<i64: 1, 8>}
// TINY-HOPPER-SAME: {needs = ["fused_swiglu"], role = "absorbed_prefill", rows = array<i64: 1024, -1>}]}
// TINY-AMPERE-NOT: absorbed_prefill

// Llama-3.2-1B (hidden 2048, head_dim 64, bf16 pools): on Hopper the
// single-row GEMVs stream their weights (bulk copies, sm_90 on), folding the
// residual_rms_norm before gate/up into the streamed instance, and prefill
// attention runs on the warpgroup tensor cores. On Ampere: the mma.sync
// flash attention, and no streaming and so no fold.
// HOPPER: module attributes {{.*}}xfmr.target = "sm_90a"
// HOPPER: xfmr.kernel "paged_attention"{{.*}}kind = "decode_attention", {{.*}}role = "decode"{{.*}}kind = "flash_attention_wgmma", needs = ["flash_attention"], {{.*}}role = "prefill", rows = array<i64: 16, -1>}]}
// HOPPER: xfmr.gemm {{.*}}kind = "gemm", needs = ["stream_gemv"], params = {{{.*}}gemv_stream = true, {{.*}}role = "single_row", rows = array<i64: 1, 1>}, {{{.*}}role = "single_row", rows = array<i64: 1, 1>}, {{{.*}}role = "skinny", rows = array<i64: 2, 8>}
// HOPPER: xfmr.kernel "residual_rms_norm"{{.*}}{needs = ["stream_gemv", "fold_norms"], role = "folded_into_next", rows = array<i64: 1, 1>}
// HOPPER: xfmr.gemm {{.*}}needs = ["stream_gemv", "fold_norms"], params = {{{.*}}gemv_stream = true, {{.*}}norm_writes_sum = true, {{.*}}silu_mul = true, {{.*}}role = "fused_single_row", rows = array<i64: 1, 1>}
// HOPPER-SAME: kind = "gemm_swiglu", needs = ["fused_swiglu"]

// AMPERE: module attributes {{.*}}xfmr.target = "sm_80"
// AMPERE: xfmr.kernel "paged_attention"{{.*}}kind = "decode_attention", {{.*}}role = "decode"{{.*}}kind = "flash_attention", needs = ["flash_attention"], {{.*}}role = "prefill", rows = array<i64: 16, -1>}]}
// AMPERE-NONE-NOT: gemv_stream
// AMPERE-NONE-NOT: stream_gemv
// AMPERE-NONE-NOT: folded_into_next
// AMPERE-NONE-NOT: flash_attention_wgmma
// AMPERE-NONE-NOT: gemm_swiglu

// Speculative verify's entry gets kernels as forward does: its index steps
// none (the CUDA executor runs them on the host), the merged qkv projection
// still does the rope (reading the tree positions), and the tree-masked
// attention its CUDA-core kernel alone.
// SPEC-LABEL: func.func @verify
// SPEC: xfmr.kernel "tree_positions"(%arg1, %arg2, %arg5) {params = {}} :
// SPEC: xfmr.kernel "tree_mask"(%arg1, %arg5) {params = {}} :
// SPEC: xfmr.gemm {{.*}}rope_kv_append = true, {{.*}}role = "fused_single_row"
// SPEC: xfmr.kernel "rope_kv_append"(%{{[0-9]+}}, %0, {{.*}}role = "absorbed", rows = array<i64: 1, 8>}]}
// SPEC: xfmr.kernel "paged_attention"({{.*}}, %1) {{.*}}xfmr.variants = [{instance = "paged_attention_{{.*}}_tree_mask1", kind = "paged_attention", {{.*}}role = "step", rows = array<i64: 1, -1>}]} :
// SPEC: xfmr.kernel "accept"({{.*}}) {params = {mode = "greedy"}} :

// 2:4 sparse linears (--sparsity=2:4): sparse24_gemv up to 8 rows, then
// the sparse GEMM (mma.sp at k 64; the sparse wgmma at the down
// projection's k 128), and no fusions: the silu_mul and the norms run as
// steps of their own. An f32 plan runs them on cuBLASLt, expanded to dense
// at load.
// SPARSE-LABEL: func.func @forward
// SPARSE: xfmr.gemm {{.*}}kind = "sparse24_gemv", params = {bias = false, k = 64 : i64, n = 128 : i64, out_type = "bf16", values_type = "bf16"}, role = "sparse_gemv", rows = array<i64: 1, 8>}, {{{.*}}kind = "sparse24_gemm", {{.*}}role = "sparse_gemm", rows = array<i64: 9, -1>}]} : (tensor<?x64xbf16>, tensor<128x64x!xfmr.quant<"sp24", 0>>)
// SPARSE: xfmr.kernel "silu_mul"{{.*}}xfmr.variants = [{{{.*}}role = "step", rows = array<i64: 1, -1>}]}
// SPARSE: xfmr.gemm {{.*}}role = "sparse_gemv", rows = array<i64: 1, 8>}, {{{.*}}kind = "sparse24_gemm_wgmma", {{.*}}role = "sparse_gemm", rows = array<i64: 9, -1>}]} : (tensor<?x128xbf16>
// SPARSE-F32: xfmr.gemm {{.*}} {xfmr.variants = [{role = "cublaslt", rows = array<i64: 1, -1>}]} : {{.*}}!xfmr.quant<"int4sp24", 64>

// An f32 plan: every GEMM on cuBLASLt in f32 at every row count; each other
// step its own instance with the activation types named, and attention's
// split mode and combine beside it.
// F32-LABEL: func.func @forward
// F32: xfmr.kernel "embedding"{{.*}}xfmr.variants = [{instance = "embedding_hidden64_out_typef32_table_typebf16", kind = "embedding", params = {hidden = 64 : i64, out_type = "f32", table_type = "bf16"}, role = "step", rows = array<i64: 1, -1>}]}
// F32: xfmr.gemm {{.*}} {xfmr.variants = [{role = "cublaslt", rows = array<i64: 1, -1>}]}
// F32: xfmr.kernel "paged_attention"{{.*}}q_type = "f32"{{.*}}role = "step", rows = array<i64: 1, -1>}, {{{.*}}kind = "paged_attention_split", {{.*}}role = "decode", rows = array<i64: 1, -1>}, {{{.*}}kind = "attention_combine", {{.*}}role = "combine", rows = array<i64: 1, -1>}]} :
// F32: xfmr.kernel "silu_mul"{{.*}}xfmr.variants = [{instance = "silu_mul_{{.*}}", kind = "silu_mul", {{.*}}role = "step", rows = array<i64: 1, -1>}]}
// F32: xfmr.gemm {{.*}} {role = "logits", xfmr.variants = [{role = "cublaslt", rows = array<i64: 1, -1>}]}
// F32-NONE-NOT: skinny
// F32-NONE-NOT: single_row
// F32-NONE-NOT: absorbed

// target=cpu: a plan only the CPU backend runs; the choice the default
// pipeline made (sm_90a) is removed.
// CPU: module attributes {{.*}}xfmr.target = "cpu"
// CPU-NOT: xfmr.variants

// BADTARGET: error: invalid value 'sm_75' for target, expected one of: cpu, sm_80, sm_86, sm_89, sm_90, sm_90a, sm_100, sm_120
// F16: error: activation type 'f16' has no CUDA kernels (bf16 or f32); compile for target cpu to run it on the CPU backend

// The choice is made over the plan's steps: IR above kernel level is an
// error at the first op that is not one.
func.func @forward(%q: tensor<?x4x16xf32>, %k: tensor<?x2x16xf32>, %v: tensor<?x2x16xf32>) -> tensor<?x4x16xf32> {
  // expected-error @+1 {{cannot plan 'xfmr.attention' as a step: the plan takes kernel-level IR (run xfmr-lower-to-kernels first)}}
  %o = xfmr.attention %q, %k, %v {scale = 0.25 : f64, causal} : (tensor<?x4x16xf32>, tensor<?x2x16xf32>, tensor<?x2x16xf32>) -> tensor<?x4x16xf32>
  return %o : tensor<?x4x16xf32>
}
