#include "runtime/tokenizer/tokenizer_json.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace kiln {

namespace {

using Json = nlohmann::json;

// What the pre_tokenizer / normalizer / decoder sections told us.
struct Pipeline {
  std::vector<std::string> regexes;
  bool byte_level = false;
  bool metaspace = false;      // '▁' stands for spaces
  bool space_prefix = false;   // prepend '▁' to the text
};

std::string quoteLiteral(const std::string& text) {
  // \Q...\E quotes everything except a literal "\E".
  std::string out = "\\Q";
  for (size_t pos = 0; pos < text.size(); ++pos) {
    if (text.compare(pos, 2, "\\E") == 0) {
      out += "\\E\\\\E\\Q";
      ++pos;
    } else {
      out.push_back(text[pos]);
    }
  }
  return out + "\\E";
}

Status readPreTokenizer(const Json& node, std::string_view where,
                        Pipeline& pipeline) {
  if (node.is_null()) return Status::success();
  std::string type = node.value("type", "");
  if (type == "Sequence") {
    for (const Json& child : node.value("pretokenizers", Json::array())) {
      KILN_RETURN_IF_ERROR(readPreTokenizer(child, where, pipeline));
    }
  } else if (type == "Split") {
    const Json& pattern = node.value("pattern", Json::object());
    if (node.value("invert", false) ||
        node.value("behavior", "Isolated") != "Isolated") {
      return makeError("{}: pre_tokenizer Split: only behavior Isolated "
                       "without invert is supported",
                       where);
    }
    if (pattern.contains("Regex")) {
      pipeline.regexes.push_back(pattern["Regex"].get<std::string>());
    } else if (pattern.contains("String")) {
      pipeline.regexes.push_back(
          quoteLiteral(pattern["String"].get<std::string>()));
    } else {
      return makeError("{}: pre_tokenizer Split: pattern has neither Regex "
                       "nor String",
                       where);
    }
  } else if (type == "Digits") {
    pipeline.regexes.push_back(node.value("individual_digits", false)
                                   ? "\\p{N}"
                                   : "\\p{N}+");
  } else if (type == "ByteLevel") {
    if (node.value("add_prefix_space", false)) {
      return makeError("{}: pre_tokenizer ByteLevel with add_prefix_space is "
                       "not supported",
                       where);
    }
    pipeline.byte_level = true;
    if (node.value("use_regex", true)) {
      auto gpt2 = preTokenizerRegexes(PreTokenizerKind::kGpt2);
      pipeline.regexes.insert(pipeline.regexes.end(), gpt2.begin(), gpt2.end());
    }
  } else if (type == "Metaspace") {
    pipeline.metaspace = true;
    std::string scheme = node.value("prepend_scheme", "always");
    pipeline.space_prefix =
        node.value("add_prefix_space", true) && scheme != "never";
  } else {
    return makeError("{}: pre_tokenizer type '{}' is not supported "
                     "(supported: Sequence, Split, Digits, ByteLevel, "
                     "Metaspace)",
                     where, type);
  }
  return Status::success();
}

Status readNormalizer(const Json& node, std::string_view where,
                      Pipeline& pipeline) {
  if (node.is_null()) return Status::success();
  std::string type = node.value("type", "");
  if (type == "Sequence") {
    for (const Json& child : node.value("normalizers", Json::array())) {
      KILN_RETURN_IF_ERROR(readNormalizer(child, where, pipeline));
    }
  } else if (type == "Prepend") {
    pipeline.space_prefix = node.value("prepend", "") == "\xE2\x96\x81";
  } else if (type == "Replace") {
    // The SentencePiece normalizer replaces " " with '▁'.
    if (node.value("content", "") == "\xE2\x96\x81") pipeline.metaspace = true;
  } else if (type == "NFC") {
    // Accepted without normalizing: text that is already NFC (nearly all
    // text) tokenizes identically.
  } else {
    return makeError("{}: normalizer type '{}' is not supported (supported: "
                     "Sequence, Prepend, Replace, NFC)",
                     where, type);
  }
  return Status::success();
}

// Token text from a config entry: "bos_token": "<s>" or {"content": "<s>"}.
std::string configTokenText(const Json& config, const char* key) {
  if (!config.is_object() || !config.contains(key)) return {};
  const Json& value = config[key];
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object()) return value.value("content", "");
  return {};
}

Result<TokenizerVocab> parse(const Json& root, std::string_view name,
                             const Json& config) {
  TokenizerVocab vocab;
  const Json& model = root.value("model", Json::object());
  if (model.value("type", "BPE") != "BPE") {
    return makeError("{}: model.type '{}' is not supported (supported: BPE)",
                     name, model.value("type", ""));
  }
  const Json& vocab_map = model.value("vocab", Json::object());
  if (!vocab_map.is_object() || vocab_map.empty()) {
    return makeError("{}: model.vocab: expected a non-empty object of "
                     "token -> id",
                     name);
  }
  auto place = [&](int64_t id, const std::string& text,
                   TokenType type) -> Status {
    if (id < 0 || id >= (1 << 24)) {
      return makeError("{}: token '{}' has id {}, expected 0..{}", name, text,
                       id, (1 << 24) - 1);
    }
    if (static_cast<size_t>(id) >= vocab.tokens.size()) {
      vocab.tokens.resize(id + 1);
      vocab.token_types.resize(id + 1, TokenType::kUnused);
    }
    vocab.tokens[id] = text;
    vocab.token_types[id] = type;
    return Status::success();
  };
  for (const auto& [text, id] : vocab_map.items()) {
    if (!id.is_number_integer()) {
      return makeError("{}: model.vocab['{}']: expected an integer id", name,
                       text);
    }
    KILN_RETURN_IF_ERROR(place(id.get<int64_t>(), text, TokenType::kNormal));
  }
  for (const Json& added : root.value("added_tokens", Json::array())) {
    if (!added.contains("id") || !added.contains("content")) {
      return makeError("{}: added_tokens: entry without id or content", name);
    }
    if (!added["id"].is_number_integer()) {
      return makeError("{}: added_tokens: id {}: expected an integer id", name,
                       added["id"].dump());
    }
    KILN_RETURN_IF_ERROR(place(added["id"].get<int64_t>(),
                               added["content"].get<std::string>(),
                               added.value("special", false)
                                   ? TokenType::kControl
                                   : TokenType::kUserDefined));
  }

  size_t index = 0;
  for (const Json& merge : model.value("merges", Json::array())) {
    if (merge.is_string()) {
      const std::string text = merge.get<std::string>();
      size_t space = text.size() > 1 ? text.find(' ', 1) : std::string::npos;
      if (space == std::string::npos) {
        return makeError("{}: model.merges[{}] '{}': expected \"left right\"",
                         name, index, text);
      }
      vocab.merges.emplace_back(text.substr(0, space), text.substr(space + 1));
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      vocab.merges.emplace_back(merge[0].get<std::string>(),
                                merge[1].get<std::string>());
    } else {
      return makeError("{}: model.merges[{}]: expected \"left right\" or "
                       "[\"left\", \"right\"]",
                       name, index);
    }
    ++index;
  }
  vocab.ignore_merges = model.value("ignore_merges", false);

  Pipeline pipeline;
  KILN_RETURN_IF_ERROR(readNormalizer(root.value("normalizer", Json()), name,
                                      pipeline));
  KILN_RETURN_IF_ERROR(readPreTokenizer(root.value("pre_tokenizer", Json()),
                                        name, pipeline));
  const Json& decoder = root.value("decoder", Json());
  if (!decoder.is_null() && decoder.value("type", "") == "ByteLevel") {
    pipeline.byte_level = true;
  }
  if (pipeline.byte_level) {
    vocab.model = TokenizerModel::kByteLevelBpe;
    vocab.pre = PreTokenizerKind::kCustom;
    vocab.pre_regexes = pipeline.regexes;
  } else if (pipeline.metaspace || model.value("byte_fallback", false)) {
    vocab.model = TokenizerModel::kSentencePiece;
    vocab.add_space_prefix = pipeline.space_prefix;
    for (size_t i = 0; i < vocab.tokens.size(); ++i) {
      const std::string& t = vocab.tokens[i];
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') {
        vocab.token_types[i] = TokenType::kByte;
      }
    }
  } else {
    return makeError("{}: neither a ByteLevel pre-tokenizer/decoder nor a "
                     "SentencePiece ('▁') normalizer: cannot tell how bytes "
                     "map to tokens",
                     name);
  }
  for (size_t i = 0; i < vocab.tokens.size(); ++i) {
    if (vocab.tokens[i].empty() && vocab.token_types[i] == TokenType::kUnused) {
      return makeError("{}: no token has id {} (ids must be dense)", name, i);
    }
  }

  auto idOf = [&](const std::string& text) -> int32_t {
    if (text.empty()) return -1;
    for (size_t i = 0; i < vocab.tokens.size(); ++i) {
      if (vocab.tokens[i] == text) return static_cast<int32_t>(i);
    }
    return -1;
  };
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    vocab.unk_id = idOf(model["unk_token"].get<std::string>());
    if (vocab.unk_id >= 0) vocab.token_types[vocab.unk_id] = TokenType::kUnknown;
  }
  // TemplateProcessing {"single": [{"SpecialToken": {"id": "<s>"}}, ...]}
  // means "add this token first".
  const Json& post = root.value("post_processor", Json());
  std::vector<const Json*> processors;
  if (post.is_object()) {
    if (post.value("type", "") == "Sequence") {
      for (const Json& p : post.value("processors", Json::array())) {
        processors.push_back(&p);
      }
    } else {
      processors.push_back(&post);
    }
  }
  for (const Json* p : processors) {
    if (p->value("type", "") != "TemplateProcessing") continue;
    const Json& single = p->value("single", Json::array());
    if (!single.empty() && single.front().contains("SpecialToken")) {
      vocab.bos_id =
          idOf(single.front()["SpecialToken"].value("id", std::string()));
      vocab.add_bos = vocab.bos_id >= 0;
    }
    if (single.size() > 1 && single.back().contains("SpecialToken")) {
      vocab.eos_id =
          idOf(single.back()["SpecialToken"].value("id", std::string()));
      vocab.add_eos = vocab.eos_id >= 0;
    }
  }
  if (int32_t id = idOf(configTokenText(config, "bos_token")); id >= 0) {
    vocab.bos_id = id;
  }
  if (int32_t id = idOf(configTokenText(config, "eos_token")); id >= 0) {
    vocab.eos_id = id;
  }
  if (int32_t id = idOf(configTokenText(config, "pad_token")); id >= 0) {
    vocab.pad_id = id;
  }
  return vocab;
}

}  // namespace

Result<TokenizerVocab> vocabFromTokenizerJsonText(std::string_view json_text,
                                                  std::string_view name,
                                                  std::string_view config_json) {
  Json root = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return makeError("{}: not a JSON object", name);
  }
  Json config;
  if (!config_json.empty()) {
    config = Json::parse(config_json, nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded()) config = Json();
  }
  // nlohmann throws on type mismatches inside value()/get(); a malformed
  // file must still come back as one error line.
  try {
    return parse(root, name, config);
  } catch (const Json::exception& e) {
    return makeError("{}: unexpected JSON structure: {}", name, e.what());
  }
}

Result<TokenizerVocab> vocabFromTokenizerJson(const std::string& path) {
  auto readText = [](const std::filesystem::path& p, std::string& out) {
    std::ifstream in(p, std::ios::binary);
    if (!in) return false;
    std::ostringstream buffer;
    buffer << in.rdbuf();
    out = buffer.str();
    return true;
  };
  std::string text;
  if (!readText(path, text)) return makeError("{}: cannot read file", path);
  std::string config;
  readText(std::filesystem::path(path).parent_path() / "tokenizer_config.json",
           config);
  return vocabFromTokenizerJsonText(text, path, config);
}

}  // namespace kiln
