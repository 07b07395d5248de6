#include "codegen/cuda/skinny_fusion.h"

#include <map>

#include "codegen/cuda/instance_source.h"
#include "runtime/artifact/step_params_json.h"

namespace kiln::cuda_codegen {

namespace {

// An element type param: its value, or what an absent one means.
std::string typeOr(const std::string& type, const char* absent) { return type.empty() ? absent : type; }

}  // namespace

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
  // Only gemms of dense float weights fuse: the block-quantized skinny
  // kernels take the plain epilogue, and the 2:4 sparse ones (sp24,
  // int8sp24, int4sp24) have no fused forms, so their silu_mul, rope and
  // norms run as steps of their own.
  auto isGemm = [&](size_t i) {
    if (steps[i].kind != StepKind::kGemm || steps[i].results.size() != 1) return false;
    const std::string& w = std::get<GemmParams>(steps[i].params).weight_type;
    return w == "f32" || w == "bf16" || w == "f16";
  };
  auto gemmOf = [&](size_t i) -> const GemmParams& { return std::get<GemmParams>(steps[i].params); };
  auto overlap = [&](int64_t a, int64_t b) {
    auto ra = entry.storage.find(a), rb = entry.storage.find(b);
    if (ra == entry.storage.end() || rb == entry.storage.end()) return false;
    return ra->second.first < rb->second.second && rb->second.first < ra->second.second;
  };

  for (size_t i = 0; i + 1 < steps.size(); ++i) {
    if (!isGemm(i) || steps[i + 1].kind != StepKind::kSiluMul) continue;
    if (!std::get<SiluMulParams>(steps[i + 1].params).merged_gate_up || !onlyReadBy(steps[i].results[0], i + 1, 0)) continue;
    // The gemm epilogues compute SiLU only; GeGLU (gemma3) runs its own step.
    if (!std::get<SiluMulParams>(steps[i + 1].params).activation.empty()) continue;
    if (steps[i].value_args.empty() || steps[i + 1].results.empty() ||
        overlap(steps[i].value_args[0], steps[i + 1].results[0]))
      continue;
    out[i].gemm_params["silu_mul"] = true;
    out[i + 1].absorbed = true;
  }
  // The merged qkv projection, then rope_kv_append over its whole output:
  // the fused gemm takes the rope step's params beside its own (no key is
  // shared between the two kinds) and writes the step's q and pools. q gets
  // storage of its own, so it is neither pinned nor a view. Not into int8 or
  // fp8 pools: a row's scale needs the whole head, which the gemm's row
  // pairs do not hold; rope_kv_append's own kernel quantizes them. Nor with
  // Qwen3's per-head q/k norm, which likewise needs the whole head.
  for (size_t i = 0; i + 1 < steps.size(); ++i) {
    const PlanStep& rope = steps[i + 1];
    if (!isGemm(i) || rope.kind != StepKind::kRopeKvAppend || !out[i].gemm_params.is_null()) continue;
    const RopeKvAppendParams& q = std::get<RopeKvAppendParams>(rope.params);
    if (q.attn.kv_type == "int8" || q.attn.kv_type == "fp8e4m3" || q.qk_norm) continue;
    if (!q.merged_qkv || !onlyReadBy(steps[i].results[0], i + 1, 0)) continue;
    if (gemmOf(i).n != (q.attn.heads + 2 * q.attn.kv_heads) * q.attn.head_dim) continue;
    if (rope.results.size() != 1 || pinned.count(rope.results[0]) || entry.views.count(rope.results[0])) continue;
    nlohmann::json fused = toJson(rope.params);
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
    if (norm.kind != StepKind::kResidualRmsNorm || !isGemm(g) || norm.value_args.size() < 2 || norm.results.empty())
      continue;
    const ResidualRmsNormParams& np = std::get<ResidualRmsNormParams>(norm.params);
    const bool writes_sum = np.writes_sum;
    if (norm.results.size() != (writes_sum ? 2u : 1u) || typeOr(np.out_type, "bf16") != "bf16") continue;
    const int64_t out_value = norm.results.back();
    if (!onlyReadBy(out_value, g, 0)) continue;
    if (!streamsSingleRowGemm(gemmOf(g).n, gemmOf(g).k)) continue;
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
    fold["norm_epsilon"] = np.epsilon;
    fold["norm_x_type"] = typeOr(np.x_type, "bf16");
    fold["norm_residual_type"] = typeOr(np.residual_type, "bf16");
    fold["norm_sum_type"] = typeOr(np.sum_type, "bf16");
    fold["norm_weight_type"] = typeOr(np.weight_type, "f32");
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
    if (!isGemm(i) || gemm.value_args.empty() || gemmOf(i).bias) continue;
    if (norm.kind != StepKind::kResidualRmsNorm || norm.value_args.size() < 2 || norm.results.size() != 2) continue;
    const ResidualRmsNormParams& np = std::get<ResidualRmsNormParams>(norm.params);
    if (!np.writes_sum || typeOr(np.x_type, "bf16") != "f32" || typeOr(np.sum_type, "bf16") != "f32" ||
        !onlyReadBy(gemm.results[0], i + 1, 1))
      continue;
    const int64_t x = norm.value_args[0], sum = norm.results[0];
    if (x == sum) continue;  // in place: cuBLASLt's autotuning reruns would add twice
    const bool clash = overlap(sum, x) || overlap(sum, gemm.value_args[0]);
    if (clash && (pinned.count(sum) || entry.views.count(sum) || int64_t(i) <= own_sum_busy_until)) continue;
    if (clash) own_sum_busy_until = int64_t(last_read.count(sum) ? last_read[sum] : i + 1);
    RmsNormParams over_sum{.hidden = np.hidden, .epsilon = np.epsilon, .weight_type = np.weight_type,
                           .x_type = "f32", .out_type = np.out_type};
    nlohmann::json rms = toJson(over_sum);
    out[i].writes_norm_sum = true;
    out[i + 1].sum_from_gemm = true;
    out[i + 1].norm_of_sum_params = std::move(rms);
    out[i + 1].sum_own_storage = clash;
  }
  return out;
}

PlanEntry planEntryOf(const Entry& entry, const std::string& activation_type) {
  PlanEntry plan;
  plan.activation_type = activation_type;
  for (const EntryOutput& out : entry.outputs) plan.pinned.insert(out.value);
  for (const EntryValue& v : entry.values) {
    if (v.view_of) {
      plan.pinned.insert(*v.view_of);
      plan.views.insert(v.id);
    }
    const EntryValue* storage = &v;
    while (storage && storage->view_of) storage = entry.findValue(*storage->view_of);
    if (storage) plan.storage[v.id] = {storage->offset, storage->offset + storage->row_bytes};
  }
  for (const Step& step : entry.steps) {
    PlanStep p{step.kind, step.params, {}, step.results, step.instance};
    for (const StepArg& a : step.args) p.value_args.push_back(a.kind == StepArg::Kind::kValue ? a.id : -1);
    plan.steps.push_back(std::move(p));
  }
  return plan;
}

}  // namespace kiln::cuda_codegen
