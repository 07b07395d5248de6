#include "models/quantize/quantize_options.h"

namespace kiln::quantize {

Status validateQuantizeOptions(const QuantizeOptions& options, const std::string& quant_weights,
                               const GivenFlags& given) {
  const std::string& method = options.method;
  if (method != "rtn" && method != "gptq" && method != "awq")
    return makeError("invalid value '{}' for --quant-method, expected one of: rtn, gptq, awq", method);
  if (quant_weights != "int4" && (method != "rtn" || given.sym))
    return makeError("{} quantizes to int4 groups: it needs --quant-weights=int4, got "
                     "--quant-weights={}",
                     method != "rtn" ? "--quant-method=" + method : std::string("--quant-sym"),
                     quant_weights);
  const bool calibrated = method == "gptq" || method == "awq";
  if (calibrated && options.calibration.empty())
    return makeError("--quant-method={} needs --calibration FILE (text the model is run on, or a "
                     ".json array of token ids)",
                     method);
  if (!calibrated && (given.calibration || given.calibration_ctx || given.calibration_tokens))
    return makeError("--calibration{} is for --quant-method=gptq or awq; {} takes no calibration data",
                     given.calibration ? "" : given.calibration_ctx ? "-ctx" : "-tokens", method);
  if (given.act_order && method != "gptq")
    return makeError("--quant-act-order is GPTQ's column order: it needs --quant-method=gptq, got {}",
                     method);
  if (given.damp && method != "gptq")
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
