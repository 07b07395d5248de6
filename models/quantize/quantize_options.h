// kiln-compile's choices for quantizing a model's weights to int4 with a
// method other than load-time rounding, or pruning them 2:4 with SparseGPT,
// and their validation. Errors name the flag and what it needs:
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
  // --sparsity=2:4 --sparsity-method=sparsegpt: the decoder linears pruned by
  // SparseGPT (sparsegpt.h) and written as float, which --quant-weights may
  // then quantize at load; not with another method that writes the model.
  bool sparsegpt = false;
  Int4Options grid;            // --quant-group-size, --quant-sym
  bool act_order = false;      // gptq: --quant-act-order
  double damp = kDefaultDamp;  // gptq, sparsegpt: --quant-damp, of mean(diag H)
  bool clip = true;            // awq: --quant-clip
  std::string calibration;     // --calibration FILE (gptq, awq, sparsegpt)
  int64_t calibration_ctx = kDefaultCalibrationCtx;        // tokens a sequence
  int64_t calibration_tokens = kDefaultCalibrationTokens;  // at most, in all

  // Whether kiln-compile writes a quantized or pruned model beside the
  // manifest: every method except symmetric round-to-nearest, which the
  // weight store does at load (xfmr-insert-quantization's int4).
  bool writesModel() const { return sparsegpt || method != "rtn" || !grid.sym; }
  // Whether it runs the model on calibration data first.
  bool calibrated() const { return sparsegpt || method == "gptq" || method == "awq"; }
  // The method that writes the model: sparsegpt, or the int4 method.
  std::string writer() const { return sparsegpt ? "sparsegpt" : method; }
  // Its flag, for messages: "--sparsity-method=sparsegpt", "--quant-method=gptq".
  std::string writerFlag() const {
    return sparsegpt ? "--sparsity-method=sparsegpt" : "--quant-method=" + method;
  }
};

// What the flags may not combine to. `quant_weights`: --quant-weights;
// `sparsity`: --sparsity. `given`: which of the method-specific flags the
// user gave (an option given for a method it does not apply to is an error,
// not ignored).
struct GivenFlags {
  bool act_order = false, damp = false, clip = false, calibration = false,
       calibration_ctx = false, calibration_tokens = false, sym = false;
};
Status validateQuantizeOptions(const QuantizeOptions& options, const std::string& quant_weights,
                               const std::string& sparsity, const GivenFlags& given);

}  // namespace kiln::quantize
