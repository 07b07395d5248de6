#include "codegen/cuda/skinny_fusion.h"

#include <map>

#include "codegen/cuda/instance_source.h"

namespace kiln::cuda_codegen {

std::vector<SkinnyFusion> skinnyFusions(const PlanEntry& entry) {
  const std::vector<PlanStep>& steps = entry.steps;
  const std::set<int64_t>& pinned = entry.pinned;
  std::vector<SkinnyFusion> out(steps.size());
  if (entry.activation_type != "bf16") return out;
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
  auto overlap = [&](int64_t a, int64_t b) {
    auto ra = entry.storage.find(a), rb = entry.storage.find(b);
    if (ra == entry.storage.end() || rb == entry.storage.end()) return false;
    return ra->second.first < rb->second.second && rb->second.first < ra->second.second;
  };

  for (size_t i = 0; i + 1 < steps.size(); ++i) {
    if (!isGemm(i) || steps[i + 1].kind != "silu_mul") continue;
    if (!steps[i + 1].params.value("merged_gate_up", false) || !onlyReadBy(steps[i].results[0], i + 1, 0)) continue;
    if (steps[i].value_args.empty() || steps[i + 1].results.empty() ||
        overlap(steps[i].value_args[0], steps[i + 1].results[0]))
      continue;
    out[i].gemm_params["silu_mul"] = true;
    out[i + 1].absorbed = true;
  }
  // The merged qkv projection, then rope_kv_append over its whole output:
  // the fused gemm takes the rope step's params beside its own (no key is
  // shared between the two kinds) and writes the step's q and pools. q gets
  // storage of its own, so it is neither pinned nor a view.
  for (size_t i = 0; i + 1 < steps.size(); ++i) {
    const PlanStep& rope = steps[i + 1];
    if (!isGemm(i) || rope.kind != "rope_kv_append" || !out[i].gemm_params.is_null()) continue;
    if (!rope.params.value("merged_qkv", false) || !onlyReadBy(steps[i].results[0], i + 1, 0)) continue;
    const int64_t heads = rope.params.value("heads", int64_t(0)), kv_heads = rope.params.value("kv_heads", int64_t(0));
    const int64_t head_dim = rope.params.value("head_dim", int64_t(0));
    if (steps[i].params.value("n", int64_t(-1)) != (heads + 2 * kv_heads) * head_dim) continue;
    if (rope.results.size() != 1 || pinned.count(rope.results[0]) || entry.views.count(rope.results[0])) continue;
    nlohmann::json fused = rope.params;
    fused["rope_kv_append"] = true;
    out[i].gemm_params = std::move(fused);
    out[i + 1].absorbed = true;
    out[i + 1].own_storage = true;
  }
  // residual_rms_norm (x, residual, weight) -> (sum, out), then a gemm of
  // out: the gemm's single-row instance folds the norm in.
  for (size_t i = 0; i + 1 < steps.size(); ++i) {
    const PlanStep& norm = steps[i];
    const size_t g = i + 1;
    if (norm.kind != "residual_rms_norm" || !isGemm(g) || norm.value_args.size() < 2 || norm.results.empty()) continue;
    const bool writes_sum = norm.params.value("writes_sum", false);
    if (norm.results.size() != (writes_sum ? 2u : 1u) || norm.params.value("out_type", "bf16") != "bf16") continue;
    const int64_t out_value = norm.results.back();
    if (!onlyReadBy(out_value, g, 0)) continue;
    const int64_t n = steps[g].params.value("n", int64_t(0)), k = steps[g].params.value("k", int64_t(0));
    if (!streamsSingleRowGemm(n, k)) continue;
    // What the pair writes: the sum, and the gemm's output (or its fused
    // silu_mul's; a fused rope's q has storage of its own).
    std::vector<int64_t> written;
    if (writes_sum) written.push_back(norm.results[0]);
    if (out[g].gemm_params.is_null()) written.push_back(steps[g].results[0]);
    else if (out[g].gemm_params.value("silu_mul", false) && g + 1 < steps.size()) written.push_back(steps[g + 1].results[0]);
    bool clash = false;
    for (int64_t w : written)
      for (size_t a = 0; a < 2; ++a) clash = clash || overlap(w, norm.value_args[a]);
    if (clash) continue;
    nlohmann::json fold;
    fold["norm_epsilon"] = norm.params.value("epsilon", 1e-5);
    fold["norm_x_type"] = norm.params.value("x_type", "bf16");
    fold["norm_residual_type"] = norm.params.value("residual_type", "bf16");
    fold["norm_sum_type"] = norm.params.value("sum_type", "bf16");
    fold["norm_weight_type"] = norm.params.value("weight_type", "f32");
    fold["norm_writes_sum"] = writes_sum;
    out[g].single_row_params = std::move(fold);
    out[i].absorbed_single_row = true;
  }
  // gemm -> residual_rms_norm(x, the gemm's output) -> (sum, out), for
  // cuBLASLt batches: the GEMM writes sum = x + its product.
  std::map<int64_t, size_t> last_read;  // value -> the last step reading it
  for (size_t i = 0; i < steps.size(); ++i)
    for (int64_t v : steps[i].value_args)
      if (v >= 0) last_read[v] = i;
  int64_t own_sum_busy_until = -1;  // the last step reading the own buffer's current sum
  for (size_t i = 0; i + 1 < steps.size(); ++i) {
    const PlanStep& gemm = steps[i];
    const PlanStep& norm = steps[i + 1];
    if (!isGemm(i) || gemm.value_args.empty() || gemm.params.value("bias", false)) continue;
    if (norm.kind != "residual_rms_norm" || norm.value_args.size() < 2 || norm.results.size() != 2) continue;
    if (!norm.params.value("writes_sum", false) || norm.params.value("x_type", "bf16") != "f32" ||
        norm.params.value("sum_type", "bf16") != "f32" || !onlyReadBy(gemm.results[0], i + 1, 1))
      continue;
    const int64_t x = norm.value_args[0], sum = norm.results[0];
    if (x == sum) continue;  // in place: cuBLASLt's autotuning reruns would add twice
    const bool clash = overlap(sum, x) || overlap(sum, gemm.value_args[0]);
    if (clash && (pinned.count(sum) || entry.views.count(sum) || int64_t(i) <= own_sum_busy_until)) continue;
    if (clash) own_sum_busy_until = int64_t(last_read.count(sum) ? last_read[sum] : i + 1);
    nlohmann::json rms{{"hidden", norm.params.value("hidden", int64_t(0))},
                       {"epsilon", norm.params.value("epsilon", 1e-5)},
                       {"x_type", "f32"}};
    for (const char* key : {"weight_type", "out_type"})
      if (norm.params.contains(key)) rms[key] = norm.params[key];
    out[i].writes_norm_sum = true;
    out[i + 1].sum_from_gemm = true;
    out[i + 1].norm_of_sum_params = std::move(rms);
    out[i + 1].sum_own_storage = clash;
  }
  return out;
}

PlanEntry planEntryFromJson(const nlohmann::json& entry) {
  PlanEntry plan;
  std::vector<PlanStep>& steps = plan.steps;
  std::set<int64_t>& pinned = plan.pinned;
  if (!entry.is_object()) return plan;
  if (entry.contains("outputs") && entry["outputs"].is_array())
    for (const nlohmann::json& o : entry["outputs"])
      if (o.is_object() && o.contains("value") && o["value"].is_number_integer()) pinned.insert(o["value"].get<int64_t>());
  std::map<int64_t, const nlohmann::json*> values;
  if (entry.contains("values") && entry["values"].is_array())
    for (const nlohmann::json& v : entry["values"]) {
      if (!v.is_object() || !v.contains("id") || !v["id"].is_number_integer()) continue;
      values[v["id"].get<int64_t>()] = &v;
      if (v.contains("view_of") && v["view_of"].is_number_integer()) {
        pinned.insert(v["view_of"].get<int64_t>());
        plan.views.insert(v["id"].get<int64_t>());
      }
    }
  for (const auto& [id, value] : values) {
    const nlohmann::json* v = value;
    for (int hops = 0; v && v->contains("view_of") && (*v)["view_of"].is_number_integer() && hops < 64; ++hops) {
      auto it = values.find((*v)["view_of"].get<int64_t>());
      v = it == values.end() ? nullptr : it->second;
    }
    if (!v || !v->contains("offset") || !(*v)["offset"].is_number_integer() || !v->contains("row_bytes") ||
        !(*v)["row_bytes"].is_number_integer())
      continue;
    const int64_t offset = (*v)["offset"].get<int64_t>();
    plan.storage[id] = {offset, offset + (*v)["row_bytes"].get<int64_t>()};
  }
  if (!entry.contains("steps") || !entry["steps"].is_array()) return plan;
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
  return plan;
}

}  // namespace kiln::cuda_codegen
