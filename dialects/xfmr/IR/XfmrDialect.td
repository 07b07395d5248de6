//===- XfmrDialect.td - the transformer-level dialect ------*- tablegen -*-===//
//
// xfmr holds a Llama-family model at three levels, all in one dialect so a
// pass can be read against its input and output side by side:
//   unfused   what the importer emits: embed, rms_norm, linear, rope, softmax...
//   fused     attention, merged projections, fusion regions (xfmr-fuse-attention)
//   paged     KV pool, block tables, ragged-batch attention (xfmr-page-kv-cache)
// and the kernel-level form the lowering produces (xfmr.kernel, xfmr.gemm).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_XFMR_DIALECT
#define KILN_XFMR_DIALECT

include "mlir/IR/OpBase.td"

def Xfmr_Dialect : Dialect {
  let name = "xfmr";
  let summary = "Transformer-level IR for LLM inference";
  let description = [{
    The `xfmr` dialect describes decoder-only transformer models (Llama,
    Mistral, Qwen2, SmolLM) over tensors. Weights are symbolic references
    (`xfmr.weight`) carrying a name, a shape and an element type that may be
    a block-quantized type (`!xfmr.quant<"q4_1", 32>`); their data is bound by
    the runtime at load time and never becomes an IR constant.

    Shape conventions: `S` is the number of new tokens, `P` the number of
    past tokens, `T = P + S`, `H`/`Hkv` the query/KV head counts and `D` the
    head dimension. Activations are token-major: `[S, hidden]`, `[S, H, D]`.
  }];
  let cppNamespace = "::kiln::xfmr";
  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;
  let extraClassDeclaration = [{
    void registerTypes();
    void registerAttributes();
  }];
}

class Xfmr_Op<string mnemonic, list<Trait> traits = []>
    : Op<Xfmr_Dialect, mnemonic, traits>;

#endif // KILN_XFMR_DIALECT
