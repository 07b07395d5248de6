//===- XfmrTypes.cpp - xfmr types and attributes ---------------------------===//

#include "dialects/xfmr/IR/XfmrDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace kiln::xfmr;

#define GET_TYPEDEF_CLASSES
#include "dialects/xfmr/IR/XfmrTypes.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/xfmr/IR/XfmrAttrs.cpp.inc"

void XfmrDialect::registerTypes() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "dialects/xfmr/IR/XfmrTypes.cpp.inc"
      >();
}

void XfmrDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/xfmr/IR/XfmrAttrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// QuantType
//===----------------------------------------------------------------------===//

namespace {
struct QuantScheme {
  llvm::StringLiteral kind;
  unsigned fixedBlock;  // 0: any block size (kiln's own schemes)
  double bitsPerElement;
  bool gguf;
  bool separateScales;  // kiln's quantized schemes keep their scales in a tensor apart
  bool sparse24;        // 2:4 compressed (docs/design/sparsity.md)
};
// Bits per element include the per-block scales (q4_1: 16 nibbles + two f16
// per 32 elements = 24 bytes / 32 = 6 bits).
// 2:4 kinds: half the elements kept, plus a 4-bit index pair per 4 (1 bit
// an element); sp24's values are bf16 on the GPU.
constexpr QuantScheme kSchemes[] = {
    {"q4_0", 32, 4.5, true, false, false},   {"q4_1", 32, 5.0, true, false, false},
    {"q5_0", 32, 5.5, true, false, false},   {"q5_1", 32, 6.0, true, false, false},
    {"q8_0", 32, 8.5, true, false, false},   {"q4_k", 256, 4.5, true, false, false},
    {"q5_k", 256, 5.5, true, false, false},  {"q6_k", 256, 6.5625, true, false, false},
    {"int8", 0, 8.0, false, true, false},    {"int4", 0, 4.0, false, true, false},
    {"fp8e4m3", 0, 8.0, false, true, false}, {"sp24", 0, 9.0, false, false, true},
    {"int8sp24", 0, 5.0, false, true, true}, {"int4sp24", 0, 3.0, false, true, true},
};
const QuantScheme* findScheme(llvm::StringRef kind) {
  for (const QuantScheme& scheme : kSchemes)
    if (scheme.kind == kind) return &scheme;
  return nullptr;
}
}  // namespace

LogicalResult QuantType::verify(function_ref<InFlightDiagnostic()> emitError,
                                llvm::StringRef kind, unsigned block) {
  const QuantScheme* scheme = findScheme(kind);
  if (!scheme) {
    std::string accepted;
    for (const QuantScheme& s : kSchemes)
      accepted += (accepted.empty() ? "" : ", ") + s.kind.str();
    return emitError() << "unknown quantization kind '" << kind
                       << "', expected one of: " << accepted;
  }
  if (scheme->fixedBlock != 0 && block != scheme->fixedBlock)
    return emitError() << "quantization kind '" << kind << "' has block size "
                       << block << ", expected " << scheme->fixedBlock;
  // int4sp24's groups are whole 64-column spans: one 32-value block of the
  // compressed row each.
  if (kind == "int4sp24" && (block == 0 || block % 64 != 0))
    return emitError() << "quantization kind 'int4sp24' has block size " << block
                       << ", expected a positive multiple of 64";
  if ((kind == "sp24" || kind == "int8sp24") && block != 0)
    return emitError() << "quantization kind '" << kind << "' has block size " << block
                       << ", expected 0";
  return success();
}

bool QuantType::isGgufBlockFormat() const { return findScheme(getKind())->gguf; }

bool QuantType::hasSeparateScales() const { return findScheme(getKind())->separateScales; }

bool QuantType::isSparse24() const { return findScheme(getKind())->sparse24; }

double QuantType::bitsPerElement() const {
  return findScheme(getKind())->bitsPerElement;
}

std::string kiln::xfmr::elementTypeName(Type type) {
  if (auto quant = dyn_cast<QuantType>(type)) return quant.getKind().str();
  std::string name;
  llvm::raw_string_ostream os(name);
  type.print(os);
  return name;
}

//===----------------------------------------------------------------------===//
// KvPoolType
//===----------------------------------------------------------------------===//

std::string kiln::xfmr::kvPoolTypeName(KvPoolType pool) {
  Type element = pool.getElementType();
  if (element.isInteger(8)) return "int8";
  if (isa<Float8E4M3FNType>(element)) return "fp8e4m3";
  return elementTypeName(element);
}

LogicalResult KvPoolType::verify(function_ref<InFlightDiagnostic()> emitError,
                                 unsigned pageSize, unsigned kvHeads,
                                 unsigned headDim, Type elementType) {
  if (pageSize == 0 || kvHeads == 0 || headDim == 0)
    return emitError() << "kv_pool dimensions must be positive, got page size "
                       << pageSize << ", " << kvHeads << " kv heads, head dim "
                       << headDim;
  if (!mlir::isa<FloatType, QuantType>(elementType) &&
      !elementType.isInteger(8))
    return emitError() << "kv_pool element type " << elementType
                       << " is not supported, expected a float type, i8 or "
                          "!xfmr.quant";
  return success();
}

//===----------------------------------------------------------------------===//
// StatePoolType
//===----------------------------------------------------------------------===//

LogicalResult StatePoolType::verify(function_ref<InFlightDiagnostic()> emitError,
                                    llvm::ArrayRef<int64_t> slotShape, Type elementType) {
  if (slotShape.empty())
    return emitError() << "state_pool needs a slot shape, got none";
  for (int64_t extent : slotShape)
    if (extent <= 0 || ShapedType::isDynamic(extent))
      return emitError() << "state_pool slot extents must be static and positive, got " << extent;
  if (!mlir::isa<FloatType>(elementType))
    return emitError() << "state_pool element type " << elementType << " is not supported, expected a float type";
  return success();
}

int64_t StatePoolType::slotElements() const {
  int64_t elements = 1;
  for (int64_t extent : getSlotShape()) elements *= extent;
  return elements;
}

//===----------------------------------------------------------------------===//
// RopeAttr
//===----------------------------------------------------------------------===//

LogicalResult RopeAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               llvm::APFloat thetaValue, llvm::StringRef style,
                               llvm::StringRef scaling, llvm::APFloat factorValue,
                               llvm::APFloat lowValue, llvm::APFloat highValue,
                               int64_t originalMaxPosition) {
  double theta = thetaValue.convertToDouble();
  double factor = factorValue.convertToDouble();
  double lowFreqFactor = lowValue.convertToDouble();
  double highFreqFactor = highValue.convertToDouble();
  if (!(theta > 0))
    return emitError() << "rope theta " << theta << " must be > 0";
  if (style != "half" && style != "interleaved")
    return emitError() << "rope style '" << style
                       << "', expected 'half' or 'interleaved'";
  if (scaling != "none" && scaling != "linear" && scaling != "llama3")
    return emitError() << "rope scaling '" << scaling
                       << "', expected 'none', 'linear' or 'llama3'";
  if (!(factor > 0))
    return emitError() << "rope scaling factor " << factor << " must be > 0";
  if (scaling == "llama3") {
    if (!(highFreqFactor > lowFreqFactor))
      return emitError() << "llama3 rope scaling needs high_freq_factor ("
                         << highFreqFactor << ") > low_freq_factor ("
                         << lowFreqFactor << ")";
    if (originalMaxPosition <= 0)
      return emitError() << "llama3 rope scaling needs original_max_position "
                            "> 0, got "
                         << originalMaxPosition;
  }
  return success();
}
