//===- XfmrTypes.td - xfmr types ---------------------------*- tablegen -*-===//

#ifndef KILN_XFMR_TYPES
#define KILN_XFMR_TYPES

include "XfmrDialect.td"
include "mlir/IR/AttrTypeBase.td"

class Xfmr_Type<string name, string typeMnemonic, list<Trait> traits = []>
    : TypeDef<Xfmr_Dialect, name, traits> {
  let mnemonic = typeMnemonic;
}

def Xfmr_QuantType : Xfmr_Type<"Quant", "quant"> {
  let summary = "A block-quantized element type";
  let description = [{
    The element type of a quantized weight or KV tensor. `kind` names the
    storage scheme and `block` the number of elements that share one scale:

    | kind      | origin | storage per block                         |
    |-----------|--------|-------------------------------------------|
    | `q4_0`    | GGUF   | f16 scale, 32 × 4-bit (value = (q-8)·d)   |
    | `q4_1`    | GGUF   | f16 scale, f16 min, 32 × 4-bit            |
    | `q8_0`    | GGUF   | f16 scale, 32 × int8                      |
    | `q4_k`    | GGUF   | 256-element super-block: f16 d, f16 dmin, 8 × 6-bit scale and min, 256 × 4-bit (value = d·scale·q − dmin·min per 32) |
    | `q5_k`    | GGUF   | as `q4_k`, 256 × 5-bit                    |
    | `q6_k`    | GGUF   | 256-element super-block: 16 int8 scales, f16 d, 256 × 6-bit (value = d·scale·(q−32) per 16) |
    | `q5_0`, `q5_1` | GGUF | recognised in IR; no backend runs them, the importer refuses them |
    | `int8`    | kiln   | int8, one f32 scale per output channel (block = 0) |
    | `int4`    | kiln   | 4-bit, one scale per `block` elements     |
    | `fp8e4m3` | kiln   | fp8 e4m3, one f32 scale per channel or head |
    | `sp24`    | kiln   | 2:4 sparse: the kept half of the values (float) and a 4-bit index pair per 4 (docs/design/sparsity.md) |
    | `int8sp24` | kiln  | `sp24` with int8 values, one f32 scale per output channel (block = 0) |
    | `int4sp24` | kiln  | `sp24` with 4-bit values, one scale per `block` input columns (a multiple of 64) |

    Example:
    ```mlir
    %w = xfmr.weight "blk.0.attn_q.weight" : tensor<576x576x!xfmr.quant<"q4_1", 32>>
    ```
  }];
  let parameters = (ins StringRefParameter<"storage scheme">:$kind,
                        "unsigned":$block);
  let assemblyFormat = "`<` $kind `,` $block `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// True for the block formats that arrive pre-quantized in GGUF files.
    bool isGgufBlockFormat() const;
    /// Bits of storage per element, scales included (q4_1: 6.0).
    double bitsPerElement() const;
    /// True for kiln's quantized schemes, whose scales are a tensor apart
    /// (int8, int4, fp8e4m3, int8sp24, int4sp24).
    bool hasSeparateScales() const;
    /// True for the 2:4 compressed kinds (sp24, int8sp24, int4sp24).
    bool isSparse24() const;
  }];
}

def Xfmr_KvPoolType : Xfmr_Type<"KvPool", "kv_pool"> {
  let summary = "A paged KV-cache block pool for one layer";
  let description = [{
    Stateful storage for one layer's keys or values, laid out
    `[num_blocks, page_size, kv_heads, head_dim]`. The number of blocks is
    chosen by the runtime from free memory; the compiler fixes the rest.
    Operations that read or write a pool carry memory effects on it.

    An `i8` or `f8E4M3FN` pool (xfmr-insert-quantization's kv=int8|fp8)
    also holds one f32 scale per (token slot, kv head),
    `[num_blocks, kv_heads, page_size]` beside the values: a row decodes as
    code · scale. The @forward argument says so with
    `xfmr.kv_scales = "token_head"`, which the manifest's kv_cache carries
    as `"scales"`.

    Example:
    ```mlir
    func.func @f(%k_pool: !xfmr.kv_pool<16, 3, 64, f32>) 
    ```
  }];
  let parameters = (ins "unsigned":$pageSize, "unsigned":$kvHeads,
                        "unsigned":$headDim, "::mlir::Type":$elementType);
  let assemblyFormat = "`<` $pageSize `,` $kvHeads `,` $headDim `,` $elementType `>`";
  let genVerifyDecl = 1;
}

def Xfmr_StatePoolType : Xfmr_Type<"StatePool", "state_pool"> {
  let summary = "A state-space layer's carried state, one slot per running sequence";
  let description = [{
    Stateful storage for one Mamba layer's conv inputs or SSM state, laid
    out `[num_slots, slot_shape...]`: `[slots, K-1, C]` for the conv's
    carried inputs (activation type), `[slots, I, N]` or `[slots, H, P, N]`
    for the SSM state (f32). A sequence's state is one slot whatever its
    length; the runtime chooses the number of slots (its most running
    sequences). Operations that read or write a pool carry memory effects.

    Example:
    ```mlir
    func.func @f(%conv: !xfmr.state_pool<[3, 192], f32>, %ssm: !xfmr.state_pool<[8, 16, 16], f32>)
    ```
  }];
  let parameters = (ins ArrayRefParameter<"int64_t">:$slotShape, "::mlir::Type":$elementType);
  let assemblyFormat = "`<` `[` $slotShape `]` `,` $elementType `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Elements of one slot (the product of slot_shape).
    int64_t slotElements() const;
  }];
}

#endif // KILN_XFMR_TYPES
