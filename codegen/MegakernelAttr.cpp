//===- MegakernelAttr.cpp - the megakernel's task graph as an attribute ----===//

#include "codegen/MegakernelAttr.h"

#include "mlir/IR/Builders.h"

using namespace mlir;

namespace kiln {

DictionaryAttr megakernelAttr(MLIRContext* context, const MegakernelPlan& plan) {
  Builder b(context);
  SmallVector<Attribute> counters;
  for (const MegakernelCounter& c : plan.counters)
    counters.push_back(b.getDictionaryAttr({b.getNamedAttr("id", b.getI64IntegerAttr(c.id)),
                                            b.getNamedAttr("step", b.getI64IntegerAttr(c.step)),
                                            b.getNamedAttr("final", b.getI64IntegerAttr(c.final))}));
  SmallVector<Attribute> tasks;
  for (const MegakernelTask& t : plan.tasks) {
    SmallVector<NamedAttribute> fields = {
        b.getNamedAttr("kind", b.getStringAttr(std::string(stepKindName(t.kind)))),
        b.getNamedAttr("step", b.getI64IntegerAttr(t.step))};
    if (t.kind == StepKind::kGemm)
      fields.push_back(b.getNamedAttr("columns", b.getDenseI64ArrayAttr({t.column_begin, t.column_end})));
    if (t.kind == StepKind::kPagedAttention) {
      fields.push_back(b.getNamedAttr("sequence", b.getI64IntegerAttr(t.sequence)));
      fields.push_back(b.getNamedAttr("kv_head", b.getI64IntegerAttr(t.kv_head)));
    }
    SmallVector<int64_t> waits;
    for (const MegakernelWait& w : t.waits) waits.append({w.counter, w.value});
    fields.push_back(b.getNamedAttr("waits", b.getDenseI64ArrayAttr(waits)));
    fields.push_back(b.getNamedAttr("signals", b.getDenseI64ArrayAttr(t.signals)));
    tasks.push_back(b.getDictionaryAttr(fields));
  }
  return b.getDictionaryAttr({b.getNamedAttr("max_batch", b.getI64IntegerAttr(plan.max_batch)),
                              b.getNamedAttr("tile", b.getI64IntegerAttr(plan.tile)),
                              b.getNamedAttr("counters", b.getArrayAttr(counters)),
                              b.getNamedAttr("tasks", b.getArrayAttr(tasks))});
}

namespace {

FailureOr<int64_t> integer(Operation* op, DictionaryAttr dict, StringRef key, StringRef where) {
  auto value = dict.getAs<IntegerAttr>(key);
  if (!value) return op->emitError() << kMegakernelAttrName << "." << where << ": expected an integer '" << key << "'";
  return value.getInt();
}

FailureOr<ArrayRef<int64_t>> integers(Operation* op, DictionaryAttr dict, StringRef key, StringRef where) {
  auto value = dict.getAs<DenseI64ArrayAttr>(key);
  if (!value)
    return op->emitError() << kMegakernelAttrName << "." << where << ": expected array<i64: ...> '" << key << "'";
  return value.asArrayRef();
}

}  // namespace

FailureOr<MegakernelPlan> megakernelFromAttr(Operation* op, DictionaryAttr attr) {
  MegakernelPlan plan;
  FailureOr<int64_t> maxBatch = integer(op, attr, "max_batch", "max_batch");
  FailureOr<int64_t> tile = integer(op, attr, "tile", "tile");
  if (failed(maxBatch) || failed(tile)) return failure();
  plan.max_batch = *maxBatch;
  plan.tile = *tile;
  auto counters = attr.getAs<ArrayAttr>("counters");
  auto tasks = attr.getAs<ArrayAttr>("tasks");
  if (!counters || !tasks)
    return op->emitError() << kMegakernelAttrName << ": expected arrays 'counters' and 'tasks'";
  for (auto [i, c] : llvm::enumerate(counters)) {
    auto dict = dyn_cast<DictionaryAttr>(c);
    const std::string where = "counters[" + std::to_string(i) + "]";
    if (!dict) return op->emitError() << kMegakernelAttrName << "." << where << ": expected a dictionary";
    FailureOr<int64_t> id = integer(op, dict, "id", where), step = integer(op, dict, "step", where),
                       final = integer(op, dict, "final", where);
    if (failed(id) || failed(step) || failed(final)) return failure();
    plan.counters.push_back({*id, *step, *final});
  }
  for (auto [i, t] : llvm::enumerate(tasks)) {
    auto dict = dyn_cast<DictionaryAttr>(t);
    const std::string where = "tasks[" + std::to_string(i) + "]";
    if (!dict) return op->emitError() << kMegakernelAttrName << "." << where << ": expected a dictionary";
    MegakernelTask task;
    auto kind = dict.getAs<StringAttr>("kind");
    std::optional<StepKind> parsed = kind ? parseStepKind(kind.getValue().str()) : std::nullopt;
    if (!parsed) return op->emitError() << kMegakernelAttrName << "." << where << ": expected a step kind 'kind'";
    task.kind = *parsed;
    FailureOr<int64_t> step = integer(op, dict, "step", where);
    FailureOr<ArrayRef<int64_t>> waits = integers(op, dict, "waits", where);
    FailureOr<ArrayRef<int64_t>> signals = integers(op, dict, "signals", where);
    if (failed(step) || failed(waits) || failed(signals)) return failure();
    task.step = *step;
    if (waits->size() % 2 != 0)
      return op->emitError() << kMegakernelAttrName << "." << where << ".waits: expected (counter, value) pairs";
    for (size_t w = 0; w < waits->size(); w += 2) task.waits.push_back({(*waits)[w], (*waits)[w + 1]});
    task.signals.assign(signals->begin(), signals->end());
    if (task.kind == StepKind::kGemm) {
      FailureOr<ArrayRef<int64_t>> columns = integers(op, dict, "columns", where);
      if (failed(columns)) return failure();
      if (columns->size() != 2)
        return op->emitError() << kMegakernelAttrName << "." << where << ".columns: expected [begin, end]";
      task.column_begin = (*columns)[0];
      task.column_end = (*columns)[1];
    }
    if (task.kind == StepKind::kPagedAttention) {
      FailureOr<int64_t> sequence = integer(op, dict, "sequence", where), head = integer(op, dict, "kv_head", where);
      if (failed(sequence) || failed(head)) return failure();
      task.sequence = *sequence;
      task.kv_head = *head;
    }
    plan.tasks.push_back(std::move(task));
  }
  return plan;
}

std::optional<llvm::json::Value> megakernelJson(Operation* op, Attribute attr) {
  auto dict = dyn_cast<DictionaryAttr>(attr);
  if (!dict) {
    op->emitError() << kMegakernelAttrName << ": expected a dictionary";
    return std::nullopt;
  }
  FailureOr<MegakernelPlan> plan = megakernelFromAttr(op, dict);
  if (failed(plan)) return std::nullopt;
  llvm::Expected<llvm::json::Value> json = llvm::json::parse(toJson(*plan).dump());
  if (!json) {
    op->emitError() << kMegakernelAttrName << ": " << llvm::toString(json.takeError());
    return std::nullopt;
  }
  return std::move(*json);
}

}  // namespace kiln
