// AWQ over a whole model (awq.h has the method for one set of linears), one
// decoder layer at a time, on the float model's inputs (as AutoAWQ: the
// scales leave the float model's outputs unchanged, so no layer needs the
// quantized layers before it). Once every input of a layer has been seen:
//   q, k, v   channel scales s searched on the merged weight; the attention
//             RMSNorm weight divided by s
//   o         s tied across the query heads that read one KV head's values
//             (GQA), so the v rows (and bias) divided by s give o's input / s
//   gate, up  s searched on the merged weight; the FFN RMSNorm divided by s
//   down      the up rows divided by s (silu(gate) * up is linear in up)
// then each linear's rows clipped (all but q and k, whose products with each
// other the per-group error does not see) and rounded. A linear whose fold
// target is missing keeps s = 1 (clipping and rounding only). A linear left
// float (input features not whole groups) is not scaled, but takes the
// folds of the linear after it (its rows written as new float values).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "models/quantize/plan_linears.h"
#include "models/quantize/quantize_options.h"
#include "models/quantize/quantized_model.h"
#include "runtime/weights/weight_store.h"

namespace kiln::quantize {

using QuantizeLog = std::function<void(const std::string&)>;

class AwqLayers {
 public:
  AwqLayers(const formats::ModelSource& model, const WeightStore& weights,
            std::vector<PlanLinear> linears, const QuantizeOptions& options, QuantizedModel& out,
            QuantizeLog log);

  // The values to observe (each linear's input) with their row width.
  std::map<int64_t, int64_t> inputs() const;
  // Gathers x's statistics; quantizes the layers whose inputs are all seen.
  Status onInput(int64_t value, const float* x, int64_t tokens, int64_t k);
  // Fails if a layer's inputs were not all seen.
  Status finish() const;
  // Linears left as they are (input features not whole groups), by name
  // ("attn_q+attn_k+attn_v"), with how many.
  const std::map<std::string, int>& skipped() const { return skipped_; }

 private:
  struct Stats {
    std::vector<double> h, x_mean;
  };
  Status quantizeLayer(int layer);

  const formats::ModelSource& model_;
  const WeightStore& weights_;
  std::vector<PlanLinear> linears_;
  QuantizeOptions options_;
  QuantizedModel& out_;
  QuantizeLog log_;
  std::map<int, std::vector<int64_t>> layer_inputs_;  // layer -> input values, in step order
  std::map<int64_t, Stats> stats_;                    // input value -> its statistics
  std::map<int, bool> done_;
  std::map<std::string, int> skipped_;
};

}  // namespace kiln::quantize
