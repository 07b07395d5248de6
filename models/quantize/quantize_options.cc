#include "models/quantize/quantize_options.h"

namespace kiln::quantize {

namespace {

// SparseGPT writes the pruned float model; an int4 method that writes its
// own model would have to quantize that one, which is not what it was
// calibrated on, so the two are not combined.
Status validateSparseGpt(const QuantizeOptions& options, const std::string& sparsity) {
  if (sparsity != "2:4")
    return makeError("--sparsity-method=sparsegpt prunes to the 2:4 pattern: it needs --sparsity=2:4, "
                     "got --sparsity={}",
                     sparsity);
  if (options.method != "rtn" || !options.grid.sym)
    return makeError("--sparsity-method=sparsegpt and {} both write the model before the compile: "
                     "give one of them (the pruned model takes --quant-weights=int8|int4 at load)",
                     options.method != "rtn" ? "--quant-method=" + options.method
                                             : std::string("--quant-sym=false"));
  if (options.calibration.empty())
    return makeError("--sparsity-method=sparsegpt needs --calibration FILE (text the model is run on, "
                     "or a .json array of token ids)");
  return {};
}

}  // namespace

Status validateQuantizeOptions(const QuantizeOptions& options, const std::string& quant_weights,
                               const std::string& sparsity, const GivenFlags& given) {
  const std::string& method = options.method;
  if (method != "rtn" && method != "gptq" && method != "awq")
    return makeError("invalid value '{}' for --quant-method, expected one of: rtn, gptq, awq", method);
  if (options.sparsegpt) KILN_RETURN_IF_ERROR(validateSparseGpt(options, sparsity));
  if (quant_weights != "int4" && (method != "rtn" || given.sym))
    return makeError("{} quantizes to int4 groups: it needs --quant-weights=int4, got "
                     "--quant-weights={}",
                     method != "rtn" ? "--quant-method=" + method : std::string("--quant-sym"),
                     quant_weights);
  if ((method == "gptq" || method == "awq") && options.calibration.empty())
    return makeError("--quant-method={} needs --calibration FILE (text the model is run on, or a "
                     ".json array of token ids)",
                     method);
  if (!options.calibrated() && (given.calibration || given.calibration_ctx || given.calibration_tokens))
    return makeError("--calibration{} is for --quant-method=gptq or awq; {} takes no calibration data "
                     "(--sparsity-method=sparsegpt does)",
                     given.calibration ? "" : given.calibration_ctx ? "-ctx" : "-tokens", method);
  if (given.act_order && method != "gptq")
    return makeError("--quant-act-order is GPTQ's column order: it needs --quant-method=gptq, got {}",
                     method);
  if (given.damp && method != "gptq" && !options.sparsegpt)
    return makeError("--quant-damp is GPTQ's dampening: it needs --quant-method=gptq, got {}", method);
  if (!(options.damp > 0.0 && options.damp <= 10.0))
    return makeError("invalid value '{}' for --quant-damp, expected a fraction of the Hessian's mean "
                     "diagonal in (0, 10]",
                     options.damp);
  if (given.clip && method != "awq")
    return makeError("--quant-clip is AWQ's clipping search: it needs --quant-method=awq, got {}",
                     method);
  if (options.calibration_ctx < 16 || options.calibration_ctx > 32768)
    return makeError("invalid value '{}' for --calibration-ctx, expected 16 to 32768 tokens a sequence",
                     options.calibration_ctx);
  if (options.calibration_tokens < options.calibration_ctx)
    return makeError("--calibration-tokens {} is less than one sequence of --calibration-ctx {}",
                     options.calibration_tokens, options.calibration_ctx);
  return {};
}

}  // namespace kiln::quantize
