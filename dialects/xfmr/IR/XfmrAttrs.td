//===- XfmrAttrs.td - xfmr attributes ----------------------*- tablegen -*-===//

#ifndef KILN_XFMR_ATTRS
#define KILN_XFMR_ATTRS

include "XfmrDialect.td"
include "mlir/IR/AttrTypeBase.td"

def Xfmr_RopeAttr : AttrDef<Xfmr_Dialect, "Rope"> {
  let mnemonic = "rope";
  let summary = "Rotary position embedding parameters";
  let description = [{
    `style` is `half` (Hugging Face `rotate_half`: dimension i pairs with
    i + D/2) or `interleaved` (adjacent pairs 2i, 2i+1; llama.cpp's converter
    permutes Q/K rows of Llama GGUF files into this form).
    `scaling` is `none`, `linear` (positions divided by `factor`) or `llama3`
    (Llama-3.1 frequency smoothing between `low_freq_factor` and
    `high_freq_factor` wavelengths of `original_max_position`).

    Example:
    ```mlir
    #xfmr.rope<theta = 500000.0, style = "half", scaling = "llama3",
               factor = 32.0, low_freq_factor = 1.0, high_freq_factor = 4.0,
               original_max_position = 8192>
    ```
  }];
  let parameters = (ins APFloatParameter<"">:$theta, StringRefParameter<>:$style,
                        StringRefParameter<>:$scaling, APFloatParameter<"">:$factor,
                        APFloatParameter<"">:$low_freq_factor, APFloatParameter<"">:$high_freq_factor,
                        "int64_t":$original_max_position);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

#endif // KILN_XFMR_ATTRS
