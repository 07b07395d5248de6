#include "models/quantize/calibration_set.h"

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/tokenizer/gguf_vocab.h"
#include "runtime/tokenizer/tokenizer.h"
#include "runtime/tokenizer/tokenizer_json.h"

namespace kiln::quantize {
namespace {

namespace fs = std::filesystem;

Result<std::vector<int32_t>> idsFromJson(const std::string& path, const std::string& text,
                                         int64_t vocab) {
  auto doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_array())
    return makeError("{}: expected a JSON array of token ids", path);
  std::vector<int32_t> ids;
  ids.reserve(doc.size());
  for (size_t i = 0; i < doc.size(); ++i) {
    const auto& v = doc[i];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= vocab)
      return makeError("{}: entry {} is {}, expected a token id in [0, {})", path, i, v.dump(),
                       vocab);
    ids.push_back(int32_t(v.get<int64_t>()));
  }
  return ids;
}

Result<Tokenizer> modelTokenizer(const formats::ModelSource& model, const std::string& path) {
  if (const formats::GgufFile* gguf = model.gguf()) {
    auto vocab = vocabFromGguf(*gguf);
    if (!vocab.ok()) return vocab.error();
    return Tokenizer::create(vocab.take());
  }
  const std::string json = model.path() + "/tokenizer.json";
  std::error_code ec;
  if (!fs::exists(json, ec))
    return makeError("{}: a calibration text is tokenized with the model's tokenizer, and {} has "
                     "no tokenizer.json: give the calibration as a .json array of token ids",
                     path, model.path());
  auto vocab = vocabFromTokenizerJson(json);
  if (!vocab.ok()) return vocab.error();
  return Tokenizer::create(vocab.take());
}

}  // namespace

Result<CalibrationSet> readCalibrationSet(const std::string& path, const formats::ModelSource& model,
                                          int64_t ctx, int64_t max_tokens) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    return makeError("{}: the calibration file does not exist or is not a file", path);
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in.good() && !in.eof()) return makeError("{}: cannot read the calibration file", path);
  if (text.str().empty()) return makeError("{}: the calibration file is empty", path);
  const int64_t context = model.config().max_position_embeddings;
  if (context > 0 && ctx > context)
    return makeError("--calibration-ctx {} exceeds the context length of {}, {} tokens", ctx,
                     model.path(), context);

  const int64_t vocab = model.config().vocab_size;
  std::vector<int32_t> ids;
  std::optional<int32_t> bos;
  if (fs::path(path).extension() == ".json") {
    auto parsed = idsFromJson(path, text.str(), vocab);
    if (!parsed.ok()) return parsed.error();
    ids = parsed.take();
  } else {
    auto tokenizer = modelTokenizer(model, path);
    if (!tokenizer.ok()) return tokenizer.error();
    ids = tokenizer->encode(text.str(), EncodeOptions{.add_special = false});
    if (tokenizer->bos() >= 0) bos = tokenizer->bos();
  }
  CalibrationSet set;
  set.file_tokens = int64_t(ids.size());
  if (set.file_tokens < ctx)
    return makeError("{}: {} tokens, fewer than one calibration sequence of {} "
                     "(--calibration-ctx)",
                     path, set.file_tokens, ctx);
  const int64_t count = std::min(set.file_tokens, max_tokens) / ctx;
  for (int64_t s = 0; s < count; ++s) {
    std::vector<int32_t> seq(ids.begin() + s * ctx, ids.begin() + (s + 1) * ctx);
    if (bos) seq[0] = *bos;
    set.sequences.push_back(std::move(seq));
  }
  return set;
}

}  // namespace kiln::quantize
