// The logits a plan gives on held-out tokens, for the e2e tests that compare
// a quantized or pruned model with the float one: kSequences sequences of
// kLength tokens from a fixed LCG (not the calibration file's generator),
// every prefix of each run as its own sequence in one batch on the CPU
// executor, so each position's logits come from the same forward.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/artifact/manifest.h"
#include "runtime/weights/weight_store.h"

namespace kiln::e2e {

constexpr int kSequences = 12, kLength = 48;

// [kSequences * kLength, vocab]; empty, after a gtest failure, when the plan
// does not run. The GEMMs run dequantize + sgemm (f32 activations), so the
// logits differ from the float model's by the weights alone.
std::vector<float> heldOutLogits(const Manifest& manifest, const WeightStore& weights);

// sum (a - b)^2 / sum b^2
double relativeError(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace kiln::e2e
