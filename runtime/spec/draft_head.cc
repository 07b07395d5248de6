#include "runtime/spec/draft_head.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "models/formats/safetensors_file.h"
#include "runtime/numerics/quant.h"
#include "runtime/spec/layer_skip.h"

namespace kiln::spec {

namespace {

// A tensor of `shape` as f32, from f32 or bf16 data.
Status readTensor(const formats::SafetensorsFile& file, const std::string& name, std::vector<int64_t> shape,
                  float* out) {
  const formats::TensorInfo* t = file.findTensor(name);
  if (!t) return makeError("{}: no tensor '{}'", file.path(), name);
  if (t->shape != shape)
    return makeError("{}: tensor '{}' has shape [{}], expected [{}]", file.path(), name, fmt::join(t->shape, ", "),
                     fmt::join(shape, ", "));
  auto data = file.tensorData(*t);
  if (!data.ok()) return data.error();
  int64_t count = 1;
  for (int64_t d : shape) count *= d;
  if (t->type == formats::ElementType::F32) {
    std::memcpy(out, data->data(), size_t(count) * 4);
  } else if (t->type == formats::ElementType::BF16) {
    for (int64_t i = 0; i < count; ++i) {
      uint16_t bits;
      std::memcpy(&bits, data->data() + 2 * i, 2);
      out[i] = bf16ToF32(bits);
    }
  } else {
    return makeError("{}: tensor '{}' is neither f32 nor bf16", file.path(), name);
  }
  return {};
}

}  // namespace

Result<DraftHeadWeights> loadDraftHead(const std::string& directory, int64_t target_hidden) {
  const std::string config_path = directory + "/config.json";
  std::ifstream in(config_path);
  if (!in) return makeError("draft head {}: cannot read config.json", directory);
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json config = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object())
    return makeError("draft head {}: config.json is not a JSON object", config_path);
  if (config.value("kind", std::string()) != "medusa")
    return makeError("draft head {}: kind is '{}', expected \"medusa\"", config_path,
                     config.value("kind", std::string()));
  DraftHeadWeights w;
  if (!config.contains("hidden_size") || !config["hidden_size"].is_number_integer() || !config.contains("heads") ||
      !config["heads"].is_number_integer())
    return makeError("draft head {}: expected integer fields hidden_size and heads", config_path);
  w.hidden = config["hidden_size"].get<int64_t>();
  w.heads = config["heads"].get<int64_t>();
  if (w.hidden != target_hidden)
    return makeError("draft head {}: its hidden size is {}, the target's {}: the head reads the target's hidden "
                     "states",
                     directory, w.hidden, target_hidden);
  if (w.heads < 1 || w.heads > 64)
    return makeError("draft head {}: heads is {}, expected 1 to 64", config_path, w.heads);
  auto file = formats::SafetensorsFile::open(directory + "/model.safetensors", formats::OpenMode::kWithData);
  if (!file.ok()) return makeError("draft head {}: {}", directory, file.error().message);
  const int64_t h = w.hidden;
  w.weight.resize(size_t(w.heads * h * h));
  w.bias.resize(size_t(w.heads * h));
  for (int64_t i = 0; i < w.heads; ++i) {
    const std::string prefix = "heads." + std::to_string(i) + ".";
    KILN_RETURN_IF_ERROR(readTensor(*file, prefix + "weight", {h, h}, w.weight.data() + i * h * h));
    KILN_RETURN_IF_ERROR(readTensor(*file, prefix + "bias", {h}, w.bias.data() + i * h));
  }
  return w;
}

Status DraftHeadDrafter::propose(std::span<const DraftRequest> rows) {
  const int64_t h = w_.hidden, vocab = target_.vocabSize();
  // z rows: for each row that drafts, one a depth.
  first_.assign(rows.size(), -1);
  int64_t z_rows = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    const DraftRequest& row = rows[r];
    row.out->reset(row.history.empty() ? 0 : row.history.back());
    if (row.history.empty() || int64_t(row.hidden.size()) != h) continue;
    first_[r] = z_rows;
    z_rows += std::min(row.shape.depth(), w_.heads);
  }
  if (z_rows == 0) return {};
  z_.resize(size_t(z_rows * h));
  for (size_t r = 0; r < rows.size(); ++r) {
    if (first_[r] < 0) continue;
    const float* x = rows[r].hidden.data();
    const int64_t depth = std::min(rows[r].shape.depth(), w_.heads);
    for (int64_t i = 0; i < depth; ++i) {
      float* z = z_.data() + (first_[r] + i) * h;
      const float* wi = w_.weight.data() + i * h * h;
      const float* bi = w_.bias.data() + i * h;
      for (int64_t o = 0; o < h; ++o) {
        float acc = bi[o];
        const float* wrow = wi + o * h;
        for (int64_t j = 0; j < h; ++j) acc += wrow[j] * x[j];
        z[o] = x[o] + acc / (1.0f + std::exp(-acc));  // h + SiLU(W h + b)
      }
    }
  }
  logits_.resize(size_t(z_rows * vocab));
  if (Status ran = target_.lmHead(z_, z_rows, logits_); !ran.ok()) {
    for (const DraftRequest& row : rows) row.out->reset(row.history.empty() ? 0 : row.history.back());
    return ran;
  }
  // Depth d + 1: every node at depth d gets head d's best widths[d] tokens.
  std::vector<int32_t> frontier, next;
  DraftTree top;
  for (size_t r = 0; r < rows.size(); ++r) {
    if (first_[r] < 0) continue;
    DraftTree& tree = *rows[r].out;
    const int64_t depth = std::min(rows[r].shape.depth(), w_.heads);
    frontier.assign(1, 0);
    for (int64_t d = 0; d < depth; ++d) {
      top.reset(0);
      addTopChildren(std::span<const float>(logits_).subspan(size_t((first_[r] + d) * vocab), size_t(vocab)),
                     rows[r].shape.widths[size_t(d)], 0, top);
      next.clear();
      for (int32_t node : frontier)
        for (int64_t c = 1; c < top.size(); ++c) next.push_back(tree.add(node, top.tokens[size_t(c)]));
      frontier.swap(next);
    }
  }
  return {};
}

}  // namespace kiln::spec
