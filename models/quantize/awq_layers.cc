#include "models/quantize/awq_layers.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "models/quantize/awq.h"
#include "models/quantize/float_tensors.h"
#include "models/quantize/input_statistics.h"

namespace kiln::quantize {
namespace {

using formats::WeightRole;

// The linears that read one input, stacked: their weights [rows, cols] and
// each checkpoint tensor's rows among them.
struct Group {
  int64_t input = 0;
  int64_t rows = 0, cols = 0;
  std::vector<double> w;
  std::vector<LinearPart> parts;  // row_begin within the group
  std::vector<double> s;          // channel scales, [cols]
  AwqScales found;
  bool quantized = true;          // false: cols not whole groups, left float
  std::set<std::string> divided;  // parts a later linear's scales were folded into

  bool has(WeightRole role) const {
    return std::any_of(parts.begin(), parts.end(), [&](const LinearPart& p) { return p.role == role; });
  }
  bool only(std::initializer_list<WeightRole> roles) const {
    return std::all_of(parts.begin(), parts.end(), [&](const LinearPart& p) {
      return std::find(roles.begin(), roles.end(), p.role) != roles.end();
    });
  }
  const LinearPart* part(WeightRole role) const {
    for (const LinearPart& p : parts)
      if (p.role == role) return &p;
    return nullptr;
  }
  std::string names() const {
    std::string out;
    for (const LinearPart& p : parts) {
      if (!out.empty()) out += '+';
      out += formats::weightRoleName(p.role);
    }
    return out;
  }
};

}  // namespace

AwqLayers::AwqLayers(const formats::ModelSource& model, const WeightStore& weights,
                     std::vector<PlanLinear> linears, const QuantizeOptions& options,
                     QuantizedModel& out, QuantizeLog log)
    : model_(model), weights_(weights), linears_(std::move(linears)), options_(options), out_(out),
      log_(std::move(log)) {
  for (const PlanLinear& l : linears_) {
    std::vector<int64_t>& inputs = layer_inputs_[l.layer];
    if (std::find(inputs.begin(), inputs.end(), l.input) == inputs.end()) inputs.push_back(l.input);
  }
}

std::map<int64_t, int64_t> AwqLayers::inputs() const {
  std::map<int64_t, int64_t> out;
  for (const PlanLinear& l : linears_) out[l.input] = l.cols;
  return out;
}

Status AwqLayers::onInput(int64_t value, const float* x, int64_t tokens, int64_t k) {
  InputStatistics stats(k);
  stats.add(x, tokens);
  stats_[value] = {stats.hessian(), stats.meanAbs()};
  for (const auto& [layer, inputs] : layer_inputs_) {
    if (done_[layer] ||
        !std::all_of(inputs.begin(), inputs.end(), [&](int64_t v) { return stats_.count(v) > 0; }))
      continue;
    KILN_RETURN_IF_ERROR(quantizeLayer(layer));
    done_[layer] = true;
    for (int64_t v : inputs) stats_.erase(v);
  }
  return {};
}

Status AwqLayers::finish() const {
  for (const auto& [layer, inputs] : layer_inputs_)
    if (!done_.count(layer) || !done_.at(layer))
      return makeError("awq: the calibration run never reached all inputs of layer {}", layer);
  return {};
}

Status AwqLayers::quantizeLayer(int layer) {
  const formats::ModelConfig& config = model_.config();
  const int64_t group_size = options_.grid.group;
  AwqOptions awq;
  awq.grid = options_.grid;
  awq.clip = options_.clip;

  std::vector<Group> groups;
  for (int64_t input : layer_inputs_[layer]) {
    Group g;
    g.input = input;
    for (const PlanLinear& l : linears_) {
      if (l.input != input) continue;
      const BoundWeight* bound = weights_.find(l.weight);
      if (!bound) return makeError("awq: plan weight {} is not bound", l.weight);
      auto values = boundWeightF32(*bound);
      if (!values.ok()) return values.error();
      g.cols = l.cols;
      for (LinearPart p : l.parts) {
        p.row_begin += g.rows;
        g.parts.push_back(p);
      }
      g.w.insert(g.w.end(), values->begin(), values->end());
      g.rows += l.rows;
    }
    g.s.assign(size_t(g.cols), 1.0);
    g.quantized = g.cols % group_size == 0;
    if (!g.quantized) ++skipped_[g.names()];
    groups.push_back(std::move(g));
  }
  auto find = [&](std::initializer_list<WeightRole> roles, WeightRole needs) -> Group* {
    for (Group& g : groups)
      if (g.only(roles) && g.has(needs)) return &g;
    return nullptr;
  };
  Group* qkv = find({WeightRole::kQ, WeightRole::kK, WeightRole::kV}, WeightRole::kQ);
  Group* o = find({WeightRole::kO}, WeightRole::kO);
  Group* gate_up = find({WeightRole::kGate, WeightRole::kUp}, WeightRole::kUp);
  Group* down = find({WeightRole::kDown}, WeightRole::kDown);
  const formats::TensorInfo* attn_norm = model_.weight(WeightRole::kAttnNorm, layer);
  const formats::TensorInfo* ffn_norm = model_.weight(WeightRole::kFfnNorm, layer);
  const int64_t heads = config.num_heads, kv_heads = config.num_kv_heads, dim = config.head_dim;

  // The channel scales, each searched on the float weights and inputs.
  auto search = [&](Group& g, const std::vector<double>& x_mean) {
    const std::vector<double>& h = stats_.at(g.input).h;
    g.found = awqSearchScales(g.w.data(), g.rows, g.cols, h.data(), x_mean.data(), awq);
    g.s = g.found.scales;
  };
  // Each searched on a linear that is quantized and has where to fold.
  const bool qkv_folds = qkv && qkv->quantized && attn_norm;
  const bool gate_up_folds = gate_up && gate_up->quantized && ffn_norm;
  const bool down_folds = down && down->quantized && gate_up;
  const bool o_folds = o && o->quantized && qkv && qkv->has(WeightRole::kV) &&
                       o->cols == heads * dim && qkv->part(WeightRole::kV)->rows == kv_heads * dim;
  if (qkv_folds) search(*qkv, stats_.at(qkv->input).x_mean);
  if (gate_up_folds) search(*gate_up, stats_.at(gate_up->input).x_mean);
  if (down_folds) search(*down, stats_.at(down->input).x_mean);
  if (o_folds) {
    // One mean |x| for the heads of a KV group, so their channels share s.
    const std::vector<double>& x_mean = stats_.at(o->input).x_mean;
    std::vector<double> tied(x_mean.size(), 0.0);
    const int64_t per_kv = heads / kv_heads;
    for (int64_t kv = 0; kv < kv_heads; ++kv)
      for (int64_t d = 0; d < dim; ++d) {
        double sum = 0.0;
        for (int64_t h = kv * per_kv; h < (kv + 1) * per_kv; ++h) sum += x_mean[size_t(h * dim + d)];
        for (int64_t h = kv * per_kv; h < (kv + 1) * per_kv; ++h)
          tied[size_t(h * dim + d)] = sum / double(per_kv);
      }
    search(*o, tied);
  }

  // Fold: W diag(s) reads x / s, which the op before makes.
  for (Group& g : groups)
    for (int64_t r = 0; r < g.rows; ++r)
      for (int64_t c = 0; c < g.cols; ++c) g.w[size_t(r * g.cols + c)] *= g.s[size_t(c)];
  auto divideNorm = [&](const formats::TensorInfo* norm, const Group& g) -> Status {
    auto values = readTensorF32(model_, norm->name);
    if (!values.ok()) return values.error();
    for (int64_t c = 0; c < g.cols; ++c) (*values)[size_t(c)] = float((*values)[size_t(c)] / g.s[size_t(c)]);
    out_.floats[norm->name] = values.take();
    return {};
  };
  // Rows [part.row_begin, + part.rows) of `into` divided by s[j] (and the
  // part's bias, when the model has one).
  auto divideRows = [&](Group& into, const LinearPart& part, const std::vector<double>& s,
                        const formats::TensorInfo* bias) -> Status {
    into.divided.insert(part.tensor);
    for (int64_t j = 0; j < part.rows; ++j)
      for (int64_t c = 0; c < into.cols; ++c)
        into.w[size_t((part.row_begin + j) * into.cols + c)] /= s[size_t(j)];
    if (!bias) return {};
    auto values = readTensorF32(model_, bias->name);
    if (!values.ok()) return values.error();
    for (int64_t j = 0; j < part.rows; ++j) (*values)[size_t(j)] = float((*values)[size_t(j)] / s[size_t(j)]);
    out_.floats[bias->name] = values.take();
    return {};
  };
  if (qkv_folds) KILN_RETURN_IF_ERROR(divideNorm(attn_norm, *qkv));
  if (gate_up_folds) KILN_RETURN_IF_ERROR(divideNorm(ffn_norm, *gate_up));
  if (o_folds) {
    std::vector<double> s_v(size_t(kv_heads * dim));
    for (int64_t kv = 0; kv < kv_heads; ++kv)
      for (int64_t d = 0; d < dim; ++d) s_v[size_t(kv * dim + d)] = o->s[size_t(kv * (heads / kv_heads) * dim + d)];
    KILN_RETURN_IF_ERROR(divideRows(*qkv, *qkv->part(WeightRole::kV), s_v,
                                    model_.weight(WeightRole::kVBias, layer)));
  }
  if (down_folds)
    KILN_RETURN_IF_ERROR(divideRows(*gate_up, *gate_up->part(WeightRole::kUp), down->s, nullptr));

  std::string summary;
  for (Group& g : groups) {
    if (!g.quantized) {
      for (const LinearPart& p : g.parts)  // stays float, with the folded rows
        if (g.divided.count(p.tensor))
          out_.floats[p.tensor].assign(g.w.begin() + p.row_begin * g.cols,
                                       g.w.begin() + (p.row_begin + p.rows) * g.cols);
      continue;
    }
    if (awq.clip) {
      const std::vector<double> hs = scaledHessian(stats_.at(g.input).h.data(), g.cols, g.s);
      for (const LinearPart& p : g.parts)
        if (p.role != WeightRole::kQ && p.role != WeightRole::kK)
          awqClip(&g.w[size_t(p.row_begin * g.cols)], p.rows, g.cols, hs.data(), awq);
    }
    const formats::Int4Linear q = int4Rtn(g.w.data(), g.rows, g.cols, options_.grid);
    for (const LinearPart& p : g.parts) out_.linears[p.tensor] = int4Rows(q, p.row_begin, p.rows);
    summary += summary.empty() ? "" : ", ";
    summary += g.found.scales.empty()
                   ? fmt::format("{} unscaled", g.names())
                   : fmt::format("{} alpha {:.2f} ({:.3f} of RTN's error)", g.names(), g.found.alpha,
                                 g.found.rtn_loss > 0 ? g.found.loss / g.found.rtn_loss : 1.0);
  }
  if (!summary.empty()) log_(fmt::format("awq: layer {}/{}: {}", layer + 1, config.num_layers, summary));
  return {};
}

}  // namespace kiln::quantize
