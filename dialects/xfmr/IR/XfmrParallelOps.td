//===- XfmrParallelOps.td - tensor and pipeline parallelism -*- tablegen -*-===//
//
// What xfmr-shard-tensor-parallel and xfmr-split-pipeline-stages add
// (docs/design/parallelism.md): a load-time slice of a weight, the sum over
// the tensor-parallel group after a row-parallel linear, and the hand-over
// of the residual stream between neighbouring pipeline stages.
//
// Included from XfmrOps.td.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_XFMR_PARALLEL_OPS
#define KILN_XFMR_PARALLEL_OPS

def Xfmr_SliceOp : Xfmr_PureOp<"slice"> {
  let summary = "Consecutive entries of a weight along one axis";
  let description = [{
    Keeps entries `offset .. offset + size` of `input` along `axis`: a
    tensor-parallel rank's rows (a column-parallel linear's heads or
    intermediate features) or columns (a row-parallel linear's inputs) of a
    weight. On weights the artifact runs it as load-time weight preparation
    (`slice`), so the compiler copies no data.

    ```mlir
    %wq0 = xfmr.slice %wq {axis = 0 : i64, offset = 0 : i64, size = 288 : i64} : (tensor<576x576xbf16>) -> tensor<288x576xbf16>
    %wo1 = xfmr.slice %wo {axis = 1 : i64, offset = 288 : i64, size = 288 : i64} : (tensor<576x576xbf16>) -> tensor<576x288xbf16>
    ```
  }];
  let arguments = (ins Xfmr_Tensor:$input, I64Attr:$axis, I64Attr:$offset, I64Attr:$size);
  let results = (outs Xfmr_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Xfmr_AllReduceOp : Xfmr_Op<"all_reduce", [SameOperandsAndResultType]> {
  let summary = "Sum over the tensor-parallel group";
  let description = [{
    Every rank of the group holds a partial `[N, hidden]` sum (a
    row-parallel linear's output over its share of the inputs); each gets
    the elementwise sum of all of them. `group_size` is the number of ranks.
    The op communicates, so it is neither folded nor moved.

    ```mlir
    %o = xfmr.all_reduce %partial {group_size = 2 : i64} : tensor<?x576xf32>
    ```
  }];
  let arguments = (ins Xfmr_Tensor:$input, I64Attr:$group_size);
  let results = (outs Xfmr_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Xfmr_SendOp : Xfmr_Op<"send"> {
  let summary = "Send an activation to the next pipeline stage";
  let description = [{
    Hands the residual stream `[N, hidden]` leaving this stage's last layer
    to stage `peer` (this stage + 1), which takes it with `xfmr.recv`.

    ```mlir
    xfmr.send %x {peer = 1 : i64} : tensor<?x576xf32>
    ```
  }];
  let arguments = (ins Xfmr_Tensor:$input, I64Attr:$peer);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Xfmr_RecvOp : Xfmr_Op<"recv"> {
  let summary = "Receive an activation from the previous pipeline stage";
  let description = [{
    The residual stream `[N, hidden]` that stage `peer` (this stage - 1)
    sent with `xfmr.send`; N is the batch's token count, as in the sender.

    ```mlir
    %x = xfmr.recv {peer = 0 : i64} : tensor<?x576xf32>
    ```
  }];
  let arguments = (ins I64Attr:$peer);
  let results = (outs Xfmr_Tensor:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
  let hasVerifier = 1;
}

#endif // KILN_XFMR_PARALLEL_OPS
