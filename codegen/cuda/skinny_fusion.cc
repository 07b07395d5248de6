#include "codegen/cuda/skinny_fusion.h"

#include <map>

namespace kiln::cuda_codegen {

std::vector<SkinnyFusion> skinnyFusions(const std::vector<PlanStep>& steps, const std::set<int64_t>& pinned) {
  std::vector<SkinnyFusion> out(steps.size());
  std::map<int64_t, int> readers;  // value -> how many step args read it
  for (const PlanStep& s : steps)
    for (int64_t v : s.value_args)
      if (v >= 0) ++readers[v];
  // `value` is read only by step `reader`, once, as its arg `arg`.
  auto onlyReadBy = [&](int64_t value, size_t reader, size_t arg) {
    const PlanStep& r = steps[reader];
    return !pinned.count(value) && readers[value] == 1 && arg < r.value_args.size() && r.value_args[arg] == value;
  };
  auto isGemm = [&](size_t i) { return steps[i].kind == "gemm" && steps[i].results.size() == 1; };

  for (size_t i = 0; i + 1 < steps.size(); ++i) {
    if (!isGemm(i) || steps[i + 1].kind != "silu_mul") continue;
    if (!steps[i + 1].params.value("merged_gate_up", false) || !onlyReadBy(steps[i].results[0], i + 1, 0)) continue;
    out[i].gemm_params["silu_mul"] = true;
    out[i + 1].absorbed = true;
  }
  for (size_t r = 1; r + 1 < steps.size(); ++r) {
    const PlanStep& norm = steps[r];
    if (norm.kind != "residual_rms_norm" || norm.results.size() != 2 || !norm.params.value("writes_sum", false))
      continue;
    if (!isGemm(r - 1) || !isGemm(r + 1) || out[r - 1].gemm_params.contains("silu_mul")) continue;
    // The branch (the first gemm's y, bf16) and the normalized output (the
    // second gemm's x, bf16) disappear; the stream and the sum stay.
    if (norm.params.value("residual_type", "bf16") != "bf16" || norm.params.value("out_type", "bf16") != "bf16")
      continue;
    if (!onlyReadBy(steps[r - 1].results[0], r, 1) || !onlyReadBy(norm.results[1], r + 1, 0)) continue;
    // Types as the residual_rms_norm instance reads them (bf16 unless named).
    const std::string stream = norm.params.value("x_type", "bf16"), sum = norm.params.value("sum_type", "bf16");
    out[r - 1].gemm_params["residual_type"] = stream;
    out[r - 1].gemm_params["sum_type"] = sum;
    out[r + 1].gemm_params["norm_in_type"] = sum;
    out[r + 1].gemm_params["norm_weight_type"] = norm.params.value("weight_type", "f32");
    out[r + 1].gemm_params["norm_epsilon"] = norm.params.value("epsilon", 1e-5);
    out[r].absorbed = true;
  }
  return out;
}

void planStepsFromJson(const nlohmann::json& entry, std::vector<PlanStep>& steps, std::set<int64_t>& pinned) {
  if (!entry.is_object()) return;
  if (entry.contains("outputs") && entry["outputs"].is_array())
    for (const nlohmann::json& o : entry["outputs"])
      if (o.is_object() && o.contains("value") && o["value"].is_number_integer()) pinned.insert(o["value"].get<int64_t>());
  if (entry.contains("values") && entry["values"].is_array())
    for (const nlohmann::json& v : entry["values"])
      if (v.is_object() && v.contains("view_of") && v["view_of"].is_number_integer())
        pinned.insert(v["view_of"].get<int64_t>());
  if (!entry.contains("steps") || !entry["steps"].is_array()) return;
  for (const nlohmann::json& s : entry["steps"]) {
    PlanStep step;
    if (s.is_object()) {
      step.kind = s.value("kind", "");
      step.params = s.contains("params") && s["params"].is_object() ? s["params"] : nlohmann::json::object();
      if (s.contains("args") && s["args"].is_array())
        for (const nlohmann::json& a : s["args"])
          step.value_args.push_back(a.is_object() && a.contains("value") && a["value"].is_number_integer()
                                        ? a["value"].get<int64_t>()
                                        : -1);
      if (s.contains("results") && s["results"].is_array())
        for (const nlohmann::json& r : s["results"])
          if (r.is_number_integer()) step.results.push_back(r.get<int64_t>());
    }
    steps.push_back(std::move(step));
  }
}

}  // namespace kiln::cuda_codegen
