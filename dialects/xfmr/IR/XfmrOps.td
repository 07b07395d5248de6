//===- XfmrOps.td - xfmr operations ------------------------*- tablegen -*-===//
//
// Unfused ops first (the importer's vocabulary), then the fused, paged,
// quantized, speculative-verify and kernel-level forms the passes produce.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_XFMR_OPS
#define KILN_XFMR_OPS

include "XfmrDialect.td"
include "XfmrTypes.td"
include "XfmrAttrs.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/OpAsmInterface.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"

// Tensors whose element type may be a builtin float/int or a quantized type.
def Xfmr_Tensor : RankedTensorOf<[AnyType]>;
def Xfmr_IndexTensor : RankedTensorOf<[I32, I64]>;

// Every tensor op in xfmr is free of side effects unless it touches a KV pool.
class Xfmr_PureOp<string mnemonic, list<Trait> traits = []>
    : Xfmr_Op<mnemonic, !listconcat([Pure], traits)>;

//===----------------------------------------------------------------------===//
// Unfused form
//===----------------------------------------------------------------------===//

def Xfmr_WeightOp : Xfmr_PureOp<"weight"> {
  let summary = "A symbolic reference to a named model weight";
  let description = [{
    Names a tensor of the model checkpoint. The shape and element type are
    the tensor's as stored (a GGUF Q4_1 tensor keeps its quantized type); the
    data is bound by the runtime at load time, never embedded in the IR.

    ```mlir
    %wq = xfmr.weight "blk.0.attn_q.weight" : tensor<576x576x!xfmr.quant<"q4_1", 32>>
    ```
  }];
  let arguments = (ins StrAttr:$name);
  let results = (outs Xfmr_Tensor:$result);
  let assemblyFormat = "$name attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Xfmr_EmbedOp : Xfmr_PureOp<"embed"> {
  let summary = "Token embedding lookup";
  let description = [{
    Gathers rows of the embedding table `[vocab, hidden]` for token ids `[S]`,
    giving `[S, hidden]` activations.

    ```mlir
    %x = xfmr.embed %tokens, %table : (tensor<?xi32>, tensor<49152x576x!xfmr.quant<"q8_0", 32>>) -> tensor<?x576xf32>
    ```
  }];
  let arguments = (ins Xfmr_IndexTensor:$tokens, Xfmr_Tensor:$table,
                       OptionalAttr<F64Attr>:$scale);
  let results = (outs Xfmr_Tensor:$result);
  let assemblyFormat = "$tokens `,` $table attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Xfmr_WeightOffsetOp : Xfmr_PureOp<"weight_offset"> {
  let summary = "A weight plus a constant, made once at load in f32";
  let description = [{
    `result = f32(input) + offset`. Gemma's RMSNorm scales by `1 + w`,
    computed in float; folding the 1 into the weight at load gives the same
    f32 scale, so the norm kernels stay `x / rms · weight`.

    ```mlir
    %w1 = xfmr.weight_offset %w {offset = 1.0 : f64} : tensor<1152xbf16> -> tensor<1152xf32>
    ```
  }];
  let arguments = (ins Xfmr_Tensor:$input, F64Attr:$offset);
  let results = (outs RankedTensorOf<[F32]>:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Xfmr_RmsNormOp : Xfmr_PureOp<"rms_norm"> {
  let summary = "Root-mean-square normalisation over the last dimension";
  let description = [{
    `y = x / sqrt(mean(x²) + epsilon) · weight`, with `weight` of shape
    `[hidden]` matching the last dimension of `x`.

    ```mlir
    %y = xfmr.rms_norm %x, %w {epsilon = 1.0e-05 : f64} : (tensor<?x576xf32>, tensor<576xf32>) -> tensor<?x576xf32>
    ```
  }];
  let arguments = (ins Xfmr_Tensor:$input, Xfmr_Tensor:$weight, F64Attr:$epsilon);
  let results = (outs Xfmr_Tensor:$result);
  let assemblyFormat = "$input `,` $weight attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Xfmr_LinearOp : Xfmr_PureOp<"linear"> {
  let summary = "Multiplication by a weight matrix: y = x · Wᵀ (+ bias)";
  let description = [{
    `x` is `[..., in]`, `weight` is `[out, in]` (PyTorch layout) and the
    optional `bias` is `[out]`. The weight may have a quantized element type;
    the result is `[..., out]` in the activation type.

    ```mlir
    %q = xfmr.linear %x, %wq : (tensor<?x576xf32>, tensor<576x576x!xfmr.quant<"q4_1", 32>>) -> tensor<?x576xf32>
    %k = xfmr.linear %x, %wk, %bk : (tensor<?x896xf32>, tensor<128x896xf32>, tensor<128xf32>) -> tensor<?x128xf32>
    ```
  }];
  let arguments = (ins Xfmr_Tensor:$input, Xfmr_Tensor:$weight,
                       Optional<Xfmr_Tensor>:$bias);
  let results = (outs Xfmr_Tensor:$result);
  let assemblyFormat = "$input `,` $weight (`,` $bias^)? attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

class Xfmr_ElementwiseBinaryOp<string mnemonic, string formula>
    : Xfmr_PureOp<mnemonic, [SameOperandsAndResultType]> {
  let summary = "Elementwise " # formula;
  let description = [{
    Elementwise on two tensors of one type, giving the same type.

    ```mlir
    %r = xfmr.}] # mnemonic # [{ %a, %b : tensor<?x576xf32>
    ```
  }];
  let arguments = (ins Xfmr_Tensor:$lhs, Xfmr_Tensor:$rhs);
  let results = (outs Xfmr_Tensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($result)";
}

def Xfmr_AddOp : Xfmr_PureOp<"add",
    [DeclareOpInterfaceMethods<InferTypeOpInterface>]> {
  let summary = "Elementwise a + b, promoting to the wider float type";
  let description = [{
    Elementwise on two tensors of one shape. The element types are equal, or
    two float types of different widths, and the result has the wider one:
    a residual stream kept in f32 adds a bf16 branch output without rounding
    the sum to bf16. The type list is written once when all three agree.

    ```mlir
    %r = xfmr.add %a, %b : tensor<?x576xf32>
    %s = xfmr.add %x, %o : (tensor<?x576xf32>, tensor<?x576xbf16>) -> tensor<?x576xf32>
    ```
  }];
  let arguments = (ins Xfmr_Tensor:$lhs, Xfmr_Tensor:$rhs);
  let results = (outs Xfmr_Tensor:$result);
  let assemblyFormat =
      "$lhs `,` $rhs attr-dict `:` custom<PromotedTypes>(type($lhs), type($rhs), type($result))";
  let hasVerifier = 1;
}
def Xfmr_MulOp : Xfmr_ElementwiseBinaryOp<"mul", "a · b">;

def Xfmr_SiluOp : Xfmr_PureOp<"silu", [SameOperandsAndResultType]> {
  let summary = "SiLU activation: x · sigmoid(x)";
  let description = [{
    ```mlir
    %a = xfmr.silu %g : tensor<?x1536xf32>
    ```
  }];
  let arguments = (ins Xfmr_Tensor:$input);
  let results = (outs Xfmr_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

def Xfmr_GeluTanhOp : Xfmr_PureOp<"gelu_tanh", [SameOperandsAndResultType]> {
  let summary = "GELU, tanh approximation: x/2 · (1 + tanh(sqrt(2/pi) · (x + 0.044715 x³)))";
  let description = [{
    PyTorch's `gelu(approximate="tanh")` (Gemma's `gelu_pytorch_tanh`).

    ```mlir
    %a = xfmr.gelu_tanh %g : tensor<?x6912xf32>
    ```
  }];
  let arguments = (ins Xfmr_Tensor:$input);
  let results = (outs Xfmr_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

def Xfmr_RopeOp : Xfmr_PureOp<"rope", [AllTypesMatch<["input", "result"]>]> {
  let summary = "Rotary position embedding";
  let description = [{
    Rotates pairs of the head dimension of `input` `[S, heads, D]` by angles
    `position · inv_freq[i]`, with positions `[S]` and the frequencies,
    pairing style and scaling given by `rope`.

    ```mlir
    %qr = xfmr.rope %q, %pos {rope = #xfmr.rope<theta = 100000.0, style = "interleaved", scaling = "none", factor = 1.0, low_freq_factor = 1.0, high_freq_factor = 1.0, original_max_position = 8192>} : (tensor<?x9x64xf32>, tensor<?xi32>) -> tensor<?x9x64xf32>
    ```
  }];
  let arguments = (ins Xfmr_Tensor:$input, Xfmr_IndexTensor:$positions,
                       Xfmr_RopeAttr:$rope);
  let results = (outs Xfmr_Tensor:$result);
  let assemblyFormat = "$input `,` $positions attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Xfmr_ReshapeOp : Xfmr_PureOp<"reshape"> {
  let summary = "Reshape without moving data";
  let description = [{
    Same elements, new shape. At most one dimension of each side may be
    dynamic; the static element counts of the two sides must then agree.

    ```mlir
    %q3 = xfmr.reshape %q : tensor<?x576xf32> -> tensor<?x9x64xf32>
    ```
  }];
  let arguments = (ins Xfmr_Tensor:$input);
  let results = (outs Xfmr_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Xfmr_TransposeOp : Xfmr_PureOp<"transpose"> {
  let summary = "Permute dimensions";
  let description = [{
    `result.shape[i] = input.shape[permutation[i]]`.

    ```mlir
    %qt = xfmr.transpose %q {permutation = array<i64: 1, 0, 2>} : tensor<?x9x64xf32> -> tensor<9x?x64xf32>
    ```
  }];
  let arguments = (ins Xfmr_Tensor:$input, DenseI64ArrayAttr:$permutation);
  let results = (outs Xfmr_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Xfmr_ConcatOp : Xfmr_PureOp<"concat"> {
  let summary = "Concatenate tensors along one axis";
  let description = [{
    ```mlir
    %c = xfmr.concat %a, %b {axis = 1 : i64} : (tensor<?x576xf32>, tensor<?x192xf32>) -> tensor<?x768xf32>
    ```
  }];
  let arguments = (ins Variadic<Xfmr_Tensor>:$inputs, I64Attr:$axis);
  let results = (outs Xfmr_Tensor:$result);
  let assemblyFormat = "$inputs attr-dict `:` functional-type($inputs, results)";
  let hasVerifier = 1;
}

def Xfmr_SplitOp : Xfmr_PureOp<"split"> {
  let summary = "Split a tensor into consecutive slices along one axis";
  let description = [{
    The inverse of `xfmr.concat`: result `i` holds `sizes[i]` consecutive
    entries along `axis`. Merged projections use it to recover Q, K and V
    (or gate and up) from one GEMM's output.

    ```mlir
    %q, %k, %v = xfmr.split %qkv {axis = 1 : i64, sizes = array<i64: 576, 192, 192>} : tensor<?x960xf32> -> tensor<?x576xf32>, tensor<?x192xf32>, tensor<?x192xf32>
    ```
  }];
  let arguments = (ins Xfmr_Tensor:$input, I64Attr:$axis, DenseI64ArrayAttr:$sizes);
  let results = (outs Variadic<Xfmr_Tensor>:$results);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($results)";
  let hasVerifier = 1;
}

def Xfmr_StackOp : Xfmr_PureOp<"stack"> {
  let summary = "Stack tensors of one shape along a new leading axis";
  let description = [{
    `result[i] = inputs[i]`: N tensors of shape `[d...]` give `[N, d...]`.
    The importer groups a mixture-of-experts layer's per-expert weights
    (`experts.{e}.gate_proj`, ...) into one `[experts, out, in]` tensor this
    way; the artifact makes it once at load, row blocks back to back.

    ```mlir
    %wg = xfmr.stack %g0, %g1 : (tensor<96x64xf32>, tensor<96x64xf32>) -> tensor<2x96x64xf32>
    ```
  }];
  let arguments = (ins Variadic<Xfmr_Tensor>:$inputs);
  let results = (outs Xfmr_Tensor:$result);
  let assemblyFormat = "$inputs attr-dict `:` functional-type($inputs, results)";
  let hasVerifier = 1;
}

def Xfmr_MoeRouterOp : Xfmr_PureOp<"moe_router"> {
  let summary = "Mixture-of-experts routing: softmax over experts, then top-k";
  let description = [{
    `router_logits` is `[S, experts]`. Each row is softmaxed in f32 and its
    `top_k` largest probabilities kept, largest first: `weights` `[S, top_k]`
    (in the activation type) and `experts` `[S, top_k]` (i32 expert ids).
    With `normalize` the kept weights are divided by their sum (Mixtral;
    Qwen3-MoE's `norm_topk_prob`), else they stay softmax probabilities.

    ```mlir
    %w, %e = xfmr.moe_router %logits {top_k = 2 : i64, normalize = true} : tensor<?x8xf32> -> tensor<?x2xf32>, tensor<?x2xi32>
    ```
  }];
  let arguments = (ins Xfmr_Tensor:$router_logits, I64Attr:$top_k, BoolAttr:$normalize);
  let results = (outs Xfmr_Tensor:$weights, RankedTensorOf<[I32]>:$experts);
  let assemblyFormat = "$router_logits attr-dict `:` type($router_logits) `->` type($weights) `,` type($experts)";
  let hasVerifier = 1;
}

def Xfmr_MoeFfnOp : Xfmr_PureOp<"moe_ffn"> {
  let summary = "Mixture-of-experts SwiGLU FFN over each token's routed experts";
  let description = [{
    For each token t and each of its k routed experts e = `experts[t, k]`:
    `y[t] += weights[t, k] · down[e] · (silu(gate[e] · x[t]) ⊙ up[e] · x[t])`.
    `x` is `[S, hidden]`, `weights` / `experts` `[S, top_k]` (from
    `xfmr.moe_router`), `gate` and `up` `[experts, ffn, hidden]`, `down`
    `[experts, hidden, ffn]`. The backends group the tokens routed to each
    expert and run that expert's weights once over its group.

    ```mlir
    %y = xfmr.moe_ffn %x, %w, %e, %wg, %wu, %wd : (tensor<?x64xf32>, tensor<?x2xf32>, tensor<?x2xi32>, tensor<4x96x64xf32>, tensor<4x96x64xf32>, tensor<4x64x96xf32>) -> tensor<?x64xf32>
    ```
  }];
  let arguments = (ins Xfmr_Tensor:$input, Xfmr_Tensor:$weights, RankedTensorOf<[I32]>:$experts,
                       Xfmr_Tensor:$gate, Xfmr_Tensor:$up, Xfmr_Tensor:$down);
  let results = (outs Xfmr_Tensor:$result);
  let assemblyFormat = "$input `,` $weights `,` $experts `,` $gate `,` $up `,` $down attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Xfmr_BatchMatmulOp : Xfmr_PureOp<"batch_matmul"> {
  let summary = "Batched matrix product";
  let description = [{
    `[B, M, K] · [B, K, N] -> [B, M, N]`, or with `transpose_rhs`
    `[B, M, K] · [B, N, K]ᵀ -> [B, M, N]`.

    ```mlir
    %s = xfmr.batch_matmul %q, %k {transpose_rhs} : (tensor<9x?x64xf32>, tensor<9x?x64xf32>) -> tensor<9x?x?xf32>
    ```
  }];
  let arguments = (ins Xfmr_Tensor:$lhs, Xfmr_Tensor:$rhs, UnitAttr:$transpose_rhs);
  let results = (outs Xfmr_Tensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Xfmr_ScaleOp : Xfmr_PureOp<"scale", [SameOperandsAndResultType]> {
  let summary = "Multiply by a constant factor";
  let description = [{
    ```mlir
    %s = xfmr.scale %scores {factor = 0.125 : f64} : tensor<9x?x?xf32>
    ```
  }];
  let arguments = (ins Xfmr_Tensor:$input, F64Attr:$factor);
  let results = (outs Xfmr_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

def Xfmr_CausalMaskOp : Xfmr_PureOp<"causal_mask", [SameOperandsAndResultType]> {
  let summary = "Mask attention scores to the causal pattern";
  let description = [{
    On scores `[heads, S, T]` with `T = P + S`, sets score `(h, i, j)` to −∞
    where key `j` lies after query `i`'s position, `j > P + i`. With a
    `sliding_window` W the query also loses the keys W or more positions
    back: it sees keys `(P + i - W, P + i]`, W of them at most (Mistral's,
    and the sliding layers' of Qwen2/3, as transformers masks them).

    ```mlir
    %m = xfmr.causal_mask %s : tensor<9x?x?xf32>
    %w = xfmr.causal_mask %s {sliding_window = 4096 : i64} : tensor<9x?x?xf32>
    ```
  }];
  let arguments = (ins Xfmr_Tensor:$input, OptionalAttr<I64Attr>:$sliding_window);
  let results = (outs Xfmr_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Xfmr_SoftmaxOp : Xfmr_PureOp<"softmax", [SameOperandsAndResultType]> {
  let summary = "Softmax along one axis";
  let description = [{
    ```mlir
    %p = xfmr.softmax %m {axis = 2 : i64} : tensor<9x?x?xf32>
    ```
  }];
  let arguments = (ins Xfmr_Tensor:$input, I64Attr:$axis);
  let results = (outs Xfmr_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Xfmr_RepeatKvOp : Xfmr_PureOp<"repeat_kv"> {
  let summary = "Repeat KV heads for grouped-query attention";
  let description = [{
    `[Hkv, T, D] -> [Hkv·repeats, T, D]`: output head `h` is input head
    `h / repeats`.

    ```mlir
    %k9 = xfmr.repeat_kv %k3 {repeats = 3 : i64} : tensor<3x?x64xf32> -> tensor<9x?x64xf32>
    ```
  }];
  let arguments = (ins Xfmr_Tensor:$input, I64Attr:$repeats);
  let results = (outs Xfmr_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Xfmr_KvConcatOp : Xfmr_PureOp<"kv_concat"> {
  let summary = "Append new keys or values to the past KV state";
  let description = [{
    `past [P, Hkv, D]` and `new [S, Hkv, D]` give `[P + S, Hkv, D]`: the
    contiguous KV cache of the unfused form, rewritten into a paged append
    by `xfmr-page-kv-cache`.

    ```mlir
    %k = xfmr.kv_concat %past_k, %k_new : (tensor<?x3x64xf32>, tensor<?x3x64xf32>) -> tensor<?x3x64xf32>
    ```
  }];
  let arguments = (ins Xfmr_Tensor:$past, Xfmr_Tensor:$update);
  let results = (outs Xfmr_Tensor:$result);
  let assemblyFormat = "$past `,` $update attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Xfmr_LogitsOp : Xfmr_PureOp<"logits"> {
  let summary = "Project hidden states onto the vocabulary";
  let description = [{
    `hidden [R, hidden] · lm_head [vocab, hidden]ᵀ -> [R, vocab]`. Kept apart
    from `xfmr.linear` because only the rows whose next token is sampled need
    it (the paging pass gathers them first), and its weight may be tied to
    the embedding table.

    ```mlir
    %l = xfmr.logits %h, %table : (tensor<?x576xf32>, tensor<49152x576xf32>) -> tensor<?x49152xf32>
    ```
  }];
  let arguments = (ins Xfmr_Tensor:$hidden, Xfmr_Tensor:$weight);
  let results = (outs Xfmr_Tensor:$result);
  let assemblyFormat = "$hidden `,` $weight attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Fused form (xfmr-fuse-attention)
//===----------------------------------------------------------------------===//

def Xfmr_AttentionOp : Xfmr_PureOp<"attention"> {
  let summary = "Scaled dot-product attention with grouped-query heads";
  let description = [{
    `softmax(q·kᵀ·scale + mask)·v` in one op, computed flash-style (online
    softmax, no score matrix). `query [S, H, D]`, `key`/`value [T, Hkv, D]`
    with `H % Hkv == 0`; query head `h` reads KV head `h / (H / Hkv)`.
    `causal` masks key `j > (T - S) + i`; a `sliding_window` W (causal only)
    also masks keys `j <= (T - S) + i - W`.

    ```mlir
    %o = xfmr.attention %q, %k, %v {scale = 0.125 : f64, causal} : (tensor<?x9x64xf32>, tensor<?x3x64xf32>, tensor<?x3x64xf32>) -> tensor<?x9x64xf32>
    %w = xfmr.attention %q, %k, %v {scale = 0.125 : f64, causal, sliding_window = 4096 : i64} : (tensor<?x9x64xf32>, tensor<?x3x64xf32>, tensor<?x3x64xf32>) -> tensor<?x9x64xf32>
    ```
  }];
  let arguments = (ins Xfmr_Tensor:$query, Xfmr_Tensor:$key, Xfmr_Tensor:$value,
                       F64Attr:$scale, UnitAttr:$causal,
                       OptionalAttr<I64Attr>:$sliding_window);
  let results = (outs Xfmr_Tensor:$result);
  let assemblyFormat = "$query `,` $key `,` $value attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Xfmr_FusionRegionOp : Xfmr_Op<"fusion_region", [IsolatedFromAbove,
    SingleBlockImplicitTerminator<"YieldOp">, RecursiveMemoryEffects]> {
  let summary = "A chain of elementwise and reduction ops run as one kernel";
  let description = [{
    Groups ops that the lowering turns into a single generated kernel. `kind`
    names the recognised pattern (`residual_rms_norm`, `silu_mul`,
    `rope_kv_write`, `moe_route`); the body computes the results from the block arguments.

    ```mlir
    %h, %n = xfmr.fusion_region "residual_rms_norm" (%x, %r, %w) : (tensor<?x576xf32>, tensor<?x576xf32>, tensor<576xf32>) -> (tensor<?x576xf32>, tensor<?x576xf32>) {
    ^bb0(%a: tensor<?x576xf32>, %b: tensor<?x576xf32>, %c: tensor<576xf32>):
      %s = xfmr.add %a, %b : tensor<?x576xf32>
      %y = xfmr.rms_norm %s, %c {epsilon = 1.0e-05 : f64} : (tensor<?x576xf32>, tensor<576xf32>) -> tensor<?x576xf32>
      xfmr.yield %s, %y : tensor<?x576xf32>, tensor<?x576xf32>
    }
    ```
  }];
  let arguments = (ins StrAttr:$kind, Variadic<AnyType>:$inputs);
  let results = (outs Variadic<AnyType>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$kind `(` $inputs `)` attr-dict `:` functional-type($inputs, $results) $body";
  let hasVerifier = 1;
}

def Xfmr_YieldOp : Xfmr_Op<"yield", [Pure, Terminator, ReturnLike,
    HasParent<"FusionRegionOp">]> {
  let summary = "Results of a fusion region";
  let description = [{
    ```mlir
    xfmr.yield %a, %b : tensor<?x576xf32>, tensor<?x576xf32>
    ```
  }];
  let arguments = (ins Variadic<AnyType>:$values);
  let assemblyFormat = "($values^ `:` type($values))? attr-dict";
  let builders = [OpBuilder<(ins), [{ build($_builder, $_state, std::nullopt); }]>];
}

//===----------------------------------------------------------------------===//
// Paged form (xfmr-page-kv-cache)
//===----------------------------------------------------------------------===//

def Xfmr_PagedKvAppendOp : Xfmr_Op<"paged_kv_append"> {
  let summary = "Write new keys and values into their KV pool slots";
  let description = [{
    `key`/`value [N, Hkv, D]` for the N flattened tokens of a ragged batch
    are written to `slot_mapping [N]` (slot = block · page_size + offset) of
    the layer's pools. Into an `i8` or `f8E4M3FN` pool each (token, kv head)
    row goes quantized, with its scale absmax / qmax (127, or 448 for e4m3)
    written to the pool's scales.

    ```mlir
    xfmr.paged_kv_append %k, %v, %k_pool, %v_pool, %slots : tensor<?x3x64xf32>, tensor<?x3x64xf32>, !xfmr.kv_pool<16, 3, 64, f32>, !xfmr.kv_pool<16, 3, 64, f32>, tensor<?xi32>
    ```
  }];
  let arguments = (ins Xfmr_Tensor:$key, Xfmr_Tensor:$value,
                       Arg<Xfmr_KvPoolType, "", [MemWrite]>:$key_pool,
                       Arg<Xfmr_KvPoolType, "", [MemWrite]>:$value_pool,
                       Xfmr_IndexTensor:$slot_mapping);
  let assemblyFormat = "$key `,` $value `,` $key_pool `,` $value_pool `,` $slot_mapping attr-dict `:` type($key) `,` type($value) `,` type($key_pool) `,` type($value_pool) `,` type($slot_mapping)";
  let hasVerifier = 1;
}

def Xfmr_PagedAttentionOp : Xfmr_Op<"paged_attention"> {
  let summary = "Attention over a paged KV pool for a ragged batch";
  let description = [{
    `query [N, H, D]` holds the flattened new tokens of B sequences (prefill
    chunks and decode tokens mixed). Sequence `b` owns queries
    `query_start[b] .. query_start[b+1]` (`query_start [B+1]`), has
    `kv_lens[b]` keys in total (`kv_lens [B]`, new tokens included) and finds
    them through `block_tables [B, max_blocks]`. Causal within each
    sequence; an optional `tree_mask` (`[N, max_tree]` i8) restricts draft
    tokens to their ancestors during speculative verify. A `sliding_window`
    W restricts the query at position p to keys `(p - W, p]`: the pool's
    blocks wholly before the window are never read (and the runtime may
    free them). A window and a tree mask do not go together.

    ```mlir
    %o = xfmr.paged_attention %q, %k_pool, %v_pool, %tables, %qstart, %kvlens {scale = 0.125 : f64} : (tensor<?x9x64xf32>, !xfmr.kv_pool<16, 3, 64, f32>, !xfmr.kv_pool<16, 3, 64, f32>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32>) -> tensor<?x9x64xf32>
    %w = xfmr.paged_attention %q, %k_pool, %v_pool, %tables, %qstart, %kvlens {scale = 0.125 : f64, sliding_window = 4096 : i64} : (tensor<?x9x64xf32>, !xfmr.kv_pool<16, 3, 64, f32>, !xfmr.kv_pool<16, 3, 64, f32>, tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32>) -> tensor<?x9x64xf32>
    ```
  }];
  let arguments = (ins Xfmr_Tensor:$query,
                       Arg<Xfmr_KvPoolType, "", [MemRead]>:$key_pool,
                       Arg<Xfmr_KvPoolType, "", [MemRead]>:$value_pool,
                       Xfmr_IndexTensor:$block_tables,
                       Xfmr_IndexTensor:$query_start,
                       Xfmr_IndexTensor:$kv_lens,
                       Optional<Xfmr_Tensor>:$tree_mask,
                       F64Attr:$scale,
                       OptionalAttr<I64Attr>:$sliding_window);
  let results = (outs Xfmr_Tensor:$result);
  let assemblyFormat = "$query `,` $key_pool `,` $value_pool `,` $block_tables `,` $query_start `,` $kv_lens (`tree_mask` $tree_mask^)? attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Xfmr_GatherLastTokensOp : Xfmr_PureOp<"gather_last_tokens"> {
  let summary = "Pick each sequence's last token row from a ragged batch";
  let description = [{
    `hidden [N, hidden]` and `query_start [B+1]` give `[B, hidden]`: row
    `query_start[b+1] - 1` of each sequence, the only rows whose logits
    are sampled.

    ```mlir
    %last = xfmr.gather_last_tokens %h, %qstart : (tensor<?x576xf32>, tensor<?xi32>) -> tensor<?x576xf32>
    ```
  }];
  let arguments = (ins Xfmr_Tensor:$hidden, Xfmr_IndexTensor:$query_start);
  let results = (outs Xfmr_Tensor:$result);
  let assemblyFormat = "$hidden `,` $query_start attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Quantized form (xfmr-insert-quantization)
//===----------------------------------------------------------------------===//

def Xfmr_QuantizeOp : Xfmr_PureOp<"quantize"> {
  let summary = "Quantize a tensor to one of kiln's schemes, giving its scales";
  let description = [{
    Converts `input [..., C]` to the `!xfmr.quant` element type of `result`
    (kiln's schemes only: `int8`, `int4`, `fp8e4m3`; GGUF block formats are
    loaded, never produced) and returns the scales it used. `group` is the
    number of elements of the last dimension that share one scale and must
    equal the quant type's block: `0` means one scale per row (`scales
    [...]`, the input shape without its last dimension), `G > 0` means
    `scales [..., C/G]` with `C % G == 0`.

    A `!xfmr.quant<"sp24", 0>` input (from `xfmr.sparsify`) gives an
    `int8sp24` or `int4sp24` result: the kept values are quantized, the
    group counting input columns of the dense row.

    Without `scales` the scales are computed from the data (absmax / qmax
    per row or group); with a given `scales` operand the input is quantized
    against it and the `scales` result is that operand.

    On weights (everything upstream is `xfmr.weight`) the lowering hoists
    the op into load-time weight preparation: the model is quantized once
    when it is loaded, not on every step.

    ```mlir
    // int8 per output channel: scales [out]
    %q, %s = xfmr.quantize %w {group = 0 : i64} : (tensor<1536x576xf32>) -> (tensor<1536x576x!xfmr.quant<"int8", 0>>, tensor<1536xf32>)
    // int4 in groups of 64 along the input features: scales [out, in/64]
    %q4, %s4 = xfmr.quantize %w {group = 64 : i64} : (tensor<1536x576xf32>) -> (tensor<1536x576x!xfmr.quant<"int4", 64>>, tensor<1536x9xf32>)
    // against given per-(token, head) scales, e.g. for KV
    %kq, %ks = xfmr.quantize %k scales %kscale {group = 0 : i64} : (tensor<?x2x16xf32>, tensor<?x2xf32>) -> (tensor<?x2x16x!xfmr.quant<"int8", 0>>, tensor<?x2xf32>)
    ```
  }];
  let arguments = (ins Xfmr_Tensor:$input, Optional<Xfmr_Tensor>:$given_scales,
                       I64Attr:$group);
  let results = (outs Xfmr_Tensor:$result, Xfmr_Tensor:$scales);
  let assemblyFormat = "$input (`scales` $given_scales^)? attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Xfmr_SparsifyOp : Xfmr_PureOp<"sparsify"> {
  let summary = "Compress a weight to the 2:4 structured-sparse form";
  let description = [{
    Keeps two weights in every group of four consecutive input columns of
    each row of `input [out, in]` (`in` a multiple of 64) and gives them as
    `!xfmr.quant<"sp24", 0>`: the kept values and a 4-bit index pair per
    group (docs/design/sparsity.md). `method = "magnitude"` keeps the two of
    largest magnitude; `method = "sparsegpt"` says the weight was pruned
    before the compile, and the load refuses it if a group holds more than
    two nonzeros. The input is float or a GGUF block type (dequantized
    first). On weights the lowering hoists the op into load-time weight
    preparation, as `xfmr.quantize`.

    ```mlir
    %s = xfmr.sparsify %w {pattern = "2:4", method = "magnitude"} : (tensor<1536x576xf32>) -> tensor<1536x576x!xfmr.quant<"sp24", 0>>
    ```
  }];
  let arguments = (ins Xfmr_Tensor:$input, StrAttr:$pattern, StrAttr:$method);
  let results = (outs Xfmr_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Xfmr_DequantizeOp : Xfmr_PureOp<"dequantize"> {
  let summary = "Expand a quantized tensor to a float type";
  let description = [{
    The inverse of `xfmr.quantize`. kiln's schemes take the scales of the
    matching quantize (`[...]` for block 0, `[..., C/block]` otherwise);
    GGUF block formats carry their scales inside the blocks and take none.

    ```mlir
    %w = xfmr.dequantize %q, %s : (tensor<576x576x!xfmr.quant<"int8", 0>>, tensor<576xf32>) -> tensor<576x576xf32>
    %e = xfmr.dequantize %t : (tensor<128x64x!xfmr.quant<"q8_0", 32>>) -> tensor<128x64xf32>
    ```
  }];
  let arguments = (ins Xfmr_Tensor:$input, Optional<Xfmr_Tensor>:$scales);
  let results = (outs Xfmr_Tensor:$result);
  let assemblyFormat = "$input (`,` $scales^)? attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Xfmr_QuantizedLinearOp : Xfmr_PureOp<"quantized_linear", [AttrSizedOperandSegments]> {
  let summary = "y = x · dequant(W)ᵀ (+ bias) without materialising W";
  let description = [{
    The weight's `!xfmr.quant` element type names the scheme. GGUF block
    formats carry their scales inside the blocks (no `scales` operand); kiln's
    int8/int4/fp8 schemes take `scales [out]` (block 0, per output channel)
    or `[out, in/block]` (per group).

    ```mlir
    %y = xfmr.quantized_linear %x, %w : (tensor<?x576xf32>, tensor<1536x576x!xfmr.quant<"q4_1", 32>>) -> tensor<?x1536xf32>
    %z = xfmr.quantized_linear %x, %w8 scales %s : (tensor<?x576xf32>, tensor<1536x576x!xfmr.quant<"int8", 0>>, tensor<1536xf32>) -> tensor<?x1536xf32>
    %u = xfmr.quantized_linear %x, %w4 scales %s4 bias %b : (tensor<?x576xf32>, tensor<1536x576x!xfmr.quant<"int4", 64>>, tensor<1536x9xf32>, tensor<1536xf32>) -> tensor<?x1536xf32>
    ```
  }];
  let arguments = (ins Xfmr_Tensor:$input, Xfmr_Tensor:$weight,
                       Optional<Xfmr_Tensor>:$scales, Optional<Xfmr_Tensor>:$bias);
  let results = (outs Xfmr_Tensor:$result);
  let assemblyFormat = "$input `,` $weight (`scales` $scales^)? (`bias` $bias^)? attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Speculative verify (xfmr-expand-spec-verify)
//===----------------------------------------------------------------------===//

// A ragged batch of token trees: sequence b owns nodes
// query_start[b] .. query_start[b+1]; `parents [N]` holds each node's parent
// as an index local to its own tree (0 = the tree's first node), −1 for the
// root, which is the sequence's last accepted token. Parents precede their
// children (parents[i] < i - query_start[b]).

def Xfmr_TreePositionsOp : Xfmr_PureOp<"tree_positions"> {
  let summary = "Positions of token-tree nodes: base position + depth";
  let description = [{
    `parents [N]`, `base [B]` (the root's position per sequence) and
    `query_start [B+1]` give `[N]` positions `base[b] + depth(node)`, the
    root having depth 0. Siblings share a position.

    ```mlir
    // two sequences, chain of 2 drafts each: parents = [-1, 0, 1, -1, 0, 1]
    %pos = xfmr.tree_positions %parents, %base, %qstart : (tensor<?xi32>, tensor<?xi32>, tensor<?xi32>) -> tensor<?xi32>
    ```
  }];
  let arguments = (ins Xfmr_IndexTensor:$parents, Xfmr_IndexTensor:$base,
                       Xfmr_IndexTensor:$query_start);
  let results = (outs Xfmr_IndexTensor:$result);
  let assemblyFormat = "$parents `,` $base `,` $query_start attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Xfmr_TreeMaskOp : Xfmr_PureOp<"tree_mask"> {
  let summary = "Ancestor mask of a ragged batch of token trees";
  let description = [{
    `parents [N]` and `query_start [B+1]` give `[N, max_tree]` i8 with
    `mask[i][j] = 1` iff local node `j` of `i`'s tree is `i` itself or one
    of its ancestors (columns past the tree's size are 0). This is the
    `tree_mask` of `xfmr.paged_attention`: the tree's nodes are the last
    keys of the sequence, and node `i` sees every earlier key plus the tree
    keys its mask row allows. `max_tree` is static when the tree shape is.

    ```mlir
    %m = xfmr.tree_mask %parents, %qstart : (tensor<?xi32>, tensor<?xi32>) -> tensor<?x11xi8>
    ```
  }];
  let arguments = (ins Xfmr_IndexTensor:$parents, Xfmr_IndexTensor:$query_start);
  let results = (outs RankedTensorOf<[I8]>:$result);
  let assemblyFormat = "$parents `,` $query_start attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Xfmr_AcceptOp : Xfmr_PureOp<"accept"> {
  let summary = "Accept the longest verified path of each draft tree";
  let description = [{
    Walks each sequence's tree from the root, comparing the target
    `logits [N, vocab]` at a node with the draft `tokens [N]` of its children
    (`parents [N]`, `query_start [B+1]`). `mode` is `greedy` (a child is
    accepted iff it is the argmax of its parent's logits: exact, the output
    equals plain greedy decoding) or `rejection` (speculative sampling: a
    child `x` is accepted with probability `min(1, p(x) / q(x))`, `p` the
    target's softmax and `q` the draft's `draft_probs [N, vocab]` row of
    the child, siblings tried in order).

    Results: `accepted [B, max_depth + 1]`, the local node indices of the
    accepted path starting at the root (0), −1 padded, and `count [B]`, the
    number of accepted draft tokens. The bonus token is sampled by the
    runtime from the logits of the last accepted node (for rejection, from
    the residual `max(0, p − q)` when a child was rejected).

    ```mlir
    %path, %n = xfmr.accept %logits, %tokens, %parents, %qstart {mode = "greedy"} : (tensor<?x49152xf32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>) -> (tensor<?x5xi32>, tensor<?xi32>)
    %rp, %rn = xfmr.accept %logits, %tokens, %parents, %qstart draft_probs %q {mode = "rejection"} : (tensor<?x49152xf32>, tensor<?xi32>, tensor<?xi32>, tensor<?xi32>, tensor<?x49152xf32>) -> (tensor<?x5xi32>, tensor<?xi32>)
    ```
  }];
  let arguments = (ins Xfmr_Tensor:$logits, Xfmr_IndexTensor:$tokens,
                       Xfmr_IndexTensor:$parents, Xfmr_IndexTensor:$query_start,
                       Optional<Xfmr_Tensor>:$draft_probs, StrAttr:$mode);
  let results = (outs Xfmr_IndexTensor:$accepted, Xfmr_IndexTensor:$count);
  let assemblyFormat = "$logits `,` $tokens `,` $parents `,` $query_start (`draft_probs` $draft_probs^)? attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Kernel level (lowering)
//===----------------------------------------------------------------------===//

def Xfmr_KernelOp : Xfmr_Op<"kernel"> {
  let summary = "One instance of a generated kernel";
  let description = [{
    The kernel-level form of an op or fusion region: `kind` names the kernel
    family (`rms_norm`, `paged_attention`, ...) and `params` its compile-time
    parameters; together they name one instance in `kernels/*.cu` and one
    routine of the CPU backend.

    ```mlir
    %y = xfmr.kernel "rms_norm" (%x, %w) {params = {hidden = 576 : i64, epsilon = 1.0e-05 : f64}} : (tensor<?x576xf32>, tensor<576xf32>) -> tensor<?x576xf32>
    ```
  }];
  let arguments = (ins StrAttr:$kind, Variadic<AnyType>:$args, DictionaryAttr:$params);
  let results = (outs Variadic<AnyType>:$results);
  let assemblyFormat = "$kind `(` $args `)` attr-dict `:` functional-type($args, $results)";  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The kernel kinds the backends implement (docs/design/artifact.md).
    static llvm::ArrayRef<llvm::StringLiteral> knownKinds();
  }];
}

def Xfmr_GemmOp : Xfmr_PureOp<"gemm", [AttrSizedOperandSegments]> {
  let summary = "One GEMM: y = x · Wᵀ (+ bias), run by cuBLASLt/BLAS or a skinny-GEMM kernel";
  let description = [{
    The kernel-level form of every linear. The weight keeps its stored or
    load-time-prepared element type; kiln's own quantized schemes pass their
    `scales`.

    ```mlir
    %y = xfmr.gemm %x, %w : (tensor<?x576xf32>, tensor<1536x576xbf16>) -> tensor<?x1536xf32>
    %z = xfmr.gemm %x, %q scales %s bias %b : (tensor<?x576xf32>, tensor<1536x576x!xfmr.quant<"int8", 0>>, tensor<1536xf32>, tensor<1536xf32>) -> tensor<?x1536xf32>
    ```
  }];
  let arguments = (ins Xfmr_Tensor:$input, Xfmr_Tensor:$weight,
                       Optional<Xfmr_Tensor>:$scales, Optional<Xfmr_Tensor>:$bias);
  let results = (outs Xfmr_Tensor:$result);
  let assemblyFormat = "$input `,` $weight (`scales` $scales^)? (`bias` $bias^)? attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

// State-space (Mamba) layers.
include "XfmrSsmOps.td"
// Tensor and pipeline parallelism.
include "XfmrParallelOps.td"

#endif // KILN_XFMR_OPS
