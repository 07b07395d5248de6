#include "models/quantize/model_quantizer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cctype>
#include <chrono>
#include <functional>
#include <map>
#include <set>

#include "models/quantize/calibration_run.h"
#include "models/quantize/calibration_set.h"
#include "models/quantize/float_tensors.h"
#include "models/quantize/gptq.h"
#include "models/quantize/input_statistics.h"
#include "models/quantize/plan_linears.h"
#include "models/quantize/sparsegpt.h"

namespace kiln::quantize {
namespace {

using formats::WeightRole;

// `options`: the method's; `gguf`: whether the model is one, which
// scripts/dequantize_gguf.py can make float.
std::string notFloat(const QuantizeOptions& options, const std::string& tensor,
                     formats::ElementType type, bool gguf) {
  std::string name(formats::elementTypeName(type));
  for (char& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
  return fmt::format("tensor '{}' is {}: {} {} float weights (f32, f16, bf16){}", tensor, name,
                     options.writerFlag(), options.sparsegpt ? "prunes" : "quantizes",
                     gguf ? "; make a float GGUF first (scripts/dequantize_gguf.py)" : "");
}

std::string partNames(const PlanLinear& linear) {
  std::string out;
  for (const LinearPart& p : linear.parts) {
    if (!out.empty()) out += '+';
    out += formats::weightRoleName(p.role);
  }
  return out;
}

Status quantizeRtn(const formats::ModelSource& model, const QuantizeOptions& options,
                   QuantizedModel& out, std::map<std::string, int>& skipped) {
  const bool gguf = model.format() == formats::ModelSource::Format::kGguf;
  for (int layer = 0; layer < int(model.config().num_layers); ++layer)
    for (WeightRole role : kDecoderLinearRoles) {
      const formats::TensorInfo* t = model.weight(role, layer);
      if (!t) continue;
      if (!isFloatType(t->type)) return makeError("{}: {}", model.path(), notFloat(options, t->name, t->type, gguf));
      if (t->shape.size() != 2 || t->shape[1] % options.grid.group != 0) {
        ++skipped[std::string(formats::weightRoleName(role))];
        continue;
      }
      auto values = readTensorF32(model, t->name);
      if (!values.ok()) return values.error();
      std::vector<double> w(values->begin(), values->end());
      out.linears[t->name] = int4Rtn(w.data(), t->shape[0], t->shape[1], options.grid);
    }
  return {};
}

// The calibrating methods: the plan's decoder linears, their weights made
// writable (GPTQ rewrites them) and checked to be float.
struct Calibration {
  std::vector<PlanLinear> linears;
  CalibrationSet set;
};

Result<Calibration> prepareCalibration(const Manifest& plan, WeightStore& store,
                                       const QuantizeOptions& options) {
  const formats::ModelSource& model = store.source();
  auto set = readCalibrationSet(options.calibration, model, options.calibration_ctx,
                                options.calibration_tokens);
  if (!set.ok()) return set.error();
  auto linears = findPlanLinears(plan, model);
  if (!linears.ok()) return linears.error();
  if (linears->empty()) return makeError("{}: the plan has no decoder linears to quantize", plan.path);
  const bool gguf = model.format() == formats::ModelSource::Format::kGguf;
  for (const PlanLinear& l : *linears) {
    const BoundWeight* w = store.find(l.weight);
    if (!w) return makeError("{}: plan weight {} is not bound", plan.path, l.weight);
    if (!isFloatType(w->format_type))
      return makeError("{}: {}", model.path(),
                       notFloat(options, l.parts[0].tensor, w->format_type, gguf));
    auto writable = store.writableData(l.weight);
    if (!writable.ok()) return writable.error();
  }
  return Calibration{linears.take(), set.take()};
}

// What a sequential method (GPTQ, SparseGPT) makes of one linear: the values
// the plan runs from then on, and their output error beside the method's
// baseline's, for the log.
struct LinearResult {
  std::vector<float> values;
  double error = 0.0, baseline = 0.0;
};
using SequentialMethod = std::function<Result<LinearResult>(
    const PlanLinear& linear, const std::vector<float>& w, const std::vector<double>& h)>;

// One calibration run in which each linear is replaced by `method` as soon as
// its input is complete, its values written over the plan's weights so that
// every later linear's H comes from the layers already replaced. Linears
// whose input features are not a multiple of `cols_multiple` are left.
Status runSequential(const Manifest& plan, WeightStore& store, const Calibration& calibration,
                     const std::string& name, const std::string& baseline, int64_t cols_multiple,
                     const SequentialMethod& method, std::map<std::string, int>& skipped,
                     const QuantizeLog& log) {
  std::map<int64_t, int64_t> inputs;
  for (const PlanLinear& l : calibration.linears) inputs[l.input] = l.cols;
  const int64_t layers = store.source().config().num_layers;
  auto onInput = [&](int64_t value, const float* x, int64_t tokens, int64_t k) -> Status {
    InputStatistics stats(k);
    stats.add(x, tokens);
    const std::vector<double> h = stats.hessian();
    for (const PlanLinear& l : calibration.linears) {
      if (l.input != value) continue;
      if (l.cols % cols_multiple != 0) {
        ++skipped[partNames(l)];
        continue;
      }
      const BoundWeight& bound = *store.find(l.weight);
      auto w = boundWeightF32(bound);
      if (!w.ok()) return w.error();
      auto result = method(l, *w, h);
      if (!result.ok())
        return makeError("{}: layer {} {}: {}", name, l.layer, partNames(l), result.error().message);
      auto bytes = store.writableData(l.weight);
      if (!bytes.ok()) return bytes.error();
      KILN_RETURN_IF_ERROR(storeWeightF32(*bytes, bound.format_type, result->values));
      log(fmt::format("{}: layer {}/{} {}: {:.3f} of {}'s output error", name, l.layer + 1, layers,
                      partNames(l), result->baseline > 0 ? result->error / result->baseline : 1.0,
                      baseline));
    }
    return {};
  };
  return runCalibration(plan, store, calibration.set, inputs, onInput);
}

Status quantizeGptq(const Manifest& plan, WeightStore& store, const Calibration& calibration,
                    const QuantizeOptions& options, QuantizedModel& out,
                    std::map<std::string, int>& skipped, const QuantizeLog& log) {
  GptqOptions gptq;
  gptq.grid = options.grid;
  gptq.act_order = options.act_order;
  gptq.damp = options.damp;
  auto method = [&](const PlanLinear& l, const std::vector<float>& w,
                    const std::vector<double>& h) -> Result<LinearResult> {
    auto q = gptqQuantize(w.data(), l.rows, l.cols, h.data(), gptq);
    if (!q.ok()) return q.error();
    LinearResult result{formats::dequantizeInt4(*q)};
    const std::vector<double> w64(w.begin(), w.end()), q64(result.values.begin(), result.values.end());
    std::vector<double> rtn(w64.size());
    int4RtnValues(w64.data(), l.rows, l.cols, options.grid, rtn.data());
    result.error = outputError(w64.data(), q64.data(), l.rows, l.cols, h.data());
    result.baseline = outputError(w64.data(), rtn.data(), l.rows, l.cols, h.data());
    for (const LinearPart& p : l.parts) out.linears[p.tensor] = int4Rows(*q, p.row_begin, p.rows);
    return result;
  };
  return runSequential(plan, store, calibration, "gptq", "RTN", options.grid.group, method, skipped,
                       log);
}

Status pruneSparseGpt(const Manifest& plan, WeightStore& store, const Calibration& calibration,
                      const QuantizeOptions& options, QuantizedModel& out,
                      std::map<std::string, int>& skipped, const QuantizeLog& log) {
  SparseGptOptions sparse;
  sparse.damp = options.damp;
  auto method = [&](const PlanLinear& l, const std::vector<float>& w,
                    const std::vector<double>& h) -> Result<LinearResult> {
    auto pruned = sparseGptPrune(w.data(), l.rows, l.cols, h.data(), sparse);
    if (!pruned.ok()) return pruned.error();
    LinearResult result{std::vector<float>(pruned->begin(), pruned->end())};
    const std::vector<double> w64(w.begin(), w.end());
    std::vector<double> magnitude(w64.size());
    magnitudePrune24(w64.data(), l.rows, l.cols, magnitude.data());
    result.error = outputError(w64.data(), pruned->data(), l.rows, l.cols, h.data());
    result.baseline = outputError(w64.data(), magnitude.data(), l.rows, l.cols, h.data());
    for (const LinearPart& p : l.parts) {
      const auto first = result.values.begin() + p.row_begin * l.cols;
      out.floats[p.tensor].assign(first, first + p.rows * l.cols);
    }
    return result;
  };
  return runSequential(plan, store, calibration, "sparsegpt", "magnitude pruning",
                       kSparseColumnMultiple, method, skipped, log);
}

}  // namespace

Result<std::string> floatLinearsModel(const std::string& model_path, const QuantizeOptions& options,
                                      const std::string& dir, const QuantizeLog& log) {
  auto opened = formats::ModelSource::open(model_path, formats::OpenMode::kWithData);
  if (!opened.ok()) return opened.error();
  const formats::ModelSource& model = *opened;
  QuantizedModel copy;
  copy.method = "float";
  std::set<std::string> types;
  for (int layer = 0; layer < int(model.config().num_layers); ++layer)
    for (WeightRole role : kDecoderLinearRoles) {
      const formats::TensorInfo* t = model.weight(role, layer);
      if (!t || isFloatType(t->type)) continue;
      if (!model.gguf()) return makeError("{}: {}", model.path(), notFloat(options, t->name, t->type, false));
      auto values = readTensorF32(model, t->name);
      if (!values.ok()) return values.error();
      copy.floats[t->name] = values.take();
      types.insert(std::string(formats::elementTypeName(t->type)));
    }
  if (copy.floats.empty()) return model_path;
  auto path = writeQuantizedModel(model, copy, dir);
  if (!path.ok()) return path.error();
  log(fmt::format("{}: {} decoder linears ({}) dequantized to f32 into {}", options.writer(),
                  copy.floats.size(), fmt::join(types, ", "), *path));
  return path;
}

Result<std::string> quantizeModel(const std::string& model_path, const Manifest* plan,
                                  const QuantizeOptions& options, const std::string& dir,
                                  const QuantizeLog& log) {
  const auto start = std::chrono::steady_clock::now();
  const std::string name = options.writer();
  QuantizedModel out;
  out.method = name;
  out.grid = options.grid;
  std::optional<formats::ModelSource> model;
  std::optional<WeightStore> store;
  std::map<std::string, int> skipped;  // linears left as they are, by name
  if (!options.calibrated()) {
    auto opened = formats::ModelSource::open(model_path, formats::OpenMode::kWithData);
    if (!opened.ok()) return opened.error();
    model.emplace(opened.take());
    KILN_RETURN_IF_ERROR(quantizeRtn(*model, options, out, skipped));
  } else {
    if (!plan) return makeError("{} needs the model's float plan", options.writerFlag());
    WeightStoreOptions store_options;
    store_options.source_path = model_path;
    auto opened = WeightStore::open(*plan, store_options);
    if (!opened.ok()) return opened.error();
    store.emplace(opened.take());
    auto calibration = prepareCalibration(*plan, *store, options);
    if (!calibration.ok()) return calibration.error();
    KILN_RETURN_IF_ERROR(checkWritable(store->source()));  // before the run, not after
    log(fmt::format("{}: {} calibration sequences of {} tokens ({} tokens in {})", name,
                    calibration->set.sequences.size(), options.calibration_ctx,
                    calibration->set.file_tokens, options.calibration));
    if (options.sparsegpt) {
      KILN_RETURN_IF_ERROR(pruneSparseGpt(*plan, *store, *calibration, options, out, skipped, log));
    } else if (options.method == "gptq") {
      KILN_RETURN_IF_ERROR(quantizeGptq(*plan, *store, *calibration, options, out, skipped, log));
    } else {
      AwqLayers awq(store->source(), *store, calibration->linears, options, out, log);
      KILN_RETURN_IF_ERROR(runCalibration(*plan, *store, calibration->set, awq.inputs(),
                                          [&](int64_t value, const float* x, int64_t tokens, int64_t k) {
                                            return awq.onInput(value, x, tokens, k);
                                          }));
      KILN_RETURN_IF_ERROR(awq.finish());
      skipped = awq.skipped();
    }
  }
  if (!skipped.empty()) {
    std::string names;
    for (const auto& [linear, n] : skipped)
      names += fmt::format("{}{} x{}", names.empty() ? "" : ", ", linear, n);
    if (options.sparsegpt)
      log(fmt::format("sparsegpt: note: left dense, their input features not a multiple of {}: {}",
                      kSparseColumnMultiple, names));
    else
      log(fmt::format("{}: left float, their input features not whole groups of {}: {}", name,
                      options.grid.group, names));
  }
  const formats::ModelSource& source = model ? *model : store->source();
  auto path = writeQuantizedModel(source, out, dir);
  if (!path.ok()) return path.error();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  log(fmt::format("{}: {} weight tensors {} in {:.1f} s, wrote {}", name,
                  options.sparsegpt ? out.floats.size() : out.linears.size(),
                  options.sparsegpt ? "pruned" : "quantized", seconds, *path));
  return path;
}

}  // namespace kiln::quantize
