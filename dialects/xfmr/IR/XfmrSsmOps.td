//===- XfmrSsmOps.td - state-space (Mamba) ops -------------*- tablegen -*-===//
//
// The unfused form of Mamba and Mamba-2 layers: a causal depthwise conv over
// the sequence, the selective scan (Mamba-1), the chunked state-space dual
// scan (Mamba-2) and its gated RMSNorm. Each scan and conv takes the state a
// sequence carries from its earlier tokens (`past`) and returns the state
// after its last token (`present`): O(1) in the sequence length, the SSM
// counterpart of kv_concat's growing past.
//
// Included from XfmrOps.td.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_XFMR_SSM_OPS
#define KILN_XFMR_SSM_OPS

def Xfmr_CausalConv1dOp : Xfmr_PureOp<"causal_conv1d"> {
  let summary = "Causal depthwise 1-D convolution over the sequence, with its carried inputs";
  let description = [{
    `input [S, C]`, `past [K-1, C]` (the sequence's previous K - 1 inputs,
    zeros before its first token), `weight [C, 1, K]` (PyTorch Conv1d with
    groups = C) and an optional `bias [C]`:
    `y[t, c] = act(bias[c] + Σ_k weight[c, 0, k] · u[t + k, c])` over
    `u = concat(past, input)`; `present [K-1, C]` is u's last K - 1 rows.
    `activation` is `"silu"` or `"none"`.

    ```mlir
    %y, %s = xfmr.causal_conv1d %x, %past, %w bias %b {activation = "silu"} : (tensor<?x128xf32>, tensor<3x128xf32>, tensor<128x1x4xf32>, tensor<128xf32>) -> (tensor<?x128xf32>, tensor<3x128xf32>)
    ```
  }];
  let arguments = (ins Xfmr_Tensor:$input, Xfmr_Tensor:$past, Xfmr_Tensor:$weight,
                       Optional<Xfmr_Tensor>:$bias, StrAttr:$activation);
  let results = (outs Xfmr_Tensor:$result, Xfmr_Tensor:$present);
  let assemblyFormat = "$input `,` $past `,` $weight (`bias` $bias^)? attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Xfmr_SelectiveScanOp : Xfmr_PureOp<"selective_scan"> {
  let summary = "Mamba's selective scan: a per-channel diagonal SSM with input-dependent dt, B, C";
  let description = [{
    `x [S, I]`, `dt [S, I]` (before softplus), `a_log [I, N]`, `b`, `c`
    `[S, N]`, `d [I]`, `past [I, N]` (f32):
    `δ = softplus(dt)`, `A = -exp(a_log)`,
    `s_t = exp(δ_t A) ⊙ s_{t-1} + (δ_t x_t) ⊗ b_t`,
    `y_t = s_t · c_t + d ⊙ x_t`; `present` is s after the last token.

    ```mlir
    %y, %s = xfmr.selective_scan %x, %dt, %alog, %b, %c, %d, %past : (tensor<?x128xf32>, tensor<?x128xf32>, tensor<128x16xf32>, tensor<?x16xf32>, tensor<?x16xf32>, tensor<128xf32>, tensor<128x16xf32>) -> (tensor<?x128xf32>, tensor<128x16xf32>)
    ```
  }];
  let arguments = (ins Xfmr_Tensor:$x, Xfmr_Tensor:$dt, Xfmr_Tensor:$a_log, Xfmr_Tensor:$b,
                       Xfmr_Tensor:$c, Xfmr_Tensor:$d, Xfmr_Tensor:$past);
  let results = (outs Xfmr_Tensor:$result, Xfmr_Tensor:$present);
  let assemblyFormat = "$x `,` $dt `,` $a_log `,` $b `,` $c `,` $d `,` $past attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Xfmr_SsdScanOp : Xfmr_PureOp<"ssd_scan"> {
  let summary = "Mamba-2's state-space dual scan: scalar decay per head, B and C shared by head groups";
  let description = [{
    `x [S, H, P]`, `dt [S, H]` (raw), `dt_bias [H]`, `a_log [H]`, `b`, `c`
    `[S, G, N]`, `d [H]`, `past [H, P, N]` (f32); head h reads group
    `g = h / (H / G)`:
    `δ = clamp(softplus(dt + dt_bias), dt_min, dt_max)`, `A = -exp(a_log)`,
    `s_t[h] = exp(δ_t[h] A[h]) s_{t-1}[h] + δ_t[h] x_t[h] ⊗ b_t[g]`,
    `y_t[h] = s_t[h] · c_t[g] + d[h] x_t[h]`. The backends run prefill as
    `chunk_size`-token chunks (the quadratic form inside a chunk, the
    recurrence between chunks) and decode as the recurrence.

    ```mlir
    %y, %s = xfmr.ssd_scan %x, %dt, %dtb, %alog, %b, %c, %d, %past {chunk_size = 256 : i64, dt_min = 0.0 : f64, dt_max = 0x7FF0000000000000 : f64} : (tensor<?x8x16xf32>, tensor<?x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<?x2x16xf32>, tensor<?x2x16xf32>, tensor<8xf32>, tensor<8x16x16xf32>) -> (tensor<?x8x16xf32>, tensor<8x16x16xf32>)
    ```
  }];
  let arguments = (ins Xfmr_Tensor:$x, Xfmr_Tensor:$dt, Xfmr_Tensor:$dt_bias, Xfmr_Tensor:$a_log,
                       Xfmr_Tensor:$b, Xfmr_Tensor:$c, Xfmr_Tensor:$d, Xfmr_Tensor:$past,
                       I64Attr:$chunk_size, F64Attr:$dt_min, F64Attr:$dt_max);
  let results = (outs Xfmr_Tensor:$result, Xfmr_Tensor:$present);
  let assemblyFormat = "$x `,` $dt `,` $dt_bias `,` $a_log `,` $b `,` $c `,` $d `,` $past attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Xfmr_GatedRmsNormOp : Xfmr_PureOp<"gated_rms_norm"> {
  let summary = "RMSNorm of x · silu(gate) over groups of the last dimension (Mamba-2)";
  let description = [{
    `input`, `gate [S, F]`, `weight [F]`: `u = input · silu(gate)` in f32,
    each `group_size` run of u's last dimension divided by its RMS
    (`sqrt(mean(u²) + epsilon)`), times `weight`. transformers'
    MambaRMSNormGated normalizes the whole row (`group_size = F`).

    ```mlir
    %n = xfmr.gated_rms_norm %y, %z, %w {epsilon = 1.0e-05 : f64, group_size = 128 : i64} : (tensor<?x128xf32>, tensor<?x128xf32>, tensor<128xf32>) -> tensor<?x128xf32>
    ```
  }];
  let arguments = (ins Xfmr_Tensor:$input, Xfmr_Tensor:$gate, Xfmr_Tensor:$weight, F64Attr:$epsilon,
                       I64Attr:$group_size);
  let results = (outs Xfmr_Tensor:$result);
  let assemblyFormat = "$input `,` $gate `,` $weight attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Xfmr_ReluSquaredOp : Xfmr_PureOp<"relu_squared", [SameOperandsAndResultType]> {
  let summary = "Squared ReLU, max(x, 0)², the activation of Nemotron-H's MLP layers";
  let description = [{
    ```mlir
    %a = xfmr.relu_squared %u : tensor<?x256xf32>
    ```
  }];
  let arguments = (ins Xfmr_Tensor:$input);
  let results = (outs Xfmr_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

//===----------------------------------------------------------------------===//
// Pooled form (xfmr-pool-ssm-state): the state lives in per-layer pools
// indexed by each sequence's slot, over a ragged batch.
//===----------------------------------------------------------------------===//

def Xfmr_PooledCausalConv1dOp : Xfmr_Op<"pooled_causal_conv1d"> {
  let summary = "Causal depthwise conv over a ragged batch, carried inputs in a state pool";
  let description = [{
    `causal_conv1d` for B sequences at once: sequence b owns rows
    `query_start[b] .. query_start[b+1]` of `input [N, C]` and carries its
    last K - 1 inputs in slot `state_slots[b]` of `pool`
    (`!xfmr.state_pool<[K-1, C], type>`), read before and written after.

    ```mlir
    %y = xfmr.pooled_causal_conv1d %x, %pool, %w, %qstart, %slots bias %b {activation = "silu"} : (tensor<?x192xf32>, !xfmr.state_pool<[3, 192], f32>, tensor<192x1x4xf32>, tensor<?xi32>, tensor<?xi32>, tensor<192xf32>) -> tensor<?x192xf32>
    ```
  }];
  let arguments = (ins Xfmr_Tensor:$input, Arg<Xfmr_StatePoolType, "", [MemRead, MemWrite]>:$pool,
                       Xfmr_Tensor:$weight, Xfmr_IndexTensor:$query_start, Xfmr_IndexTensor:$state_slots,
                       Optional<Xfmr_Tensor>:$bias, StrAttr:$activation);
  let results = (outs Xfmr_Tensor:$result);
  let assemblyFormat = "$input `,` $pool `,` $weight `,` $query_start `,` $state_slots (`bias` $bias^)? attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Xfmr_PooledSelectiveScanOp : Xfmr_Op<"pooled_selective_scan"> {
  let summary = "Mamba's selective scan over a ragged batch, state in a state pool";
  let description = [{
    `selective_scan` for B sequences at once, each continuing the state in
    slot `state_slots[b]` of `pool` (`!xfmr.state_pool<[I, N], f32>`).

    ```mlir
    %y = xfmr.pooled_selective_scan %x, %dt, %alog, %b, %c, %d, %pool, %qstart, %slots : (tensor<?x128xf32>, tensor<?x128xf32>, tensor<128x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>, tensor<128xf32>, !xfmr.state_pool<[128, 8], f32>, tensor<?xi32>, tensor<?xi32>) -> tensor<?x128xf32>
    ```
  }];
  let arguments = (ins Xfmr_Tensor:$x, Xfmr_Tensor:$dt, Xfmr_Tensor:$a_log, Xfmr_Tensor:$b,
                       Xfmr_Tensor:$c, Xfmr_Tensor:$d, Arg<Xfmr_StatePoolType, "", [MemRead, MemWrite]>:$pool,
                       Xfmr_IndexTensor:$query_start, Xfmr_IndexTensor:$state_slots);
  let results = (outs Xfmr_Tensor:$result);
  let assemblyFormat = "$x `,` $dt `,` $a_log `,` $b `,` $c `,` $d `,` $pool `,` $query_start `,` $state_slots attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Xfmr_PooledSsdScanOp : Xfmr_Op<"pooled_ssd_scan"> {
  let summary = "Mamba-2's state-space dual scan over a ragged batch, state in a state pool";
  let description = [{
    `ssd_scan` for B sequences at once, each continuing the state in slot
    `state_slots[b]` of `pool` (`!xfmr.state_pool<[H, P, N], f32>`).

    ```mlir
    %y = xfmr.pooled_ssd_scan %x, %dt, %dtb, %alog, %b, %c, %d, %pool, %qstart, %slots {chunk_size = 256 : i64, dt_min = 0.0 : f64, dt_max = 0x7FF0000000000000 : f64} : (tensor<?x8x16xf32>, tensor<?x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<?x2x16xf32>, tensor<?x2x16xf32>, tensor<8xf32>, !xfmr.state_pool<[8, 16, 16], f32>, tensor<?xi32>, tensor<?xi32>) -> tensor<?x8x16xf32>
    ```
  }];
  let arguments = (ins Xfmr_Tensor:$x, Xfmr_Tensor:$dt, Xfmr_Tensor:$dt_bias, Xfmr_Tensor:$a_log,
                       Xfmr_Tensor:$b, Xfmr_Tensor:$c, Xfmr_Tensor:$d,
                       Arg<Xfmr_StatePoolType, "", [MemRead, MemWrite]>:$pool,
                       Xfmr_IndexTensor:$query_start, Xfmr_IndexTensor:$state_slots,
                       I64Attr:$chunk_size, F64Attr:$dt_min, F64Attr:$dt_max);
  let results = (outs Xfmr_Tensor:$result);
  let assemblyFormat = "$x `,` $dt `,` $dt_bias `,` $a_log `,` $b `,` $c `,` $d `,` $pool `,` $query_start `,` $state_slots attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

#endif // KILN_XFMR_SSM_OPS
