// What a model-writing compile changes in a model, by checkpoint tensor
// name, and the model file it writes with the changes: the source's format,
// so the runtime reads it with the loaders it has.
//   GGUF          DIR/model.gguf: every metadata entry and tensor of the
//                 source, the decoder linears as q4_0 (symmetric) or q4_1
//                 blocks, kiln.quantization.{method,group_size,sym} added
//                 (a pruned model: kiln.sparsity.{method,pattern})
//   checkpoint    DIR/model/: a GPTQ checkpoint (checkpoint_format gptq_v2;
//                 quantization_config.kiln_method names the method), which
//                 loads as q4_0 (sym) or q4_1 blocks; a pruned model a
//                 plain one; the tokenizer files copied
// Float tensors given new values (AWQ's scales folded into norms and
// linears, SparseGPT's pruned linears) are written as f32, except that a
// pruned checkpoint keeps each tensor's float type.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "models/formats/int4_linear.h"
#include "models/formats/model_source.h"
#include "models/quantize/int4_grid.h"
#include "runtime/support/error.h"

namespace kiln::quantize {

struct QuantizedModel {
  // rtn | gptq | awq   the linears quantized to int4
  // sparsegpt          the linears pruned 2:4 (sparsegpt.h), in `floats`
  // float              a GGUF's block-typed linears as f32, in `floats`,
  //                    which SparseGPT calibrates on; nothing added
  std::string method;
  Int4Options grid;
  std::map<std::string, formats::Int4Linear> linears;  // "<prefix>.weight" -> its codes
  std::map<std::string, std::vector<float>> floats;    // tensor -> its new values

  bool int4() const { return method == "rtn" || method == "gptq" || method == "awq"; }
};

// Whether writeQuantizedModel can write `source`'s form: a GGUF or a plain
// float checkpoint (not an int4 or compressed-tensors sparse one, whose
// packed tensors it would copy unchanged).
Status checkWritable(const formats::ModelSource& source);

// Writes the model under `dir` and returns its path (DIR/model.gguf or
// DIR/model).
Result<std::string> writeQuantizedModel(const formats::ModelSource& source,
                                        const QuantizedModel& model, const std::string& dir);

// The two formats, for writeQuantizedModel. A checkpoint's config.json and
// tokenizer files come from its directory.
Status writeQuantizedGguf(const formats::GgufFile& source, const QuantizedModel& model,
                          const std::string& path);
Status writeCheckpoint(const formats::SafetensorsCheckpoint& source, const QuantizedModel& model,
                       const std::string& dir);

}  // namespace kiln::quantize
