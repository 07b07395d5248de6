// kiln-compile's choices for quantizing a model's weights to int4 with a
// method other than load-time rounding, and their validation. Errors name
// the flag and what it needs:
//   "--quant-method=gptq needs --calibration FILE (text the model is run on)"
#pragma once

#include <cstdint>
#include <string>

#include "models/quantize/int4_grid.h"
#include "runtime/support/error.h"

namespace kiln::quantize {

struct QuantizeOptions {
  static constexpr int64_t kDefaultCalibrationCtx = 512;
  static constexpr int64_t kDefaultCalibrationTokens = 16384;
  static constexpr double kDefaultDamp = 0.01;  // GPTQ's reference

  std::string method = "rtn";  // rtn | gptq | awq
  Int4Options grid;            // --quant-group-size, --quant-sym
  bool act_order = false;      // gptq: --quant-act-order
  double damp = kDefaultDamp;  // gptq: --quant-damp, of mean(diag H)
  bool clip = true;            // awq: --quant-clip
  std::string calibration;     // --calibration FILE (gptq, awq)
  int64_t calibration_ctx = kDefaultCalibrationCtx;        // tokens a sequence
  int64_t calibration_tokens = kDefaultCalibrationTokens;  // at most, in all

  // Whether kiln-compile writes a quantized model beside the manifest: every
  // method except symmetric round-to-nearest, which the weight store does at
  // load (xfmr-insert-quantization's int4).
  bool writesModel() const { return method != "rtn" || !grid.sym; }
};

// What the flags may not combine to. `quant_weights`: --quant-weights.
// `given`: which of the method-specific flags the user gave (an option
// given for a method it does not apply to is an error, not ignored).
struct GivenFlags {
  bool act_order = false, damp = false, clip = false, calibration = false,
       calibration_ctx = false, calibration_tokens = false, sym = false;
};
Status validateQuantizeOptions(const QuantizeOptions& options, const std::string& quant_weights,
                               const GivenFlags& given);

}  // namespace kiln::quantize
