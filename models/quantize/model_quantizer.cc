#include "models/quantize/model_quantizer.h"

#include <fmt/format.h>

#include <cctype>
#include <chrono>
#include <map>

#include "models/quantize/calibration_run.h"
#include "models/quantize/calibration_set.h"
#include "models/quantize/float_tensors.h"
#include "models/quantize/gptq.h"
#include "models/quantize/input_statistics.h"
#include "models/quantize/plan_linears.h"

namespace kiln::quantize {
namespace {

using formats::WeightRole;

constexpr WeightRole kLinearRoles[] = {WeightRole::kQ,    WeightRole::kK,  WeightRole::kV,
                                       WeightRole::kO,    WeightRole::kGate, WeightRole::kUp,
                                       WeightRole::kDown};

std::string notFloat(const std::string& method, const std::string& tensor, formats::ElementType type,
                     bool gguf) {
  std::string name(formats::elementTypeName(type));
  for (char& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
  return fmt::format("tensor '{}' is {}: --quant-method={} quantizes float weights (f32, f16, "
                     "bf16){}",
                     tensor, name, method,
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
    for (WeightRole role : kLinearRoles) {
      const formats::TensorInfo* t = model.weight(role, layer);
      if (!t) continue;
      if (!isFloatType(t->type)) return makeError("{}: {}", model.path(), notFloat("rtn", t->name, t->type, gguf));
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
                       notFloat(options.method, l.parts[0].tensor, w->format_type, gguf));
    auto writable = store.writableData(l.weight);
    if (!writable.ok()) return writable.error();
  }
  return Calibration{linears.take(), set.take()};
}

Status quantizeGptq(const Manifest& plan, WeightStore& store, const Calibration& calibration,
                    const QuantizeOptions& options, QuantizedModel& out,
                    std::map<std::string, int>& skipped, const QuantizeLog& log) {
  GptqOptions gptq;
  gptq.grid = options.grid;
  gptq.act_order = options.act_order;
  gptq.damp = options.damp;
  std::map<int64_t, int64_t> inputs;
  for (const PlanLinear& l : calibration.linears) inputs[l.input] = l.cols;
  const int64_t layers = store.source().config().num_layers;
  auto onInput = [&](int64_t value, const float* x, int64_t tokens, int64_t k) -> Status {
    InputStatistics stats(k);
    stats.add(x, tokens);
    const std::vector<double> h = stats.hessian();
    for (const PlanLinear& l : calibration.linears) {
      if (l.input != value) continue;
      if (l.cols % options.grid.group != 0) {
        ++skipped[partNames(l)];
        continue;
      }
      const BoundWeight& bound = *store.find(l.weight);
      auto w = boundWeightF32(bound);
      if (!w.ok()) return w.error();
      auto q = gptqQuantize(w->data(), l.rows, l.cols, h.data(), gptq);
      if (!q.ok()) return makeError("gptq: layer {} {}: {}", l.layer, partNames(l), q.error().message);
      const std::vector<float> quantized = formats::dequantizeInt4(*q);
      // The layer's output error beside round-to-nearest's, for the log.
      const std::vector<double> w64(w->begin(), w->end()), q64(quantized.begin(), quantized.end());
      std::vector<double> rtn(w64.size());
      int4RtnValues(w64.data(), l.rows, l.cols, options.grid, rtn.data());
      const double error = outputError(w64.data(), q64.data(), l.rows, l.cols, h.data());
      const double rtn_error = outputError(w64.data(), rtn.data(), l.rows, l.cols, h.data());
      auto bytes = store.writableData(l.weight);
      if (!bytes.ok()) return bytes.error();
      KILN_RETURN_IF_ERROR(storeWeightF32(*bytes, bound.format_type, quantized));
      for (const LinearPart& p : l.parts) out.linears[p.tensor] = int4Rows(*q, p.row_begin, p.rows);
      log(fmt::format("gptq: layer {}/{} {}: {:.3f} of RTN's output error", l.layer + 1, layers,
                      partNames(l), rtn_error > 0 ? error / rtn_error : 1.0));
    }
    return {};
  };
  return runCalibration(plan, store, calibration.set, inputs, onInput);
}

}  // namespace

Result<std::string> quantizeModel(const std::string& model_path, const Manifest* plan,
                                  const QuantizeOptions& options, const std::string& dir,
                                  const QuantizeLog& log) {
  const auto start = std::chrono::steady_clock::now();
  QuantizedModel out;
  out.method = options.method;
  out.grid = options.grid;
  std::optional<formats::ModelSource> model;
  std::optional<WeightStore> store;
  std::map<std::string, int> skipped;  // linears left float, by name
  if (options.method == "rtn") {
    auto opened = formats::ModelSource::open(model_path, formats::OpenMode::kWithData);
    if (!opened.ok()) return opened.error();
    model.emplace(opened.take());
    KILN_RETURN_IF_ERROR(quantizeRtn(*model, options, out, skipped));
  } else {
    if (!plan) return makeError("--quant-method={} needs the model's float plan", options.method);
    WeightStoreOptions store_options;
    store_options.source_path = model_path;
    auto opened = WeightStore::open(*plan, store_options);
    if (!opened.ok()) return opened.error();
    store.emplace(opened.take());
    auto calibration = prepareCalibration(*plan, *store, options);
    if (!calibration.ok()) return calibration.error();
    log(fmt::format("{}: {} calibration sequences of {} tokens ({} tokens in {})", options.method,
                    calibration->set.sequences.size(), options.calibration_ctx,
                    calibration->set.file_tokens, options.calibration));
    if (options.method == "gptq") {
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
    for (const auto& [name, n] : skipped)
      names += fmt::format("{}{} x{}", names.empty() ? "" : ", ", name, n);
    log(fmt::format("{}: left float, their input features not whole groups of {}: {}", options.method,
                    options.grid.group, names));
  }
  const formats::ModelSource& source = model ? *model : store->source();
  auto path = writeQuantizedModel(source, out, dir);
  if (!path.ok()) return path.error();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  log(fmt::format("{}: {} weight tensors quantized in {:.1f} s, wrote {}", options.method,
                  out.linears.size(), seconds, *path));
  return path;
}

}  // namespace kiln::quantize
