// One forward pass of a plan over the calibration sequences on the CPU
// executor, all sequences in one ragged batch, so that right after the step
// that writes a linear's input, every calibration token's row of it is in
// the arena at once. `on_input` sees it there, before any GEMM reads it: a
// callback that rewrites a linear's weights (WeightStore::writableData)
// changes what every later layer computes, which is how GPTQ quantizes layer
// by layer on the outputs of the layers already quantized.
//
// Memory: the arena holds the plan's bytes_per_token for every calibration
// token (SmolLM2: 201 KB a token, most of it the logits row the plan keeps
// for a token), and the KV pool all of them.
#pragma once

#include <cstdint>
#include <functional>
#include <map>

#include "models/quantize/calibration_set.h"
#include "runtime/artifact/manifest.h"
#include "runtime/support/error.h"
#include "runtime/weights/weight_store.h"

namespace kiln::quantize {

// x: [tokens, k] f32, the value's rows for every calibration token.
using InputCallback = std::function<Status(int64_t value, const float* x, int64_t tokens, int64_t k)>;

// `inputs`: the values to report, each with its row width k.
Status runCalibration(const Manifest& plan, const WeightStore& weights, const CalibrationSet& set,
                      const std::map<int64_t, int64_t>& inputs, const InputCallback& on_input);

}  // namespace kiln::quantize
