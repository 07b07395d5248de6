#include "models/quantize/plan_linears.h"

namespace kiln::quantize {
namespace {

using formats::WeightRole;

struct RoleAt {
  WeightRole role;
  int layer;
};

}  // namespace

int64_t storageOf(const Entry& entry, int64_t value) {
  for (const EntryValue* v = entry.findValue(value); v && v->view_of; v = entry.findValue(value))
    value = *v->view_of;
  return value;
}

Result<std::vector<PlanLinear>> findPlanLinears(const Manifest& plan,
                                                const formats::ModelSource& model) {
  std::map<std::string, RoleAt> roles;
  for (int layer = 0; layer < int(model.config().num_layers); ++layer)
    for (WeightRole role : kDecoderLinearRoles) roles[model.weightName(role, layer)] = {role, layer};

  const Entry* entry = plan.findEntry("forward");
  if (!entry) return makeError("{}: the plan has no forward entry", plan.path);
  std::vector<PlanLinear> out;
  for (size_t i = 0; i < entry->steps.size(); ++i) {
    const Step& step = entry->steps[i];
    if (step.kind != StepKind::kGemm || step.args.size() < 2) continue;
    const ManifestWeight* w = plan.findWeight(step.args[1].id);
    if (!w || w->shape.size() != 2) continue;
    // The checkpoint tensors behind the weight, in row order.
    std::vector<const ManifestWeight*> sources;
    if (w->source) {
      sources.push_back(w);
    } else if (w->prepare && w->prepare->op == "concat_rows") {
      for (int64_t id : w->prepare->inputs) {
        const ManifestWeight* in = plan.findWeight(id);
        if (!in || !in->source) break;
        sources.push_back(in);
      }
      if (sources.size() != w->prepare->inputs.size()) continue;
    } else {
      continue;
    }
    PlanLinear linear;
    linear.step = i;
    linear.weight = w->id;
    linear.input = storageOf(*entry, step.args[0].id);
    linear.rows = w->shape[0];
    linear.cols = w->shape[1];
    int64_t row = 0, known = 0;
    for (const ManifestWeight* s : sources) {
      auto it = roles.find(*s->source);
      const int64_t rows = s->shape.empty() ? 0 : s->shape[0];
      if (it != roles.end()) {
        linear.parts.push_back({*s->source, it->second.role, row, rows});
        linear.layer = it->second.layer;
        ++known;
      }
      row += rows;
    }
    if (known == 0) continue;
    if (known != int64_t(sources.size()))
      return makeError("{}: {}: gemm weight '{}' joins decoder linears with other tensors",
                       plan.path, step.path, w->name);
    out.push_back(std::move(linear));
  }
  return out;
}

}  // namespace kiln::quantize
