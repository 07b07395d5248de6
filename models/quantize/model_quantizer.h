// A model-writing compile's first half: a model's decoder linears (q, k, v,
// o, gate, up, down) quantized to int4 groups, or pruned 2:4, by the chosen
// method and the model written under the artifact directory
// (quantized_model.h), which kiln-compile then compiles as it compiles any
// model.
//   rtn        each group rounded to nearest on its own (no calibration)
//   gptq       GPTQ (gptq.h) layer after layer during one calibration run
//              (calibration_run.h): a linear's Hessian comes from its inputs
//              as the layers already quantized make them, and its quantized
//              values replace its weights before the run goes on
//   awq        AWQ (awq_layers.h) on the float model's inputs, layer by layer
//   sparsegpt  SparseGPT (sparsegpt.h), sequential as GPTQ; the pruned
//              linears written as float
// The embedding and the LM head are left as they are, as kiln's load-time
// schemes leave them; a linear whose input features are not whole groups
// (for sparsegpt: not a multiple of 64) too, with a note. The decoder
// linears must be float (f32, f16, bf16): quantizing a model's
// already-quantized blocks again is refused; sparsegpt prunes a GGUF's
// blocks once floatLinearsModel has made them f32.
#pragma once

#include <string>

#include "models/quantize/awq_layers.h"
#include "models/quantize/quantize_options.h"
#include "runtime/artifact/manifest.h"
#include "runtime/support/error.h"

namespace kiln::quantize {

// For sparsegpt: the model itself when its decoder linears are float, else
// (a GGUF's block types) a copy with them dequantized to f32 written as
// DIR/model.gguf, which the calibration plan is compiled from; quantizeModel
// then writes the pruned model over it. Other block-typed linears (an int4
// checkpoint) are refused.
Result<std::string> floatLinearsModel(const std::string& model_path, const QuantizeOptions& options,
                                      const std::string& dir, const QuantizeLog& log);

// `plan`: for gptq, awq and sparsegpt, the model's plan with its weights as they are
// (no weight quantization), f32 activations, target cpu, which kiln-compile
// compiles first; unused for rtn. Returns the written model's path.
Result<std::string> quantizeModel(const std::string& model_path, const Manifest* plan,
                                  const QuantizeOptions& options, const std::string& dir,
                                  const QuantizeLog& log);

}  // namespace kiln::quantize
