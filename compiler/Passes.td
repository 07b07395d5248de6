//===- Passes.td - kiln's compiler passes ------------------*- tablegen -*-===//
//
// One pass per file under compiler/; each is runnable alone in kiln-opt and
// has a lit test named after its flag in test/lit/passes/.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_PASSES
#define KILN_PASSES

include "mlir/Pass/PassBase.td"

def FuseAttention : Pass<"xfmr-fuse-attention", "::mlir::ModuleOp"> {
  let summary = "Fuse unfused attention into xfmr.attention; merge QKV and "
                "gate/up GEMMs; form elementwise fusion regions";
  let description = [{
    Rewrites the attention chain the importer emits into one flash-style op:

    ```mlir
    // before
    %s = xfmr.batch_matmul %qt, %k9 {transpose_rhs}   // qt = transpose(q), k9 = repeat_kv(transpose(k))
    %c = xfmr.scale %s {factor = 0.125 : f64}
    %m = xfmr.causal_mask %c
    %p = xfmr.softmax %m {axis = 2 : i64}
    %o = xfmr.batch_matmul %p, %v9
    %r = xfmr.transpose %o {permutation = array<i64: 1, 0, 2>}
    // after
    %r = xfmr.attention %q, %k, %v {causal, scale = 0.125 : f64}
    ```

    Patterns that differ in meaning are left alone: no scale, a mask other
    than causal, a softmax over another axis.

    It also merges the Q/K/V projections of one input into one linear over
    a concatenated weight (`xfmr.concat` of the three weights, split again by
    reshapes of the result) and likewise gate/up, and wraps
    residual add + RMSNorm, SiLU·mul and RoPE + KV write chains into
    `xfmr.fusion_region` ops that the lowering turns into single kernels.
  }];
  let dependentDialects = ["::kiln::xfmr::XfmrDialect"];
  let options = [
    Option<"mergeProjections", "merge-projections", "bool", "true",
           "Merge Q/K/V and gate/up projections into single GEMMs">,
    Option<"formRegions", "form-regions", "bool", "true",
           "Wrap elementwise/reduction chains into fusion regions">,
  ];
}

def PageKvCache : Pass<"xfmr-page-kv-cache", "::mlir::ModuleOp"> {
  let summary = "Rewrite contiguous past-KV attention into paged attention "
                "over a ragged batch";
  let description = [{
    Turns `@forward`'s per-layer `past_k/past_v` tensors and `kv_concat`
    into per-layer KV block pools (`!xfmr.kv_pool<page, Hkv, D, type>`),
    a `paged_kv_append` of the new keys and values, and `paged_attention`
    over the pool. The entry then takes a ragged batch: flattened tokens of
    many sequences with `slot_mapping [N]`, `block_tables [B, max_blocks]`,
    `query_start [B+1]` and `kv_lens [B]`, and returns logits for each
    sequence's last token only.

    ```mlir
    // before
    %K = xfmr.kv_concat %past_k, %k
    %o = xfmr.attention %q, %K, %V {causal, scale = 0.125 : f64}
    // after
    xfmr.paged_kv_append %k, %v, %k_pool, %v_pool, %slots
    %o = xfmr.paged_attention %q, %k_pool, %v_pool, %tables, %qstart, %kvlens {scale = 0.125 : f64}
    ```
  }];
  let dependentDialects = ["::kiln::xfmr::XfmrDialect", "::mlir::func::FuncDialect"];
  let options = [
    Option<"pageSize", "page-size", "unsigned", "::kiln::PlanOptions::kDefaultPageSize",
           "Tokens per KV block (a power of two from 1 to 256)">,
  ];
}

def PoolSsmState : Pass<"xfmr-pool-ssm-state", "::mlir::ModuleOp"> {
  let summary = "Give each state-space layer a state pool and run its conv and "
                "scan over a ragged batch";
  let description = [{
    Does for Mamba layers what `xfmr-page-kv-cache` does for attention:
    `@forward`'s per-layer `past_conv.i` / `past_ssm.i` tensors become
    pools of one slot per running sequence, `!xfmr.state_pool<[K-1, C],
    type>` (the conv's carried inputs, activation type) and
    `!xfmr.state_pool<[I, N] | [H, P, N], f32>` (the SSM state), named
    `conv_pool.i` / `ssm_pool.i` (i counts the state-space layers). Every
    conv and scan becomes its pooled form, taking the ragged batch's
    `query_start [B+1]` (xfmr-page-kv-cache's, or a new argument for
    models without attention) and `state_slots [B]`, a slot per sequence.
    The entry returns the logits of each sequence's last token only. A
    model without state-space layers is left as it is.

    ```mlir
    // before
    %y, %s = xfmr.causal_conv1d %u, %past_conv, %w bias %b {activation = "silu"}
    // after
    %y = xfmr.pooled_causal_conv1d %u, %conv_pool, %w, %qstart, %slots bias %b {activation = "silu"}
    ```
  }];
  let dependentDialects = ["::kiln::xfmr::XfmrDialect", "::mlir::func::FuncDialect"];
}

def ShardTensorParallel : Pass<"xfmr-shard-tensor-parallel", "::mlir::ModuleOp"> {
  let summary = "Keep one tensor-parallel rank's heads and MLP features";
  let description = [{
    Runs on the fused module before paging (docs/design/parallelism.md).
    Per attention layer, the q/k/v projections keep the rows of the rank's
    query heads `[R·H/N, (R+1)·H/N)` and KV heads `[R·Hkv/N, (R+1)·Hkv/N)`
    (each input of a merged QKV's concat is sliced), so the attention and
    the past KV carry H/N and Hkv/N heads; the output projection keeps the
    matching input columns and is followed by `xfmr.all_reduce`. The MLP's
    gate and up projections keep rows `[R·F/N, (R+1)·F/N)`, the down
    projection those columns, then `xfmr.all_reduce`. A row-parallel
    linear's bias stays on rank 0 only. Weights are sliced by `xfmr.slice`,
    which the artifact runs as load-time preparation. The embedding and the
    LM head stay whole. N must divide the heads, the KV heads and the
    intermediate size.

    ```mlir
    // before (N = 2, rank 1)
    %y = xfmr.linear %x, %wo : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>
    // after
    %s = xfmr.slice %wo {axis = 1 : i64, offset = 32 : i64, size = 32 : i64} : (tensor<64x64xf32>) -> tensor<64x32xf32>
    %p = xfmr.linear %x, %s : (tensor<?x32xf32>, tensor<64x32xf32>) -> tensor<?x64xf32>
    %y = xfmr.all_reduce %p {group_size = 2 : i64} : tensor<?x64xf32>
    ```
  }];
  let dependentDialects = ["::kiln::xfmr::XfmrDialect", "::mlir::func::FuncDialect"];
  let options = [
    Option<"size", "size", "unsigned", "::kiln::PlanOptions::kDefaultTensorParallel",
           "Ranks in the tensor-parallel group">,
    Option<"rank", "rank", "unsigned", "0", "This plan's rank in the group">,
  ];
}

def SplitPipelineStages : Pass<"xfmr-split-pipeline-stages", "::mlir::ModuleOp"> {
  let summary = "Keep one pipeline stage's layers of the forward entry";
  let description = [{
    Runs on the paged module. With L layers and M stages, stage S keeps
    layers `[S·L/M, (S+1)·L/M)` (integer division: the stages differ by at
    most one layer, the later ones taking the extra). Stage 0 keeps the
    embedding; a later stage starts with `xfmr.recv` of the residual stream
    from stage S-1 and recomputes the layer's input norm from it; a stage
    before the last ends with `xfmr.send` of the residual stream to stage
    S+1 and returns nothing; the last keeps the final norm and the LM head.
    The pools of other stages' layers stay as unused arguments.

    ```mlir
    // stage 1 of 2 starts with
    %x = xfmr.recv {peer = 0 : i64} : tensor<?x64xf32>
    %n = xfmr.rms_norm %x, %w {epsilon = 1.0e-05 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
    ```
  }];
  let dependentDialects = ["::kiln::xfmr::XfmrDialect", "::mlir::func::FuncDialect"];
  let options = [
    Option<"size", "size", "unsigned", "::kiln::PlanOptions::kDefaultPipelineParallel",
           "Pipeline stages">,
    Option<"stage", "stage", "unsigned", "0", "This plan's stage">,
  ];
}

def Sparsify : Pass<"xfmr-sparsify", "::mlir::ModuleOp"> {
  let summary = "Make the decoder linears' weights 2:4 structured-sparse";
  let description = [{
    Rewrites every `xfmr.linear` whose weight is a load-time value (not the
    embedding gather, not the LM head's `xfmr.logits`) to read its weight
    through `xfmr.sparsify`: in every group of 4 consecutive input columns
    of a row the two weights of largest magnitude are kept, compressed to
    half the columns, with a 4-bit index pair per group
    (docs/design/sparsity.md). The op depends on weights alone, so the
    artifact runs it as load-time weight preparation. `method=sparsegpt`
    says the weights were pruned before the compile (kiln-compile
    --sparsity-method=sparsegpt writes them): the load then checks that no
    group keeps more than two nonzeros instead of choosing. Linears whose
    in-features are not a multiple of 64 stay dense, with a warning.
    xfmr-insert-quantization quantizes the compressed values when asked
    (`!xfmr.quant<"int8sp24", 0>`, `!xfmr.quant<"int4sp24", G>`).

    ```mlir
    // before
    %y = xfmr.linear %x, %w : (tensor<?x576xf32>, tensor<1536x576xf32>) -> tensor<?x1536xf32>
    // after
    %s = xfmr.sparsify %w {pattern = "2:4", method = "magnitude"} : (tensor<1536x576xf32>) -> tensor<1536x576x!xfmr.quant<"sp24", 0>>
    %y = xfmr.linear %x, %s : (tensor<?x576xf32>, tensor<1536x576x!xfmr.quant<"sp24", 0>>) -> tensor<?x1536xf32>
    ```
  }];
  let dependentDialects = ["::kiln::xfmr::XfmrDialect"];
  let options = [
    Option<"pattern", "pattern", "std::string", "std::string(::kiln::PlanOptions::kDefaultSparsity)",
           "Sparsity pattern: 2:4">,
    Option<"method", "method", "std::string", "std::string(::kiln::PlanOptions::kDefaultSparsityMethod)",
           "How the kept weights are chosen: magnitude, sparsegpt">,
  ];
}

def InsertQuantization : Pass<"xfmr-insert-quantization", "::mlir::ModuleOp"> {
  let summary = "Quantize weights and the KV cache";
  let description = [{
    Rewrites `xfmr.linear` on float weights into `xfmr.quantized_linear` on
    weights quantized at load time (int8 per channel, int4 per group, or
    fp8 e4m3 per channel). The quantization is an `xfmr.quantize` of the
    weight value, so it depends on weights alone and the artifact runs it
    as load-time weight preparation. Weights already in a GGUF block format
    (q4_0, q4_1, q8_0, ...) keep that form and become `quantized_linear`
    without any new op. The embedding gather and the logits GEMM stay in
    float. With `kv=bf16|int8|fp8` the KV pools change element type; int8 and
    fp8 pools keep dynamic per-(token, head) scales beside the values (there
    is no calibration data to fix them at compile time).

    ```mlir
    // before (weights=int8)
    %w = xfmr.weight "blk.0.ffn_up.weight" : tensor<1536x576xbf16>
    %y = xfmr.linear %x, %w : (tensor<?x576xf32>, tensor<1536x576xbf16>) -> tensor<?x1536xf32>
    // after
    %q, %s = xfmr.quantize %w {group = 0 : i64} : (tensor<1536x576xbf16>) -> (tensor<1536x576x!xfmr.quant<"int8", 0>>, tensor<1536xf32>)
    %y = xfmr.quantized_linear %x, %q scales %s : (...) -> tensor<?x1536xf32>
    ```
  }];
  let dependentDialects = ["::kiln::xfmr::XfmrDialect"];
  let options = [
    Option<"weights", "weights", "std::string", "std::string(::kiln::PlanOptions::kDefaultQuantWeights)",
           "Weight quantization: none, int8, int4, fp8">,
    Option<"groupSize", "group-size", "unsigned", "::kiln::PlanOptions::kDefaultQuantGroupSize",
           "Elements per scale for int4 (a multiple of 32)">,
    Option<"kv", "kv", "std::string", "std::string(::kiln::PlanOptions::kDefaultQuantKv)",
           "KV cache type: none (activation type), f16, bf16, int8, fp8">,
  ];
}

def ExpandSpecVerify : Pass<"xfmr-expand-spec-verify", "::mlir::ModuleOp"> {
  let summary = "Add a token-tree verify entry for speculative decoding";
  let description = [{
    Clones the paged `@forward` entry into `@verify`, which takes a draft
    token tree per sequence (`parents [N]`, positions from depth), attends
    with the tree's ancestor mask, returns logits for every node and ends
    in an `xfmr.accept` that picks the longest accepted path.

    ```mlir
    // after
    func.func @verify(%tokens, %parents, %base_pos, ...) {
      %pos  = xfmr.tree_positions %parents, %base_pos
      %mask = xfmr.tree_mask %parents
      %o    = xfmr.paged_attention ... tree_mask %mask
      ...
      %path, %n = xfmr.accept %logits, %tokens, %parents {mode = "greedy"}
    }
    ```
  }];
  let dependentDialects = ["::kiln::xfmr::XfmrDialect", "::mlir::func::FuncDialect"];
  let options = [
    Option<"tree", "tree", "std::string", "\"chain:4\"",
           "Tree shape: chain:K, or widths:W1,W2,... (branching per depth)">,
    Option<"mode", "mode", "std::string", "\"greedy\"",
           "Acceptance: greedy or rejection">,
  ];
}

def ExpandSpecDraft : Pass<"xfmr-expand-spec-draft", "::mlir::ModuleOp"> {
  let summary = "Add a LayerSkip self-draft entry: @verify cut after K layers";
  let description = [{
    Clones `@verify` into `@draft`: the same tree inputs and KV pools, its
    first `layers` decoder layers, then the final norm and the LM head over
    the residual stream leaving layer `layers` - 1; every node's logits, no
    `xfmr.accept`. The kept layers append their keys and values to the slots
    the target would (same weights, same tokens, same positions), the deeper
    layers are not run. Needs xfmr-expand-spec-verify first.

    ```mlir
    // after (layers=2)
    func.func @draft(%tokens, %parents, %base_pos, ...) -> logits
        attributes {xfmr.spec_draft = {layers = 2}} {
      ... layer 0, layer 1 (kv appends into k_pool.0/1, v_pool.0/1) ...
      %n = xfmr.rms_norm %x2, %final_norm
      %l = xfmr.logits %n, %head
    }
    ```
  }];
  let dependentDialects = ["::kiln::xfmr::XfmrDialect", "::mlir::func::FuncDialect"];
  let options = [
    Option<"layers", "layers", "int64_t", "1",
           "Decoder layers the draft runs (1 to the layer count - 1)">,
  ];
}

def LowerToKernels : Pass<"xfmr-lower-to-kernels", "::mlir::ModuleOp"> {
  let summary = "Lower every op or fusion region to a kernel instance or a GEMM";
  let description = [{
    The last pass before the artifact: each remaining xfmr op or fusion
    region becomes one `xfmr.kernel` (kind + compile-time parameters, which
    name one instance in `kernels/*.cu` and one CPU routine) or one
    `xfmr.gemm`; reshapes become views. Fails with a diagnostic at any op it
    cannot lower.

    ```mlir
    // before
    %h = xfmr.rms_norm %x, %w {epsilon = 1.0e-05 : f64}
    // after
    %h = xfmr.kernel "rms_norm" (%x, %w) {params = {epsilon = 1.0e-05 : f64, hidden = 576 : i64}}
    ```

    Kernels that may mix element types (embedding, rms_norm,
    residual_rms_norm, add, gather_last_tokens) name the element type of
    each activation operand or result that differs from `activation-type`:
    with bf16 activations and an f32 residual stream, the rms_norm above is
    `{epsilon = ..., hidden = 576, x_type = "f32"}` (x f32, output bf16).
    Values of the activation type are not named, so an all-f32 model's
    params are the same as without the option.
  }];
  let options = [
    Option<"activationType", "activation-type", "std::string", "std::string(::kiln::PlanOptions::kDefaultActivationType)",
           "Element type of activations; params name the types that differ">,
  ];
  let dependentDialects = ["::kiln::xfmr::XfmrDialect"];
}

def SelectKernels : Pass<"xfmr-select-kernels", "::mlir::ModuleOp"> {
  let summary = "Choose each step's CUDA kernel variants for a target";
  let description = [{
    The compiler's choice of kernels, made once for the artifact: for every
    entry at kernel level, lays out its values and arena as the artifact
    will, asks the CUDA kernel selection (`codegen/cuda/kernel_selection.h`)
    which kernels may run each step by the batch's row count, and records
    them on the step's op as `xfmr.variants`, in the manifest's shape
    (`runtime/artifact/kernel_variant.h`). The module records the target as
    `xfmr.target`. The CUDA backend dispatches only among the variants.

    ```mlir
    // after (target=sm_90a, activation-type=bf16)
    %gu = xfmr.gemm %h, %w {xfmr.variants = [
        {role = "fused_single_row", rows = array<i64: 1, 1>, needs = ["stream_gemv"],
         kind = "gemm", params = {gemv_max_rows = 1 : i64, gemv_stream = true, silu_mul = true, ...},
         instance = "gemm_..."},
        {role = "fused", rows = array<i64: 2, 8>, kind = "gemm", params = {...}, instance = "gemm_..."},
        {role = "cublaslt", rows = array<i64: 9, -1>} ]} : ...
    %a = xfmr.kernel "silu_mul"(%gu) {params = {...}, xfmr.variants = [
        {role = "step", ...}, {role = "absorbed", rows = array<i64: 1, 8>} ]} : ...
    ```

    Which kernels the target has: the wgmma kernels (flash attention's
    prefill, gemm_swiglu) on sm_90 and sm_90a; the streamed single-row GEMV
    from sm_90 on; an f32 plan runs every GEMM on cuBLASLt. `target=cpu`
    chooses nothing: the plan is the CPU backend's, and any earlier choice
    is removed. Entries with steps outside the plan schema (speculative
    verify) get no variants.
  }];
  let options = [
    Option<"target", "target", "std::string", "std::string(::kiln::PlanOptions::kDefaultTarget)",
           "GPU architecture to choose kernels for (sm_80, ..., sm_90a), or cpu for none">,
    Option<"activationType", "activation-type", "std::string", "std::string(::kiln::PlanOptions::kDefaultActivationType)",
           "The plan's activation type (bf16 or f32 have CUDA kernels)">,
  ];
}

def PlanMegakernel : Pass<"xfmr-plan-megakernel", "::mlir::ModuleOp"> {
  let summary = "Cut the decode entry into the megakernel's tile tasks, "
                "dependency counters and task order";
  let description = [{
    For the persistent decode kernel (docs/design/megakernel.md): lays
    out `@forward` as the artifact will and cuts each step into tasks, a
    gemm into tiles of `tile` output columns over all rows, paged attention
    into one task per (sequence slot, kv head) for `max-batch` slots, any
    other step into one task. Each step has a counter its tasks signal; a
    task waits for the counters of the steps it reads from, and of those
    that last used arena rows or pools it overwrites, at their final value.
    Tasks are listed in the order the SMs take them (topological, by
    dependency level, weight-heavy tiles first within a level). The graph
    is the func's `xfmr.megakernel` (codegen/MegakernelAttr.h) and the
    entry's "megakernel" section in manifest.json.

    ```mlir
    // after (max-batch=2, tile=64)
    func.func @forward(...) attributes {xfmr.megakernel = {max_batch = 2 : i64, tile = 64 : i64,
        counters = [{final = 1 : i64, id = 0 : i64, step = 0 : i64}, ...],
        tasks = [{kind = "embedding", step = 0 : i64, waits = array<i64>, signals = array<i64: 0>},
                 {kind = "gemm", step = 2 : i64, columns = array<i64: 0, 64>,
                  waits = array<i64: 1, 1>, signals = array<i64: 2>}, ...]}}
    ```
  }];
  let options = [
    Option<"maxBatch", "max-batch", "int64_t", "8",
           "Sequences a decode step carries at most (attention task slots)">,
    Option<"tile", "tile", "int64_t", "64",
           "Output columns of a gemm task">,
  ];
  let dependentDialects = ["::kiln::xfmr::XfmrDialect"];
}

#endif // KILN_PASSES
